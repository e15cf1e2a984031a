"""Graph convolutions (interim: all in gat.py while the split lands)."""
from .gat import GATConv, GCNConv, SAGEConv, gat_adjacency, gcn_norm, sage_adjacency
