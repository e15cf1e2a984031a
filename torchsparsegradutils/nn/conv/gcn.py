"""``GCNConv``, the graph convolution of Kipf & Welling as PyTorch Geometric has it;
``gcn_norm``, PyG's function of the same name; ``gcn_adjacency``, the normalised adjacency
``D^{-1/2} Â D^{-1/2}`` as the :class:`~torchsparsegradutils.SparseCSR` the layer multiplies by."""
import math
from typing import NamedTuple, Optional

import torch

from ..._core.sparse_csr import SparseCSR
from ..._core.structures import CooStructure, coo_structure
from ..._core.view import entry_rows
from ...sparse_tensor import sparse_coo_tensor, sparse_csr_tensor
from .._features import is_sparse, linear
from ._edge_index import (cached, check_edge_index, check_flow, is_sparse_adjacency, node_count, propagate,
                          sparse_entries)

__all__ = ["GCNConv", "gcn_norm", "gcn_adjacency"]


# ---- the self loops, as PyG's add_remaining_self_loops (edge_index) / add_self_loops (sparse)

def _loops(idx: torch.Tensor, n: int):
    """(keep, loop_of) for an int64 index pair array (2, E): the positions of the edges that
    are no self loop, and per node the position of its explicit self loop (the last one
    listed; -1 where none).  ``add_remaining_self_loops`` drops every self loop and adds one
    per node, which keeps that loop's weight (PyG writes them in order: the last wins)."""
    is_loop = idx[0] == idx[1]
    keep = (~is_loop).nonzero().squeeze(1)
    loops = is_loop.nonzero().squeeze(1)
    node = idx[0].index_select(0, loops)
    if node.numel() and (int(node.min()) < 0 or int(node.max()) >= n):
        raise ValueError(f"edge_index holds a self loop on a node outside [0, {n})")
    loop_of = torch.full((n,), -1, dtype=torch.int64, device=idx.device)
    return keep, loop_of.scatter_reduce_(0, node, loops, "amax")


def _loop_weights(w: torch.Tensor, keep: torch.Tensor, loop_of: torch.Tensor, fill: float) -> torch.Tensor:
    """The weights of the edges after the remaining self loops: those kept, then one per node
    (its explicit loop's weight, else ``fill``)."""
    pick = torch.where(loop_of >= 0, loop_of, w.shape[0])            # w's last entry + 1: fill
    return torch.cat([w.index_select(0, keep), torch.cat([w, w.new_full((1,), fill)]).index_select(0, pick)])


def _inv_sqrt(deg: torch.Tensor) -> torch.Tensor:
    """deg^{-1/2}, 0 where deg is 0 (PyG's masked inf), with a finite gradient there."""
    has = deg != 0
    return torch.where(has, torch.where(has, deg, torch.ones_like(deg)).pow(-0.5), torch.zeros_like(deg))


def _check_weight(edge_weight, E: int, device) -> None:
    if not isinstance(edge_weight, torch.Tensor) or edge_weight.shape != (E,) or edge_weight.device != device:
        got = (tuple(edge_weight.shape), edge_weight.device) if isinstance(edge_weight, torch.Tensor) else \
            type(edge_weight).__name__
        raise ValueError(f"edge_weight must have shape ({E},) and edge_index's device {device}, got {got}")


# ---- the adjacency of an edge_index: its pattern (cached by GCNConv), then its values

class _Pattern(NamedTuple):
    """How an edge_index becomes the CSR matrix ``Â[i, j]`` (``i`` the node that aggregates):
    the coalesced pattern of its entries (after the self loops), and what the weights of
    the listed edges need to become the entries' values."""
    structure: CooStructure
    keep: Optional[torch.Tensor]          # positions of the edges kept (None: no self loops handled)
    loop_of: Optional[torch.Tensor]       # per node, its explicit self loop's position (-1: none)
    entries: int                          # entries listed before coalescing
    n: int


def _pattern(edge_index: torch.Tensor, n: int, add_self_loops: bool, flow: str) -> _Pattern:
    check_edge_index(edge_index)
    check_flow(flow)
    idx = edge_index.long()
    if flow == "source_to_target":
        idx = idx.flip(0)                                       # (target, source)
    if not add_self_loops:
        return _Pattern(coo_structure(idx.contiguous(), (n, n)), None, None, idx.shape[1], n)
    keep, loop_of = _loops(idx, n)
    loop = torch.arange(n, device=idx.device)
    idx = torch.cat([idx.index_select(1, keep), torch.stack([loop, loop])], 1)
    return _Pattern(coo_structure(idx, (n, n)), keep, loop_of, idx.shape[1], n)   # ValueError: id out of range


def _weights(p: _Pattern, edge_weight: Optional[torch.Tensor], fill: float, dtype, device) -> torch.Tensor:
    if edge_weight is None:       # PyG: every entry 1, a self loop too (improved or not)
        return torch.ones(p.entries, dtype=dtype, device=device)
    w = edge_weight if dtype is None else edge_weight.to(dtype)
    return w if p.keep is None else _loop_weights(w, p.keep, p.loop_of, fill)


def _matrix(structure: CooStructure, w: torch.Tensor, n: int, normalize: bool) -> SparseCSR:
    """The SparseCSR of the entries' weights w (repeats summed), normalised
    ``D^{-1/2} Â D^{-1/2}`` (``D`` the row sums) with normalize."""
    vals = structure.values_of(w)                              # repeated entries summed, differentiably
    rows, cols = structure.indices[0], structure.indices[-1]
    if normalize:
        dinv = _inv_sqrt(vals.new_zeros(n).index_add(0, rows, vals))
        vals = dinv.index_select(0, rows) * vals * dinv.index_select(0, cols)
    return SparseCSR(structure.ptr, cols, vals, (n, n))


def _check_square(adj, n: Optional[int]) -> int:
    if adj.dim() != 2 or adj.shape[0] != adj.shape[1] or (n is not None and adj.shape[0] != n):
        want = f"({n}, {n})" if n is not None else "square"
        raise ValueError(f"the adjacency must be {want} (nodes, nodes), got shape {tuple(adj.shape)}")
    if adj.dense_dim() != 0:
        raise ValueError("the adjacency must not have dense dimensions")
    return adj.shape[0]


def _sparse_adjacency(adj, n: Optional[int], improved: bool, add_self_loops: bool, dtype,
                      normalize: bool = True) -> SparseCSR:
    """A torch sparse (or SparseCSR) ``adj_t`` ``(n, n)``, row ``i`` the node that aggregates,
    with ``fill`` added to its diagonal (PyG's add_self_loops on a sparse matrix: an
    explicit self loop's weight is added to), normalised."""
    n = _check_square(adj, n)
    rows, cols, vals = sparse_entries(adj)
    vals = vals if dtype is None else vals.to(dtype)
    if add_self_loops:
        loop = torch.arange(n, device=rows.device)
        rows, cols = torch.cat([rows, loop]), torch.cat([cols, loop])
        vals = torch.cat([vals, vals.new_full((n,), 2.0 if improved else 1.0)])
    s = coo_structure(torch.stack([rows, cols]), (n, n))
    return _matrix(s, vals, n, normalize)


def gcn_adjacency(edge_index, num_nodes: Optional[int] = None, edge_weight: Optional[torch.Tensor] = None,
                  improved: bool = False, add_self_loops: bool = True, flow: str = "source_to_target",
                  dtype: Optional[torch.dtype] = None) -> SparseCSR:
    r"""The normalised adjacency ``D^{-1/2} Â D^{-1/2}`` as the :class:`SparseCSR` that
    :class:`GCNConv` multiplies by (row ``i`` gathers into node ``i``): what
    :func:`gcn_norm` computes, in one sparse matrix, for ``torch.compile`` or to reuse.

    ``edge_index`` (2, E) lists edges ``source -> target`` (``flow="source_to_target"``,
    PyG's default; ``"target_to_source"`` reads them the other way), each of weight
    ``edge_weight[e]`` (1 when not given); duplicate edges add up.  With
    ``add_self_loops`` every node gets one self loop as PyG's ``add_remaining_self_loops``
    gives it: an explicit self loop is kept once, with its own weight (the last listed,
    if several), in place of the added one, and the others weigh 1, or 2 with
    ``improved`` -- where ``edge_weight`` is given: without it every entry weighs 1, as
    in PyG's ``gcn_norm``.  ``D`` is the row sum of ``Â``; a row summing to 0 is left 0.
    ``adjacency`` may also be a torch sparse ``(n, n)`` matrix ``adj_t`` (COO, CSR or
    CSC, row ``i`` the node that aggregates, as PyG takes it); then, as in PyG,
    ``edge_weight`` is its values, ``flow`` does not apply and the self loops are added
    to its diagonal (an explicit one is added to).  ``num_nodes`` defaults to the largest
    node id + 1 (PyG's ``maybe_num_nodes``), ``dtype`` to ``edge_weight``'s (else the
    default dtype).  Differentiable in ``edge_weight`` (or the sparse matrix's values).

    Raises ``ValueError`` for an ``edge_index`` not of shape (2, E), a node id outside
    ``[0, num_nodes)`` (checked before anything reads through it), an ``edge_weight``
    not of shape (E,), a ``flow`` not PyG's; ``TypeError`` for an ``edge_index`` that
    does not hold integers.

    >>> S = gcn_adjacency(torch.tensor([[0, 1], [1, 0]]), 2)
    >>> S.to_torch().to_dense()
    tensor([[0.5000, 0.5000],
            [0.5000, 0.5000]])
    >>> gcn_adjacency(torch.tensor([[0, 1], [0, 0]]), 2).to_torch().to_dense()   # the loop 0 -> 0 kept once
    tensor([[0.5000, 0.7071],
            [0.0000, 1.0000]])
    """
    if is_sparse_adjacency(edge_index):
        if edge_weight is not None:
            raise ValueError("edge_weight is given with a sparse adjacency: its values are the weights")
        return _sparse_adjacency(edge_index, num_nodes, improved, add_self_loops, dtype)
    check_edge_index(edge_index)
    n = node_count(edge_index, num_nodes)
    if edge_weight is not None:
        _check_weight(edge_weight, edge_index.shape[1], edge_index.device)
        dtype = dtype or edge_weight.dtype
    p = _pattern(edge_index, n, add_self_loops, flow)
    w = _weights(p, edge_weight, 2.0 if improved else 1.0, dtype or torch.get_default_dtype(), edge_index.device)
    return _matrix(p.structure, w, n, True)


def gcn_norm(edge_index, edge_weight: Optional[torch.Tensor] = None, num_nodes: Optional[int] = None,
             improved: bool = False, add_self_loops: bool = True, flow: str = "source_to_target",
             dtype: Optional[torch.dtype] = None):
    r"""PyTorch Geometric's ``gcn_norm``: the same arguments, results and gradients.

    For an ``edge_index`` (2, E) it returns ``(edge_index, edge_weight)``: the edges with
    their self loops made PyG's ``add_remaining_self_loops`` way (the edges that are no
    self loop, in their order, then one loop per node ``0..n-1``, keeping the weight of
    an explicit loop: see :func:`gcn_adjacency`) and their weights
    ``d_i^{-1/2} w_e d_j^{-1/2}``, ``d`` the weighted in-degree (out-degree for
    ``flow="target_to_source"``).  For a torch sparse ``adj_t`` (COO or CSR; a CSC one
    comes back COO) it returns ``(normalised adj_t, None)`` in its layout, for a
    :class:`SparseCSR` ``(SparseCSR, None)``.  For the one sparse matrix :class:`GCNConv`
    multiplies by, from an ``edge_index``, call :func:`gcn_adjacency`.

    >>> gcn_norm(torch.tensor([[0, 1], [0, 0]]), num_nodes=2)
    (tensor([[1, 0, 1],
            [0, 0, 1]]), tensor([0.7071, 0.5000, 1.0000]))
    """
    if isinstance(edge_weight, int) and not isinstance(edge_weight, bool):
        raise TypeError("gcn_norm takes PyG's arguments (edge_index, edge_weight, num_nodes, ...) and returns "
                        "(edge_index, edge_weight); for the SparseCSR, call gcn_adjacency(edge_index, num_nodes)")
    if is_sparse_adjacency(edge_index):
        S = _sparse_adjacency(edge_index, num_nodes, improved, add_self_loops, dtype)
        if isinstance(edge_index, SparseCSR):
            return S, None
        if edge_index.layout == torch.sparse_csr:
            return sparse_csr_tensor(S.crow_indices, S.col_indices, S.values, S.size), None
        rows = entry_rows(S.crow_indices)
        return sparse_coo_tensor(torch.stack([rows, S.col_indices]), S.values, S.size, is_coalesced=True), None
    check_edge_index(edge_index)
    check_flow(flow)
    n = node_count(edge_index, num_nodes)
    E = edge_index.shape[1]
    if edge_weight is not None:
        _check_weight(edge_weight, E, edge_index.device)
    if add_self_loops:
        keep, loop_of = _loops(edge_index.long(), n)
        loop = torch.arange(n, dtype=edge_index.dtype, device=edge_index.device)
        edge_index = torch.cat([edge_index.index_select(1, keep), torch.stack([loop, loop])], 1)
        if edge_weight is not None:
            edge_weight = _loop_weights(edge_weight, keep, loop_of, 2.0 if improved else 1.0)
    if edge_weight is None:
        edge_weight = torch.ones(edge_index.shape[1], dtype=dtype, device=edge_index.device)
    row, col = edge_index[0].long(), edge_index[1].long()
    if row.numel() and (int(edge_index.min()) < 0 or int(edge_index.max()) >= n):
        raise ValueError(f"edge_index holds a node id outside [0, {n})")
    dinv = _inv_sqrt(edge_weight.new_zeros(n).index_add(0, col if flow == "source_to_target" else row,
                                                         edge_weight))
    return edge_index, dinv.index_select(0, row) * edge_weight * dinv.index_select(0, col)


class GCNConv(torch.nn.Module):
    r"""Graph convolution ``X' = D^{-1/2} Â D^{-1/2} X W + b`` (Kipf & Welling), PyTorch
    Geometric's ``GCNConv``: the same arguments, parameters (``lin.weight``, glorot
    initialised, and ``bias``, zeros; a PyG ``state_dict`` loads as it is, and back),
    outputs and gradients.

    Arguments, with PyG's defaults (none differs):

    - ``in_channels``: the width of ``x``, or ``-1`` to take it from the first ``x``
      (the weight is made then).
    - ``out_channels``.
    - ``improved=False``: ``Â = A + 2I`` (the added self loops weigh 2; as in PyG, only
      where ``edge_weight`` is given or the adjacency is sparse).
    - ``cached=False``: with ``True``, the normalised adjacency of the first call is kept
      and used by every later call, whatever adjacency it is given (PyG's transductive
      cache; :meth:`reset_parameters` drops it).  Without it an ``edge_index`` is still
      built into its adjacency once and reused while an ``edge_index`` of the same
      contents comes back (compared in full, O(E)), for the same node count, dtype,
      device and options; only the values are recomputed for an ``edge_weight``.
    - ``add_self_loops=None``: the value of ``normalize``; self loops as PyG's
      ``add_remaining_self_loops``: an explicit self loop is kept once with its weight
      (see :func:`gcn_adjacency`).  ``True`` with ``normalize=False`` is a ValueError.
    - ``normalize=True``: with ``False`` the adjacency is used as given (``edge_weight``
      or 1 per edge, duplicates summed).
    - ``bias=True``.
    - ``flow="source_to_target"``: ``edge_index[0]`` the sources, ``[1]`` the targets;
      ``"target_to_source"`` the other way round.  It may be set after construction
      (``conv.flow = ...``), and takes effect; a value not PyG's is a ValueError, and so
      is ``"target_to_source"`` with a sparse adjacency (as in PyG).

    ``forward(x, edge_index, edge_weight=None)`` takes the adjacency as

    - an ``edge_index`` (2, E), with an optional ``edge_weight`` (E,) (differentiable,
      its gradient at the listed edges only);
    - a torch sparse ``adj_t`` (COO, CSR or CSC; ``(n, n)``, row ``i`` the node that
      aggregates: ``to_torch_csc_tensor(edge_index).t()`` in PyG's tests), normalised as
      PyG does (self loops added to its diagonal), its values the weights
      (``edge_weight`` must then be None); with ``normalize=False`` used as given;
    - a :class:`SparseCSR`: the ready propagation matrix (what :func:`gcn_adjacency`
      returns, and what ``torch.compile(fullgraph=True)`` should be given), used as given:
      neither normalised again nor given self loops.

    ``x`` is ``(n, in_channels)``, dense or sparse (a torch sparse tensor or a
    :class:`SparseCSR`: ``X W`` is then ``sparse_mm(x, W^T)``, see
    :mod:`torchsparsegradutils.nn`), or dense ``(..., n, in_channels)``: a batch over one
    static graph (PyG's ``node_dim=-2``).  Every product is ``sparse_mm`` on a
    :class:`SparseCSR`: no dense ``n x n`` matrix, no edges x features tensor.

    >>> conv = GCNConv(3, 2)
    >>> conv
    GCNConv(3, 2)
    >>> conv(torch.randn(4, 3), torch.tensor([[0, 1, 2], [1, 2, 3]])).shape
    torch.Size([4, 2])
    >>> sorted(conv.state_dict())
    ['bias', 'lin.weight']
    """

    def __init__(self, in_channels: int, out_channels: int, improved: bool = False, cached: bool = False,
                 add_self_loops: Optional[bool] = None, normalize: bool = True, bias: bool = True,
                 flow: str = "source_to_target"):
        super().__init__()
        if add_self_loops is None:
            add_self_loops = normalize
        if add_self_loops and not normalize:
            raise ValueError(f"'{type(self).__name__}' does not support adding self-loops to the graph when no "
                             "on-the-fly normalization is applied")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.improved, self.cached = improved, cached
        self.add_self_loops, self.normalize = add_self_loops, normalize
        self.flow = flow
        if in_channels is None or in_channels < 0:
            self.lin = torch.nn.LazyLinear(out_channels, bias=False)
        else:
            self.lin = torch.nn.Linear(in_channels, out_channels, bias=False)
        self.bias = torch.nn.Parameter(torch.empty(out_channels)) if bias else None
        self._cache = None                # (key, copy of edge_index, _Pattern and its unweighted matrices)
        self._cached_edge_index = None    # with cached=True: the first call's propagation matrix
        self.reset_parameters()

    @property
    def flow(self) -> str:
        return self._flow

    @flow.setter
    def flow(self, flow: str) -> None:
        check_flow(flow)
        self._flow = flow

    def reset_parameters(self) -> None:
        """glorot ``lin.weight`` (once it exists), zero ``bias`` (as PyG), and no cached adjacency."""
        if not isinstance(self.lin.weight, torch.nn.parameter.UninitializedParameter):
            bound = math.sqrt(6.0 / (self.lin.weight.shape[0] + self.lin.weight.shape[1]))
            torch.nn.init.uniform_(self.lin.weight, -bound, bound)
        if self.bias is not None:
            torch.nn.init.zeros_(self.bias)
        self._cache = None
        self._cached_edge_index = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels})"

    def adjacency(self, edge_index, num_nodes: int, edge_weight: Optional[torch.Tensor] = None,
                  dtype: Optional[torch.dtype] = None) -> SparseCSR:
        """The matrix the layer multiplies ``x W`` by for this adjacency (see the class
        notes): the pattern of an ``edge_index`` cached, and its matrix too when no
        ``edge_weight`` is given."""
        dtype = dtype or self._dtype()
        if isinstance(edge_index, SparseCSR):
            if edge_weight is not None:
                raise ValueError("edge_weight is given with a SparseCSR adjacency: its values are the weights")
            if self.flow != "source_to_target":
                raise ValueError(_SPARSE_FLOW)
            return edge_index
        if self.cached and self._cached_edge_index is not None:
            return self._cached_edge_index
        if is_sparse_adjacency(edge_index):
            if edge_weight is not None:
                raise ValueError("edge_weight is given with a sparse adjacency: its values are the weights")
            if self.flow != "source_to_target":
                raise ValueError(_SPARSE_FLOW)
            A = _sparse_adjacency(edge_index, num_nodes, self.improved, self.add_self_loops, dtype, self.normalize)
        else:
            A = self._edge_index_adjacency(edge_index, num_nodes, edge_weight, dtype)
        if self.cached:
            self._cached_edge_index = A
        return A

    def _edge_index_adjacency(self, edge_index, n: int, edge_weight, dtype) -> SparseCSR:
        check_edge_index(edge_index)
        if edge_weight is not None:
            _check_weight(edge_weight, edge_index.shape[1], edge_index.device)
        key = (n, self.add_self_loops, self.flow, edge_index.device)
        entry = cached(self, key, edge_index, lambda: (_pattern(edge_index, n, self.add_self_loops, self.flow), {}))
        p, matrices = entry
        if edge_weight is not None:
            w = _weights(p, edge_weight, 2.0 if self.improved else 1.0, dtype, edge_index.device)
            return _matrix(p.structure, w, n, self.normalize)
        mkey = (dtype, self.normalize)
        if mkey not in matrices:
            matrices[mkey] = _matrix(p.structure, _weights(p, None, 1.0, dtype, edge_index.device), n, self.normalize)
        return matrices[mkey]

    def _dtype(self) -> torch.dtype:
        w = self.lin.weight
        return torch.get_default_dtype() if isinstance(w, torch.nn.parameter.UninitializedParameter) else w.dtype

    def _materialize(self, x) -> None:
        """Make a lazy (``in_channels=-1``) weight for ``x``'s width, glorot initialised."""
        if isinstance(self.lin.weight, torch.nn.parameter.UninitializedParameter):
            self.lin(torch.zeros((0, x.shape[-1]), dtype=self.lin.weight.dtype, device=self.lin.weight.device))
            self.reset_parameters()

    def forward(self, x, edge_index, edge_weight: Optional[torch.Tensor] = None) -> torch.Tensor:
        if isinstance(x, (tuple, list)) and not isinstance(x, SparseCSR):
            raise ValueError(f"'{type(self).__name__}' received a tuple of node features as input while this layer "
                             "does not support bipartite message passing")
        self._materialize(x)
        if is_sparse(x) and x.dim() != 2:
            raise ValueError(f"a sparse x must be 2-D (nodes, features), got shape {tuple(x.shape)}")
        if x.dim() < 2:
            raise ValueError(f"x must be (nodes, features) or (..., nodes, features), got shape {tuple(x.shape)}")
        A = self.adjacency(edge_index, x.shape[-2], edge_weight, self.lin.weight.dtype)
        out = propagate(A, linear(x, self.lin.weight))
        return out + self.bias if self.bias is not None else out


_SPARSE_FLOW = ('Flow direction "target_to_source" is invalid for message propagation via a sparse adjacency '
                '(its rows are the nodes that aggregate; transpose it instead)')
