"""Layers on sparse_mm: a linear layer with a fixed sparsity pattern, and a graph convolution.

Both hold their sparse matrix as a :class:`~torchsparsegradutils.SparseCSR` (index buffers
plus a values tensor), so they move with ``.to(device)``, save with ``state_dict`` and
compile with ``torch.compile(fullgraph=True)``; gradients reach only the stored values.
"""
from typing import Optional

import torch

from ._core.intake import checked_view, coo_structure
from ._core.sparse_csr import SparseCSR
from ._core.view import entry_rows
from .sparse_matmul import sparse_mm
from .utils.utils import _compress_row_indices


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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        y = sparse_mm(self.weight, x.reshape(-1, self.in_features).t()).t()   # (W x^T)^T
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*lead, self.out_features)

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
    if not isinstance(edge_index, torch.Tensor) or edge_index.dim() != 2 or edge_index.shape[0] != 2:
        got = tuple(edge_index.shape) if isinstance(edge_index, torch.Tensor) else type(edge_index).__name__
        raise ValueError(f"edge_index must have shape (2, E), got {got}")
    if edge_index.dtype.is_floating_point or edge_index.dtype.is_complex or edge_index.dtype == torch.bool:
        raise TypeError(f"edge_index must hold integer node ids, got {edge_index.dtype}")
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
    build it once with :func:`gcn_norm`).

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

    def forward(self, x: torch.Tensor, adjacency) -> torch.Tensor:
        A = adjacency if isinstance(adjacency, SparseCSR) else self.adjacency(adjacency, x.shape[0])
        out = sparse_mm(A, self.lin(x))
        return out + self.bias if self.bias is not None else out


def _same_contents(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal tensors: same shape, dtype, device and values."""
    return a.shape == b.shape and a.dtype == b.dtype and a.device == b.device and torch.equal(a, b)
