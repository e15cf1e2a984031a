"""``SAGEConv``, GraphSAGE (Hamilton et al.) as PyTorch Geometric has it, and
``sage_adjacency``, the aggregation matrix and ``sparse_mm`` reduction of its ``aggr``."""
from typing import Tuple, Union

import torch
import torch.nn.functional as F

from ..._core.intake import coo_structure
from ..._core.sparse_csr import SparseCSR
from ...sparse_matmul import sparse_mm
from .._aggr import max_aggregation
from .._features import check_features, is_sparse, linear, linear_t, to_dense_features
from ._edge_index import cached, check_edge_index, moved

__all__ = ["SAGEConv", "sage_adjacency"]

_SAGE_AGGR = {"mean": "mean", "max": "amax", "sum": "sum"}     # aggr -> sparse_mm's reduce


class SAGEConv(torch.nn.Module):
    r"""GraphSAGE (Hamilton et al.), PyTorch Geometric's ``SAGEConv``:
    ``x'_i = W_l · aggr_{j in N(i)} x_j + b + W_r · x_i``, then, with ``normalize=True``,
    each output row divided by its L2 norm.

    ``aggr`` is ``"mean"``, ``"max"`` or ``"sum"`` over the in-neighbours ``j -> i``
    (``edge_index[0]`` the sources, ``edge_index[1]`` the targets, PyG's direction); a node
    without neighbours aggregates to 0.  The parameters are PyG's: ``lin_l`` (with the
    bias) and ``lin_r`` (no bias; absent when ``root_weight=False``), both
    :class:`torch.nn.Linear`, so a PyG ``SAGEConv``'s ``state_dict`` loads as it is.
    ``in_channels`` may be a pair ``(source, target)`` widths, and ``x`` a pair
    ``(x_source, x_target)`` for a bipartite graph, as in PyG.

    ``forward(x, adjacency)`` takes an ``edge_index`` (2, E), built into the
    ``(n_target, n_source)`` adjacency on first use and cached as :class:`GCNConv`'s is
    (while an ``edge_index`` of the same contents comes back, for the same node counts,
    dtype and device).  Built from ``edge_index`` the aggregation is PyG's, repeated edges
    included: ``"sum"`` and ``"mean"`` count an edge given twice twice (``"mean"`` divides
    by the number of edges into ``i``), ``"max"`` sees it once.  ``adjacency`` may also
    be a ready :class:`SparseCSR` (or torch sparse tensor) ``A``, what a compiled model
    should get: then the aggregation is ``sparse_mm(A, x, reduce)`` with reduce
    ``"mean"``, ``"amax"`` or ``"sum"``, ``A``'s values weighting the messages and
    ``"mean"`` dividing by the row's number of stored entries (give ones as values, and no
    repeated entries, for PyG's result).

    ``x`` may be dense, a torch sparse tensor or a :class:`SparseCSR` (see :mod:`torchsparsegradutils.nn`).
    For ``"mean"`` and ``"sum"`` the layer multiplies by the weights first when that is
    cheaper (always for a sparse ``x``: one ``sparse_mm(x, [W_l; W_r]^T)``), then
    aggregates the ``out_channels``-wide rows; ``"max"`` aggregates ``x`` itself (a
    sparse ``x`` is made dense for it).

    ``"max"``'s gradient is PyG's: ``G[i, k]`` split evenly among the messages equal to
    the maximum (an edge listed twice is two), and, where the maximum is exactly 0, one
    more share for the 0 PyG's scatter starts from, dropped; ``sparse_mm``'s ``"amax"``
    gives it all to the first entry of a tie instead (``torch.sparse.mm``'s rule).  See
    :mod:`torchsparsegradutils.nn._aggr`.

    >>> _ = torch.manual_seed(0)
    >>> conv = SAGEConv(3, 2, aggr="max")
    >>> conv(torch.randn(4, 3), torch.tensor([[0, 1, 2], [1, 2, 3]])).shape
    torch.Size([4, 2])
    >>> sorted(conv.state_dict())
    ['lin_l.bias', 'lin_l.weight', 'lin_r.weight']
    """

    def __init__(self, in_channels: Union[int, Tuple[int, int]], out_channels: int, aggr: str = "mean",
                 root_weight: bool = True, bias: bool = True, normalize: bool = False):
        super().__init__()
        if not isinstance(aggr, str) or aggr not in _SAGE_AGGR:
            raise ValueError(f"aggr must be one of 'mean', 'max', 'sum', got {aggr!r}")
        src, dst = (in_channels, in_channels) if isinstance(in_channels, int) else tuple(in_channels)
        self.in_channels, self.out_channels = in_channels, out_channels
        self.aggr, self.root_weight, self.normalize = aggr, root_weight, normalize
        self.lin_l = torch.nn.Linear(src, out_channels, bias=bias)
        self.lin_r = torch.nn.Linear(dst, out_channels, bias=False) if root_weight else None
        self._cache = None            # (key, copy of edge_index, (SparseCSR, reduce, message counts))

    def reset_parameters(self) -> None:
        self.lin_l.reset_parameters()
        if self.lin_r is not None:
            self.lin_r.reset_parameters()

    def adjacency(self, edge_index: torch.Tensor, num_nodes: Union[int, Tuple[int, int]]):
        """``(A, reduce)``: the ``(n_target, n_source)`` aggregation matrix of edge_index
        (``num_nodes`` an int, or the pair ``(n_source, n_target)``) and the
        ``sparse_mm`` reduction that gives ``aggr``; cached (see the class notes)."""
        n_src, n_dst = (num_nodes, num_nodes) if isinstance(num_nodes, int) else num_nodes

        return self._aggregation(edge_index, (n_src, n_dst))[:2]

    def _aggregation(self, edge_index: torch.Tensor, num_nodes: Tuple[int, int]):
        """:func:`_aggregation` of edge_index on the layer's device and dtype, cached."""
        weight = self.lin_l.weight
        key = (*num_nodes, weight.dtype, weight.device, self.aggr)

        def build():
            S, reduce, messages = _aggregation(edge_index, num_nodes, self.aggr, weight.dtype)
            return moved(S, weight.device), reduce, None if messages is None else messages.to(weight.device)
        return cached(self, key, edge_index, build)

    def forward(self, x, adjacency) -> torch.Tensor:
        x_src, x_dst = x if isinstance(x, (tuple, list)) and not isinstance(x, SparseCSR) else (x, x)
        for t in (x_src, x_dst):
            if t is not None:
                check_features(t, "x")
        if isinstance(adjacency, SparseCSR) or (isinstance(adjacency, torch.Tensor) and
                                               adjacency.layout in (torch.sparse_coo, torch.sparse_csr)):
            A, reduce, messages = adjacency, _SAGE_AGGR[self.aggr], None
        else:
            n_dst = x_dst.shape[0] if x_dst is not None else None
            if n_dst is None:
                raise ValueError("with x = (x_source, None), give the adjacency as a SparseCSR of shape "
                                 "(n_target, n_source)")
            A, reduce, messages = self._aggregation(adjacency, (x_src.shape[0], n_dst))
        root = self.lin_r is not None and x_dst is not None
        if root and A.shape[-2] != x_dst.shape[0]:
            raise ValueError(f"the adjacency has {A.shape[-2]} target rows but x has {x_dst.shape[0]} target "
                             f"nodes (x_i is needed for the root weight)")
        Wl = self.lin_l.weight
        transform_first = self.aggr != "max" and (is_sparse(x_src) or self.out_channels <= Wl.shape[1])
        if transform_first:
            if root and x_src is x_dst:          # one product with both weights: x [W_l^T, W_r^T]
                H = linear_t(x_src, torch.cat([Wl.t(), self.lin_r.weight.t()], 1))
                Hl, Hr = H.split([self.out_channels] * 2, 1)   # (its backward concatenates: no zero-filled H)
                out = sparse_mm(A, Hl, reduce) + Hr
                root = False
            else:
                out = sparse_mm(A, linear(x_src, Wl), reduce)
        else:
            xs = to_dense_features(x_src) if is_sparse(x_src) else x_src
            out = F.linear(max_aggregation(A, xs, messages) if self.aggr == "max" else sparse_mm(A, xs, reduce), Wl)
        if root:
            out = out + linear(x_dst, self.lin_r.weight)
        if self.lin_l.bias is not None:
            out = out + self.lin_l.bias
        return F.normalize(out, p=2.0, dim=-1) if self.normalize else out

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, aggr={self.aggr!r}, root_weight={self.root_weight}, "
                f"bias={self.lin_l.bias is not None}, normalize={self.normalize}")


def sage_adjacency(edge_index: torch.Tensor, num_nodes: Union[int, Tuple[int, int]], aggr: str = "mean",
                   dtype: torch.dtype = torch.float32):
    r"""``(A, reduce)`` with ``sparse_mm(A, x, reduce)`` PyG's GraphSAGE aggregation of
    ``x`` over ``edge_index`` (2, E), messages from ``edge_index[0]`` to ``edge_index[1]``.

    ``A`` is the ``(n_target, n_source)`` SparseCSR (``num_nodes`` an int or the pair
    ``(n_source, n_target)``), repeated edges merged: for ``"sum"`` its values are the
    edge counts (reduce ``"sum"``); for ``"mean"`` the counts divided by the row's total
    (reduce ``"sum"``: a repeated edge counts as often as it is given, as in PyG); for
    ``"max"`` ones (reduce ``"amax"``).  ``ValueError`` for a malformed ``edge_index`` or
    ``aggr``.

    >>> A, reduce = sage_adjacency(torch.tensor([[0, 0, 2], [1, 1, 1]]), 3, "mean")
    >>> A.to_torch().to_dense(), reduce
    (tensor([[0.0000, 0.0000, 0.0000],
            [0.6667, 0.0000, 0.3333],
            [0.0000, 0.0000, 0.0000]]), 'sum')
    """
    S, reduce, _ = _aggregation(edge_index, num_nodes, aggr, dtype)
    return S, reduce


def _aggregation(edge_index: torch.Tensor, num_nodes: Union[int, Tuple[int, int]], aggr: str, dtype: torch.dtype):
    """sage_adjacency's (A, reduce), and for "max" the number of messages at each of A's
    entries (an edge given k times is k messages, each a tie of the others for PyG's
    gradient; None for "mean" and "sum", whose values count them)."""
    if not isinstance(aggr, str) or aggr not in _SAGE_AGGR:
        raise ValueError(f"aggr must be one of 'mean', 'max', 'sum', got {aggr!r}")
    check_edge_index(edge_index)
    n_src, n_dst = (num_nodes, num_nodes) if isinstance(num_nodes, int) else num_nodes
    if n_src < 0 or n_dst < 0:
        raise ValueError(f"num_nodes must be non-negative, got {num_nodes}")
    device = edge_index.device
    s = coo_structure(edge_index.flip(0).long().contiguous(), (n_dst, n_src))   # ValueError: id out of range
    rows, cols = s.indices
    counts = s.values_of(torch.ones(edge_index.shape[1], dtype=dtype, device=device))
    if aggr == "max":
        return SparseCSR(s.ptr, cols, torch.ones(rows.shape[0], dtype=dtype, device=device), (n_dst, n_src)), "amax", \
            counts
    if aggr == "mean":
        deg = counts.new_zeros(n_dst).index_add(0, rows, counts)
        counts = counts / deg[rows]
    return SparseCSR(s.ptr, cols, counts, (n_dst, n_src)), "sum", None
