"""Graph convolutions, one per file as in PyTorch Geometric's ``torch_geometric.nn.conv``:
``gcn.py`` (``GCNConv``, ``gcn_norm``, ``gcn_adjacency``), ``gin.py`` (``GINConv``),
``sage.py`` (``SAGEConv``, ``sage_adjacency``), ``gat.py`` (``GATConv``, ``gat_adjacency``), ``gatv2.py`` (``GATv2Conv``); ``_edge_index.py`` holds what they share
about an ``edge_index`` (its check, the adjacency cache)."""
from .gat import GATConv, gat_adjacency
from .gatv2 import GATv2Conv
from .gcn import GCNConv, gcn_adjacency, gcn_norm
from .gin import GINConv
from .sage import SAGEConv, sage_adjacency

__all__ = ["GCNConv", "gcn_norm", "gcn_adjacency", "GINConv", "SAGEConv", "sage_adjacency", "GATConv", "gat_adjacency", "GATv2Conv"]
