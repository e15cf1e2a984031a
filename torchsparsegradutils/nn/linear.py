"""``SparseLinear``: a linear layer whose weight is sparse on a fixed pattern, only its stored
weights parameters (PyTorch Geometric keeps its ``Linear`` in ``nn/dense/linear.py``; this
is its sparse counterpart)."""
from typing import Optional

import torch

from .._core.intake import checked_view
from .._core.sparse_csr import SparseCSR
from .._core.view import entry_rows
from ..sparse_matmul import sparse_mm
from ..utils.utils import _compress_row_indices
from ._features import check_sparse_features, csr_to_dense, is_sparse

__all__ = ["SparseLinear"]


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
        if is_sparse(x):
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
        check_sparse_features(x, self.in_features)
        perm, crow_t, col_t = self._transpose_structure()
        Wt = SparseCSR(crow_t, col_t, self.values[perm], (self.in_features, self.out_features))
        return csr_to_dense(sparse_mm(x, Wt))

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
