"""Layers on sparse_mm, laid out as PyTorch Geometric's ``torch_geometric.nn``:

- :mod:`~torchsparsegradutils.nn.linear`: ``SparseLinear``, a linear layer whose weight is
  sparse on a fixed pattern;
- :mod:`~torchsparsegradutils.nn.conv`: the graph convolutions ``GCNConv`` (with
  ``gcn_norm`` and ``gcn_adjacency``), ``GINConv``, ``SAGEConv`` (with ``sage_adjacency``), ``GATConv`` (on
  ``graph_attention``, with ``gat_adjacency``) and ``GATv2Conv`` (on ``graph_attention_v2``), one per file;
- :mod:`~torchsparsegradutils.nn.functional`: ``dropout`` of features that may be sparse, and
  ``softmax``, PyG's grouped softmax of edge scores (``torch_geometric.utils.softmax``).

Each layer takes its input features ``x`` dense, as a torch sparse tensor (COO or CSR) or
as a :class:`~torchsparsegradutils.SparseCSR`: a sparse ``x`` is multiplied by the weight
with ``sparse_mm`` (``x`` is never densified, except for ``SAGEConv(aggr="max")``'s
aggregation), and ``x``'s own gradient, where it requires one, stays on its pattern.

The layers hold their sparse matrix as a :class:`~torchsparsegradutils.SparseCSR` (index
buffers plus a values tensor), so they move with ``.to(device)``, save with
``state_dict`` and compile with ``torch.compile(fullgraph=True)``; gradients reach only
the stored values.  Every name is importable from here, as from each file.
"""
from .conv import GATConv, GATv2Conv, GCNConv, GINConv, SAGEConv, gat_adjacency, gcn_adjacency, gcn_norm, sage_adjacency
from .functional import dropout, softmax
from .linear import SparseLinear

__all__ = ["SparseLinear", "GCNConv", "gcn_norm", "gcn_adjacency", "GINConv", "SAGEConv", "sage_adjacency", "GATConv",
           "gat_adjacency", "GATv2Conv", "dropout", "softmax"]
