"""Layers on sparse_mm (interim: all in conv/gat.py while the split lands)."""
from .conv.gat import GATConv, GCNConv, SAGEConv, SparseLinear, dropout, gat_adjacency, gcn_norm, sage_adjacency
