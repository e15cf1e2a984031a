"""Layers on sparse_mm: a linear layer with a fixed sparsity pattern, and graph convolutions
(GCN, GraphSAGE, and GAT on graph_attention); dropout of features that may be sparse.

Each takes its input features ``x`` dense, as a torch sparse tensor (COO or CSR) or as a
:class:`~torchsparsegradutils.SparseCSR`: a sparse ``x`` is multiplied by the weight with
``sparse_mm`` (``x`` is never densified, except for ``SAGEConv(aggr="max")``'s
aggregation), and ``x``'s own gradient, where it requires one, stays on its pattern.

The layers hold their sparse matrix as a :class:`~torchsparsegradutils.SparseCSR` (index buffers
plus a values tensor), so they move with ``.to(device)``, save with ``state_dict`` and
compile with ``torch.compile(fullgraph=True)``; gradients reach only the stored values.
"""
from typing import Optional, Tuple, Union

import torch
import torch.nn.functional as F

from ..._core.intake import checked_view, coo_structure
from ..._core.sparse_csr import SparseCSR
from ..._core.view import entry_rows
from ...graph_attention import graph_attention
from ...sparse_matmul import sparse_mm
from ...sparse_tensor import sparse_coo_tensor, sparse_csr_tensor
from ...utils.utils import _compress_row_indices


class SparseLinear(torch.nn.Module):
    r"""``y = x W^T + b`` with ``W`` (out_features x in_features) sparse on a fixed pattern.

    Only the ``nnz`` stored weights are parameters (``self.values``); the pattern is
    given as ``pattern`` (a boolean or 0/1 dense ``(out_features, in_features)`` tensor,
    or a sparse COO/CSR tensor whose stored positions are used) or drawn at random with
    ``density`` (each weight kept with that probability, ``generator`` for
    reproducibility).  Weights and bias start like :class:`torch.nn.Linear`'s, scaled by
    each output's own fan-in: uniform in ``±1/sqrt(k_i)`` with ``k_i`` the stored entries
    of row ``i``.

    >>> _ = torch.manual_seed(0)
    >>> layer = SparseLinear(8, 4, density=0.25)
    >>> layer(torch.randn(5, 8)).shape
    torch.Size([5, 4])
    >>> layer.values.shape == (layer.nnz,)
    True
    """

    def __init__(self, in_features: int, out_features: int, pattern: Optional[torch.Tensor] = None,
                 density: Optional[float] = None, bias: bool = True, generator: Optional[torch.Generator] = None,
                 dtype: Optional[torch.dtype] = None, device=None):
        super().__init__()
        if (pattern is None) == (density is None):
            raise ValueError("give exactly one of pattern and density")
        if pattern is None:
            if not 0.0 <= density <= 1.0:
                raise ValueError(f"density must be in [0, 1], got {density}")
            pattern = torch.rand(out_features, in_features, generator=generator) < density
        elif tuple(pattern.shape) != (out_features, in_features):
            raise ValueError(f"pattern must have shape ({out_features}, {in_features}), got {tuple(pattern.shape)}")
        if pattern.layout in (torch.sparse_coo, torch.sparse_csr):
            view = checked_view(pattern.detach())                 # ValueError if malformed
            crow, col = view.ptr, view.col
        elif pattern.layout == torch.strided:
            rows, col = (pattern != 0).nonzero().t()              # row-major: CSR order
            crow = _compress_row_indices(rows, out_features)
        else:
            raise ValueError(f"pattern must be a dense, COO or CSR tensor, got {pattern.layout}")
        self.in_features, self.out_features = in_features, out_features
        self.register_buffer("crow_indices", crow.to(torch.int64, copy=True).to(device))
        self.register_buffer("col_indices", col.to(torch.int64, copy=True).to(device))
        self.values = torch.nn.Parameter(torch.empty(col.shape[0], dtype=dtype, device=device))
        self.bias = torch.nn.Parameter(torch.empty(out_features, dtype=dtype, device=device)) if bias else None
        self.reset_parameters(generator)

    @property
    def nnz(self) -> int:
        return self.values.shape[0]

    def reset_parameters(self, generator: Optional[torch.Generator] = None) -> None:
        fan_in = (self.crow_indices[1:] - self.crow_indices[:-1]).clamp(min=1).to(self.values.dtype)
        bound = fan_in.rsqrt()
        rows = entry_rows(self.crow_indices)
        with torch.no_grad():
            u = torch.rand(self.nnz, generator=generator, dtype=self.values.dtype).to(self.values.device)
            self.values.copy_((2 * u - 1) * bound[rows])
            if self.bias is not None:
                u = torch.rand(self.out_features, generator=generator, dtype=self.values.dtype)
                self.bias.copy_((2 * u.to(self.bias.device) - 1) * bound)

    @property
    def weight(self) -> SparseCSR:
        """W as a SparseCSR on the layer's values (differentiable in them)."""
        return SparseCSR(self.crow_indices, self.col_indices, self.values, (self.out_features, self.in_features))

    def forward(self, x) -> torch.Tensor:
        if _is_sparse(x):
            y = self._sparse_forward(x)
            return y + self.bias if self.bias is not None else y
        lead = x.shape[:-1]
        y = sparse_mm(self.weight, x.reshape(-1, self.in_features).t()).t()   # (W x^T)^T
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*lead, self.out_features)

    def _sparse_forward(self, x) -> torch.Tensor:
        """x W^T for a sparse x (n, in): the sparse @ sparse product of x and W^T (W^T's
        values gathered from self.values through a permutation computed once per pattern),
        written into the dense (n, out) result (only its stored entries are touched)."""
        _check_sparse_features(x, self.in_features)
        perm, crow_t, col_t = self._transpose_structure()
        Wt = SparseCSR(crow_t, col_t, self.values[perm], (self.in_features, self.out_features))
        return _csr_to_dense(sparse_mm(x, Wt))

    def _transpose_structure(self):
        """(perm, crow, col) of W^T's CSR structure: W^T's entry k is W's entry perm[k];
        cached while the pattern buffers (identity, version, device) stay the same."""
        crow, col = self.crow_indices, self.col_indices
        key = (crow.data_ptr(), col.data_ptr(), crow._version, col._version, crow.device, col.shape[0])
        cache = getattr(self, "_transpose_cache", None)
        if cache is None or cache[0] != key:
            rows = entry_rows(crow)
            order = torch.sort(col, stable=True).indices          # row-major within each column
            crow_t = _compress_row_indices(col[order], self.in_features)
            cache = self._transpose_cache = (key, (order, crow_t, rows[order]))
        return cache[1]

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        """As :class:`torch.nn.Linear`: the checkpoint's tensors are copied into the layer's
        own (an optimizer built before the load goes on updating them), and one of
        another shape, or on another sparsity pattern, is an error of load_state_dict."""
        other = []
        for name in ("crow_indices", "col_indices"):
            own, theirs = getattr(self, name), state_dict.get(prefix + name)
            if isinstance(theirs, torch.Tensor) and theirs.shape == own.shape and \
                    not torch.equal(theirs.to(own.device, own.dtype), own):
                other.append(name)
        if other:
            error_msgs.append(
                f"sparsity pattern mismatch for {', '.join(prefix + n for n in other)}: the checkpoint's pattern "
                f"differs from this layer's; build the layer on it to load it (pattern=torch.sparse_csr_tensor("
                f"crow_indices, col_indices, values, ({self.out_features}, {self.in_features})))")
            state_dict = {**state_dict, **{prefix + n: getattr(self, n) for n in other}}   # copied onto itself
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)

    def extra_repr(self) -> str:
        density = self.nnz / max(1, self.in_features * self.out_features)
        return (f"in_features={self.in_features}, out_features={self.out_features}, nnz={self.nnz} "
                f"(density {density:.3g}), bias={self.bias is not None}")


def dropout(x, p: float = 0.5, training: bool = True):
    r"""Dropout of node features ``x`` that may be sparse: :func:`torch.nn.functional.dropout`
    on a dense ``x``; on a sparse one (:class:`~torchsparsegradutils.SparseCSR`, torch COO
    or CSR) each stored entry is zeroed with probability ``p`` and the others scaled by
    ``1 / (1 - p)``, which is what dense dropout does to the matrix (its zeros stay zero),
    in O(nnz) and without densifying.  The result has ``x``'s layout and index tensors
    (a COO ``x`` is coalesced first), differentiable in its values.

    >>> x = SparseCSR.from_torch(torch.eye(3).to_sparse_csr())
    >>> dropout(x, 0.5, training=False) is x
    True
    >>> dropout(x, 0.0).values
    tensor([1., 1., 1.])
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability must be in [0, 1], got {p}")
    if not _is_sparse(x):
        return F.dropout(x, p, training)
    if not training:
        return x
    if isinstance(x, SparseCSR):
        return x._replace(values=F.dropout(x.values, p))
    if x.layout == torch.sparse_csr:
        return sparse_csr_tensor(x.crow_indices(), x.col_indices(), F.dropout(x.values(), p), x.shape)
    x = x.coalesce()
    return sparse_coo_tensor(x.indices(), F.dropout(x.values(), p), x.shape, is_coalesced=True)


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
    _check_edge_index(edge_index)
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
    build it once with :func:`gcn_norm`).  ``x`` may be sparse (see the module notes):
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
        cache = self._cache
        if cache is None or cache[0] != key or not _same_contents(cache[1], edge_index):
            S = gcn_norm(edge_index, num_nodes, add_self_loops=self.add_self_loops, dtype=key[1])
            self._cache = cache = (key, edge_index.clone(), S)
        return cache[2]

    def forward(self, x, adjacency) -> torch.Tensor:
        A = adjacency if isinstance(adjacency, SparseCSR) else self.adjacency(adjacency, x.shape[0])
        out = sparse_mm(A, _linear(x, self.lin.weight))
        return out + self.bias if self.bias is not None else out


def _same_contents(a: torch.Tensor, b) -> bool:
    """Is b a tensor equal to a: same shape, dtype, device and values?"""
    return isinstance(b, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype and a.device == b.device \
        and torch.equal(a, b)


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

    ``x`` may be dense, a torch sparse tensor or a :class:`SparseCSR` (module notes).
    For ``"mean"`` and ``"sum"`` the layer multiplies by the weights first when that is
    cheaper (always for a sparse ``x``: one ``sparse_mm(x, [W_l; W_r]^T)``), then
    aggregates the ``out_channels``-wide rows; ``"max"`` aggregates ``x`` itself (a
    sparse ``x`` is made dense for it).

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
        self._cache = None            # (key, copy of edge_index, SparseCSR, reduce)

    def reset_parameters(self) -> None:
        self.lin_l.reset_parameters()
        if self.lin_r is not None:
            self.lin_r.reset_parameters()

    def adjacency(self, edge_index: torch.Tensor, num_nodes: Union[int, Tuple[int, int]]):
        """``(A, reduce)``: the ``(n_target, n_source)`` aggregation matrix of edge_index
        (``num_nodes`` an int, or the pair ``(n_source, n_target)``) and the
        ``sparse_mm`` reduction that gives ``aggr``; cached (see the class notes)."""
        n_src, n_dst = (num_nodes, num_nodes) if isinstance(num_nodes, int) else num_nodes
        weight = self.lin_l.weight
        key = (n_src, n_dst, weight.dtype, weight.device, self.aggr)
        cache = self._cache
        if cache is None or cache[0] != key or not _same_contents(cache[1], edge_index):
            S, reduce = sage_adjacency(edge_index, (n_src, n_dst), self.aggr, dtype=weight.dtype)
            if S.device != weight.device:
                S = SparseCSR(*(t.to(weight.device) for t in S[:3]), S.size)
            self._cache = cache = (key, edge_index.clone(), S, reduce)
        return cache[2], cache[3]

    def forward(self, x, adjacency) -> torch.Tensor:
        x_src, x_dst = x if isinstance(x, (tuple, list)) and not isinstance(x, SparseCSR) else (x, x)
        for t in (x_src, x_dst):
            if t is not None:
                _check_features(t, "x")
        if isinstance(adjacency, SparseCSR) or (isinstance(adjacency, torch.Tensor) and
                                               adjacency.layout in (torch.sparse_coo, torch.sparse_csr)):
            A, reduce = adjacency, _SAGE_AGGR[self.aggr]
        else:
            n_dst = x_dst.shape[0] if x_dst is not None else None
            if n_dst is None:
                raise ValueError("with x = (x_source, None), give the adjacency as a SparseCSR of shape "
                                 "(n_target, n_source)")
            A, reduce = self.adjacency(adjacency, (x_src.shape[0], n_dst))
        root = self.lin_r is not None and x_dst is not None
        if root and A.shape[-2] != x_dst.shape[0]:
            raise ValueError(f"the adjacency has {A.shape[-2]} target rows but x has {x_dst.shape[0]} target "
                             f"nodes (x_i is needed for the root weight)")
        Wl = self.lin_l.weight
        transform_first = self.aggr != "max" and (_is_sparse(x_src) or self.out_channels <= Wl.shape[1])
        if transform_first:
            if root and x_src is x_dst:          # one product with both weights: x [W_l^T, W_r^T]
                H = _linear_t(x_src, torch.cat([Wl.t(), self.lin_r.weight.t()], 1))
                Hl, Hr = H.split([self.out_channels] * 2, 1)   # (its backward concatenates: no zero-filled H)
                out = sparse_mm(A, Hl, reduce) + Hr
                root = False
            else:
                out = sparse_mm(A, _linear(x_src, Wl), reduce)
        else:
            xs = _to_dense_features(x_src) if _is_sparse(x_src) else x_src
            out = F.linear(sparse_mm(A, xs, reduce), Wl)
        if root:
            out = out + _linear(x_dst, self.lin_r.weight)
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
    if not isinstance(aggr, str) or aggr not in _SAGE_AGGR:
        raise ValueError(f"aggr must be one of 'mean', 'max', 'sum', got {aggr!r}")
    _check_edge_index(edge_index)
    n_src, n_dst = (num_nodes, num_nodes) if isinstance(num_nodes, int) else num_nodes
    if n_src < 0 or n_dst < 0:
        raise ValueError(f"num_nodes must be non-negative, got {num_nodes}")
    device = edge_index.device
    s = coo_structure(edge_index.flip(0).long().contiguous(), (n_dst, n_src))   # ValueError: id out of range
    rows, cols = s.indices
    if aggr == "max":
        return SparseCSR(s.ptr, cols, torch.ones(rows.shape[0], dtype=dtype, device=device), (n_dst, n_src)), "amax"
    counts = s.values_of(torch.ones(edge_index.shape[1], dtype=dtype, device=device))
    if aggr == "mean":
        deg = counts.new_zeros(n_dst).index_add(0, rows, counts)
        counts = counts / deg[rows]
    return SparseCSR(s.ptr, cols, counts, (n_dst, n_src)), "sum"


class GATConv(torch.nn.Module):
    r"""Graph attention (Veličković et al.), PyTorch Geometric's ``GATConv``: with
    ``h = x W^T`` split into ``heads`` heads of ``out_channels``,

    .. math::
        \alpha_{ij} = \mathrm{softmax}_j\,\mathrm{LeakyReLU}(a_{src} \cdot h_j + a_{dst} \cdot h_i),
        \quad x'_i = \sum_{j \in N(i)} \alpha_{ij} h_j

    per head (``j -> i`` over ``edge_index[0] -> edge_index[1]``, PyG's direction), the
    heads concatenated (``concat=True``) or averaged, plus ``bias``.  Dropout on ``alpha``
    in training.  The attention is :func:`~torchsparsegradutils.graph_attention`: fused,
    with no (edges x heads x features) tensor on the CPU.

    The parameters are PyG's: ``lin`` (:class:`torch.nn.Linear`, no bias, ``heads *
    out_channels`` outputs), ``att_src`` and ``att_dst`` ``(1, heads, out_channels)``,
    ``bias``; a PyG ``GATConv(in_channels, ...)``'s ``state_dict`` loads as it is
    (bipartite ``in_channels`` pairs, ``edge_dim``, ``fill_value`` and ``residual`` are
    not offered).

    ``forward(x, adjacency, return_attention_weights=False)`` takes an ``edge_index``
    (2, E): with ``add_self_loops`` its self loops removed and one per node added, as
    PyG does; built into a pattern on first use and cached as :class:`GCNConv`'s is.
    Unlike PyG, an edge given twice is attended to once (the pattern holds it once).
    ``adjacency`` may also be a ready ``(n, n)`` :class:`SparseCSR` or torch sparse
    tensor (its pattern is used as it is, no loops added; its values are not read):
    what ``torch.compile(fullgraph=True)`` should get (build it once with
    :func:`gat_adjacency`).  ``x`` may be dense or sparse (module notes).  With
    ``return_attention_weights`` the result is ``(out, (edge_index, alpha))``:
    the pattern's edges (sources, targets) in its CSR order and ``alpha`` (E, heads)
    after dropout.

    >>> _ = torch.manual_seed(0)
    >>> conv = GATConv(3, 2, heads=4)
    >>> conv(torch.randn(4, 3), torch.tensor([[0, 1, 2], [1, 2, 3]])).shape
    torch.Size([4, 8])
    >>> sorted(conv.state_dict())
    ['att_dst', 'att_src', 'bias', 'lin.weight']
    """

    def __init__(self, in_channels: int, out_channels: int, heads: int = 1, concat: bool = True,
                 negative_slope: float = 0.2, dropout: float = 0.0, add_self_loops: bool = True, bias: bool = True):
        super().__init__()
        if not isinstance(in_channels, int):
            raise ValueError(f"in_channels must be an int (bipartite pairs are not supported), got {in_channels!r}")
        if not 0.0 <= dropout <= 1.0:
            raise ValueError(f"dropout must be in [0, 1], got {dropout}")
        self.in_channels, self.out_channels, self.heads, self.concat = in_channels, out_channels, heads, concat
        self.negative_slope, self.dropout, self.add_self_loops = negative_slope, dropout, add_self_loops
        self.lin = torch.nn.Linear(in_channels, heads * out_channels, bias=False)
        self.att_src = torch.nn.Parameter(torch.empty(1, heads, out_channels))
        self.att_dst = torch.nn.Parameter(torch.empty(1, heads, out_channels))
        self.bias = torch.nn.Parameter(torch.empty(heads * out_channels if concat else out_channels)) if bias else None
        self._cache = None            # (key, copy of edge_index, SparseCSR)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Glorot (Xavier uniform) weights, zero bias, as PyG."""
        torch.nn.init.xavier_uniform_(self.lin.weight)
        for att in (self.att_src, self.att_dst):
            bound = (6.0 / (att.shape[-2] + att.shape[-1])) ** 0.5
            torch.nn.init.uniform_(att, -bound, bound)
        if self.bias is not None:
            torch.nn.init.zeros_(self.bias)

    def adjacency(self, edge_index: torch.Tensor, num_nodes: int) -> SparseCSR:
        """gat_adjacency of edge_index, cached (see the class notes)."""
        key = (num_nodes, self.lin.weight.device, self.add_self_loops)
        cache = self._cache
        if cache is None or cache[0] != key or not _same_contents(cache[1], edge_index):
            S = gat_adjacency(edge_index, num_nodes, self.add_self_loops)
            if S.crow_indices.device != key[1]:
                S = SparseCSR(*(t.to(key[1]) for t in S[:3]), S.size)
            self._cache = cache = (key, edge_index.clone(), S)
        return cache[2]

    def forward(self, x, adjacency, return_attention_weights: bool = False):
        _check_features(x, "x")
        H, C = self.heads, self.out_channels
        n = x.shape[0]
        h = _linear(x, self.lin.weight).view(n, H, C)
        s, d = _AttentionScores.apply(h, torch.cat([self.att_src, self.att_dst])).unbind(0)
        if isinstance(adjacency, SparseCSR) or (isinstance(adjacency, torch.Tensor) and
                                               adjacency.layout in (torch.sparse_coo, torch.sparse_csr)):
            A = adjacency
        else:
            A = self.adjacency(adjacency, n)
        out = graph_attention(A, h, s, d, self.negative_slope, self.dropout, self.training,
                              return_attention=return_attention_weights)
        out, alpha = out if return_attention_weights else (out, None)
        out = out.reshape(n, H * C) if self.concat else out.mean(1)
        if self.bias is not None:
            out = out + self.bias
        if not return_attention_weights:
            return out
        ptr, col = (A.crow_indices, A.col_indices) if isinstance(A, SparseCSR) else _pattern_arrays(A)
        return out, (torch.stack([col.long(), entry_rows(ptr)]), alpha)

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, heads={self.heads}, concat={self.concat}, "
                f"dropout={self.dropout}, add_self_loops={self.add_self_loops}, bias={self.bias is not None}")


class _AttentionScores(torch.autograd.Function):
    """(s, d) = ((h * att[0]).sum(-1), (h * att[1]).sum(-1)), stacked (2, n, H), for h (n, H, C)
    and att (2, H, C), with PyG's rounding (a product, then a sum over C: scores computed
    by einsum's matrix product instead round differently, and on 2*10^5 nodes the float32
    gradients of att then stray ten times further from float64), in two ops forward and
    three backward, where autograd through the products and sums written out takes ten
    small ones (on a loaded machine each waits for its threads)."""

    @staticmethod
    def forward(ctx, h, att):
        ctx.save_for_backward(h, att)
        return (h.unsqueeze(0) * att.unsqueeze(1)).sum(-1)

    @staticmethod
    def backward(ctx, g):
        h, att = ctx.saved_tensors
        dh = torch.einsum("knh,khc->nhc", g, att) if ctx.needs_input_grad[0] else None
        datt = (g.unsqueeze(-1) * h).sum(1) if ctx.needs_input_grad[1] else None
        return dh, datt


def gat_adjacency(edge_index: torch.Tensor, num_nodes: int, add_self_loops: bool = True) -> SparseCSR:
    r"""The ``(n, n)`` attention pattern of ``edge_index`` (2, E) for :class:`GATConv`, as a
    :class:`SparseCSR`: row ``target`` holds the columns ``source`` of its edges (PyG's
    direction), each once; with ``add_self_loops`` the given self loops are dropped and
    one per node added (PyG's ``remove_self_loops`` then ``add_self_loops``).  Its
    values are ones (a broadcast view: no memory), not read by the attention.
    ``ValueError`` for a malformed ``edge_index``.

    >>> S = gat_adjacency(torch.tensor([[0, 1], [1, 1]]), 2)
    >>> S.crow_indices, S.col_indices
    (tensor([0, 1, 3]), tensor([0, 0, 1]))
    """
    _check_edge_index(edge_index)
    if num_nodes < 0:
        raise ValueError(f"num_nodes must be non-negative, got {num_nodes}")
    idx = edge_index.flip(0).long()                           # (target, source)
    if add_self_loops:
        loop = torch.arange(num_nodes, device=idx.device)
        idx = torch.cat([idx[:, idx[0] != idx[1]], torch.stack([loop, loop])], 1)
    s = coo_structure(idx.contiguous(), (num_nodes, num_nodes))    # ValueError for an id out of range
    cols = s.indices[1]
    return SparseCSR(s.ptr, cols, torch.ones(1, device=cols.device).expand(cols.shape[0]), (num_nodes, num_nodes))


def _pattern_arrays(A: torch.Tensor):
    """(row pointers, columns) of a 2-D torch sparse tensor (a COO one's coalesced pattern)."""
    view = checked_view(A.detach())
    return view.ptr, view.col


# ---------------------------------------------------------------- shared pieces
def _check_edge_index(edge_index) -> None:
    if not isinstance(edge_index, torch.Tensor) or edge_index.dim() != 2 or edge_index.shape[0] != 2:
        got = tuple(edge_index.shape) if isinstance(edge_index, torch.Tensor) else type(edge_index).__name__
        raise ValueError(f"edge_index must have shape (2, E), got {got}")
    if edge_index.dtype.is_floating_point or edge_index.dtype.is_complex or edge_index.dtype == torch.bool:
        raise TypeError(f"edge_index must hold integer node ids, got {edge_index.dtype}")


def _is_sparse(x) -> bool:
    return isinstance(x, SparseCSR) or (isinstance(x, torch.Tensor) and x.layout in (torch.sparse_coo,
                                                                                   torch.sparse_csr))


def _check_features(x, name: str) -> None:
    if not (isinstance(x, (torch.Tensor, SparseCSR))):
        raise ValueError(f"{name} must be a tensor or a SparseCSR, got {type(x).__name__}")
    if x.dim() != 2:
        raise ValueError(f"{name} must be 2-D (nodes, features), got shape {tuple(x.shape)}")


def _check_sparse_features(x, in_features: int) -> None:
    if x.dim() != 2 or x.shape[1] != in_features:
        raise ValueError(f"a sparse x must have shape (n, {in_features}), got {tuple(x.shape)}")


def _linear(x, weight: torch.Tensor) -> torch.Tensor:
    """x W^T (no bias) for a dense or sparse x (n, in) and a dense W (out, in).  For a
    sparse x it is sparse_mm(x, W^T): grad_W = (x^T G)^T through its backward, x's
    gradient on x's pattern.  The kernels read B's rows with unit stride, so W.t() (an
    (in, out) view with stride (1, in)) is laid out once by sparse_mm: out x in numbers,
    the weight's size, not the graph's (SAGEConv builds its stacked W^T in that layout
    directly, with no copy beyond the concatenation)."""
    if not _is_sparse(x):
        return F.linear(x, weight)
    return _linear_t(x, weight.t())


def _linear_t(x, weight_t: torch.Tensor) -> torch.Tensor:
    """x @ weight_t for a dense or sparse x (n, in) and a dense weight_t (in, out)."""
    if not _is_sparse(x):
        return x @ weight_t
    _check_sparse_features(x, weight_t.shape[0])
    return sparse_mm(x, weight_t)


def _csr_to_dense(S: SparseCSR) -> torch.Tensor:
    """The dense matrix of a 2-D SparseCSR, differentiable in its values (the backward
    gathers at the stored entries: no dense mask)."""
    rows = entry_rows(S.crow_indices)
    out = S.values.new_zeros(S.size)
    return out.index_put((rows, S.col_indices.long()), S.values, accumulate=True)


def _to_dense_features(x) -> torch.Tensor:
    if isinstance(x, SparseCSR):
        return _csr_to_dense(x)
    return x.to_dense()
