"""``GCNConv``, the graph convolution of Kipf & Welling, and ``gcn_norm``, its normalised
adjacency ``D^{-1/2} (A + I) D^{-1/2}`` as a :class:`~torchsparsegradutils.SparseCSR`."""
from typing import Optional

import torch

from ..._core.intake import coo_structure
from ..._core.sparse_csr import SparseCSR
from ...sparse_matmul import sparse_mm
from .._features import linear
from ._edge_index import cached, check_edge_index

__all__ = ["GCNConv", "gcn_norm"]


def gcn_norm(edge_index: torch.Tensor, num_nodes: int, edge_weight: Optional[torch.Tensor] = None,
             add_self_loops: bool = True, dtype: torch.dtype = torch.float32) -> SparseCSR:
    r"""The normalised adjacency of Kipf & Welling, ``D^{-1/2} (A + I) D^{-1/2}``, as a SparseCSR.

    ``edge_index`` (2, E) lists edges ``source -> target``; row ``target`` of ``A`` gathers
    from column ``source`` (the message-passing convention of PyTorch Geometric), with
    weight ``edge_weight[e]`` (1 when not given).  Duplicate edges add up.  ``D`` is the
    row-sum (weighted in-degree plus the self loop).  The values are differentiable in
    ``edge_weight``, as in PyTorch Geometric's ``gcn_norm``.

    Raises ``ValueError`` for an ``edge_index`` not of shape (2, E), a node id outside
    ``[0, num_nodes)`` (checked before anything reads through it) or an ``edge_weight``
    not of shape (E,); ``TypeError`` for an ``edge_index`` that does not hold integers.

    >>> S = gcn_norm(torch.tensor([[0, 1], [1, 0]]), 2)
    >>> S.to_torch().to_dense()
    tensor([[0.5000, 0.5000],
            [0.5000, 0.5000]])
    """
    check_edge_index(edge_index)
    if num_nodes < 0:
        raise ValueError(f"num_nodes must be non-negative, got {num_nodes}")
    device, E = edge_index.device, edge_index.shape[1]
    if edge_weight is None:
        w = torch.ones(E, dtype=dtype, device=device)
    elif not isinstance(edge_weight, torch.Tensor) or edge_weight.shape != (E,) or edge_weight.device != device:
        got = (tuple(edge_weight.shape), edge_weight.device) if isinstance(edge_weight, torch.Tensor) else \
            type(edge_weight).__name__
        raise ValueError(f"edge_weight must have shape ({E},) and edge_index's device {device}, got {got}")
    else:
        w = edge_weight.to(dtype)
    idx = edge_index.flip(0).long()                           # (target, source)
    if add_self_loops:
        loop = torch.arange(num_nodes, device=device)
        idx = torch.cat([idx, torch.stack([loop, loop])], 1)
        w = torch.cat([w, torch.ones(num_nodes, dtype=dtype, device=device)])
    s = coo_structure(idx.contiguous(), (num_nodes, num_nodes))    # ValueError for an id out of range
    vals = s.values_of(w)                                     # duplicates summed, differentiably
    rows, cols = s.indices
    deg = vals.new_zeros(num_nodes).index_add(0, rows, vals)
    has = deg > 0
    dinv = torch.where(has, torch.where(has, deg, torch.ones_like(deg)).rsqrt(), torch.zeros_like(deg))
    return SparseCSR(s.ptr, cols, dinv[rows] * vals * dinv[cols], (num_nodes, num_nodes))


class GCNConv(torch.nn.Module):
    r"""Graph convolution ``X' = Â X W + b`` (Kipf & Welling), ``Â`` from :func:`gcn_norm`.

    ``forward(x, adjacency)`` takes the adjacency either as an ``edge_index`` (2, E)
    integer tensor, normalised on first use and cached while an ``edge_index`` of the
    same contents comes back (compared in full, O(E): an edit PyTorch's version counter
    misses, through ``.numpy()`` or ``.data``, is seen), for the same number of nodes,
    dtype and device (after ``.double()`` or ``.to(device)`` it is built again), or as a
    ready :class:`SparseCSR` (what ``torch.compile(fullgraph=True)`` should be given:
    build it once with :func:`gcn_norm`).  ``x`` may be sparse (see :mod:`torchsparsegradutils.nn`):
    ``X W`` is then ``sparse_mm(x, W^T)``.

    >>> conv = GCNConv(3, 2)
    >>> conv(torch.randn(4, 3), torch.tensor([[0, 1, 2], [1, 2, 3]])).shape
    torch.Size([4, 2])
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, add_self_loops: bool = True):
        super().__init__()
        self.lin = torch.nn.Linear(in_features, out_features, bias=False)
        self.bias = torch.nn.Parameter(torch.zeros(out_features)) if bias else None
        self.add_self_loops = add_self_loops
        self._cache = None                # ((num_nodes, dtype, add_self_loops), copy of edge_index, SparseCSR)

    def adjacency(self, edge_index: torch.Tensor, num_nodes: int) -> SparseCSR:
        """gcn_norm of edge_index in the layer's dtype, cached (see the class notes)."""
        key = (num_nodes, self.lin.weight.dtype, self.add_self_loops)
        return cached(self, key, edge_index,
                      lambda: gcn_norm(edge_index, num_nodes, add_self_loops=self.add_self_loops, dtype=key[1]))

    def forward(self, x, adjacency) -> torch.Tensor:
        A = adjacency if isinstance(adjacency, SparseCSR) else self.adjacency(adjacency, x.shape[0])
        out = sparse_mm(A, linear(x, self.lin.weight))
        return out + self.bias if self.bias is not None else out
