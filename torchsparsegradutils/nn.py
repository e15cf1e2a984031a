"""Layers on sparse_mm: a linear layer with a fixed sparsity pattern, and a graph convolution.

Both hold their sparse matrix as a :class:`~torchsparsegradutils.SparseCSR` (index buffers
plus a values tensor), so they move with ``.to(device)``, save with ``state_dict`` and
compile with ``torch.compile(fullgraph=True)``; gradients reach only the stored values.
"""
from typing import Optional

import torch

from ._csr import SparseCSR, as_csr, entry_rows
from ._torch_sparse import coo_tensor
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
        if pattern.layout == torch.sparse_csr:
            crow, col = pattern.crow_indices(), pattern.col_indices()
        else:
            if pattern.layout == torch.strided:
                rows, col = (pattern != 0).nonzero().t()          # row-major: CSR order
            elif pattern.layout == torch.sparse_coo:
                rows, col = pattern.detach().coalesce().indices()
            else:
                raise ValueError(f"pattern must be a dense, COO or CSR tensor, got {pattern.layout}")
            crow = _compress_row_indices(rows, out_features)
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

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # the pattern is part of the state: take the checkpoint's, whatever its nnz
        for name in ("crow_indices", "col_indices"):
            if prefix + name in state_dict:
                self._buffers[name] = torch.empty_like(state_dict[prefix + name], device=self.values.device)
        if prefix + "values" in state_dict:
            self.values = torch.nn.Parameter(self.values.new_empty(state_dict[prefix + "values"].shape))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def extra_repr(self) -> str:
        density = self.nnz / max(1, self.in_features * self.out_features)
        return (f"in_features={self.in_features}, out_features={self.out_features}, nnz={self.nnz} "
                f"(density {density:.3g}), bias={self.bias is not None}")


def gcn_norm(edge_index: torch.Tensor, num_nodes: int, edge_weight: Optional[torch.Tensor] = None,
             add_self_loops: bool = True, dtype: torch.dtype = torch.float32) -> SparseCSR:
    r"""The normalised adjacency of Kipf & Welling, ``D^{-1/2} (A + I) D^{-1/2}``, as a SparseCSR.

    ``edge_index`` (2, E) lists edges ``source -> target``; row ``target`` of ``A`` gathers
    from column ``source`` (the message-passing convention of PyTorch Geometric).
    Duplicate edges add up.  ``D`` is the row-sum (in-degree plus the self loop).

    >>> S = gcn_norm(torch.tensor([[0, 1], [1, 0]]), 2)
    >>> S.to_torch().to_dense()
    tensor([[0.5000, 0.5000],
            [0.5000, 0.5000]])
    """
    if edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise ValueError(f"edge_index must have shape (2, E), got {tuple(edge_index.shape)}")
    device = edge_index.device
    w = (torch.ones(edge_index.shape[1], dtype=dtype, device=device) if edge_weight is None
         else edge_weight.detach().to(dtype))
    idx = edge_index.flip(0)                                  # (target, source)
    if add_self_loops:
        loop = torch.arange(num_nodes, device=device)
        idx = torch.cat([idx, torch.stack([loop, loop])], 1)
        w = torch.cat([w, torch.ones(num_nodes, dtype=dtype, device=device)])
    A = coo_tensor(idx, w, (num_nodes, num_nodes)).coalesce()
    view = as_csr(A)
    deg = torch.zeros(num_nodes, dtype=dtype, device=device).index_add_(0, A.indices()[0], view.values)
    dinv = torch.where(deg > 0, deg.rsqrt(), torch.zeros_like(deg))
    values = dinv[A.indices()[0]] * view.values * dinv[A.indices()[1]]
    return SparseCSR(view.ptr, view.col, values, (num_nodes, num_nodes))


class GCNConv(torch.nn.Module):
    r"""Graph convolution ``X' = Â X W + b`` (Kipf & Welling), ``Â`` from :func:`gcn_norm`.

    ``forward(x, adjacency)`` takes the adjacency either as an ``edge_index`` (2, E)
    integer tensor, normalised on first use and cached while the same ``edge_index``
    tensor (same object, unmodified) comes back, or as a ready :class:`SparseCSR`
    (what ``torch.compile(fullgraph=True)`` should be given: build it once with
    :func:`gcn_norm`).

    >>> conv = GCNConv(3, 2)
    >>> conv(torch.randn(4, 3), torch.tensor([[0, 1, 2], [1, 2, 3]])).shape
    torch.Size([4, 2])
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, add_self_loops: bool = True):
        super().__init__()
        self.lin = torch.nn.Linear(in_features, out_features, bias=False)
        self.bias = torch.nn.Parameter(torch.zeros(out_features)) if bias else None
        self.add_self_loops = add_self_loops
        self._cache = None                                   # (edge_index, its version, SparseCSR)

    def adjacency(self, edge_index: torch.Tensor, num_nodes: int) -> SparseCSR:
        """gcn_norm of edge_index, cached while the same, unmodified edge_index comes back."""
        cache = self._cache
        if cache is None or cache[0] is not edge_index or cache[1] != edge_index._version or \
                cache[2].shape[0] != num_nodes:
            S = gcn_norm(edge_index, num_nodes, add_self_loops=self.add_self_loops, dtype=self.lin.weight.dtype)
            self._cache = cache = (edge_index, edge_index._version, S)
        return cache[2]

    def forward(self, x: torch.Tensor, adjacency) -> torch.Tensor:
        A = adjacency if isinstance(adjacency, SparseCSR) else self.adjacency(adjacency, x.shape[0])
        out = sparse_mm(A, self.lin(x))
        return out + self.bias if self.bias is not None else out
