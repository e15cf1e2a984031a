"""A sparse tensor (COO or CSR, 2D or batched) seen as the CSR view the kernels take.

`as_csr(A)` checks A's structure (in C, O(nnz)) and returns a `CSRView`: row
pointers, column indices and values, without copying A's arrays when A is CSR
or coalesced COO.  `CSRView.grad_like(values)` builds a sparse tensor in A's
own layout holding `values` at A's stored positions: the gradient w.r.t. A.
"""
from typing import NamedTuple, Optional

import torch

from . import _C


class CSRView(NamedTuple):
    """Row pointers + columns + values of `batch` matrices of `nrows` x `ncols`.

    ptr is 1D (batch*nrows+1, one global array: the COO case) or 2D
    (batch, nrows+1: batched CSR); col and values are 1D or (batch, nnz).
    `coo_indices` is set when A was COO: the (coalesced) index array that the
    gradient is returned on."""

    ptr: torch.Tensor
    col: torch.Tensor
    values: torch.Tensor
    batch: int
    nrows: int
    ncols: int
    shape: torch.Size
    coo_indices: Optional[torch.Tensor]

    def grad_like(self, g: torch.Tensor) -> torch.Tensor:
        """A sparse tensor in A's layout with values g at A's stored positions;
        differentiable in g, without densifying, when g carries a graph."""
        if self.coo_indices is not None:
            return torch.sparse_coo_tensor(self.coo_indices, g, self.shape, is_coalesced=True)
        if g.requires_grad:
            from .sparse_tensor import sparse_csr_tensor  # torch's own densifies in backward
            return sparse_csr_tensor(self.ptr, self.col, g, self.shape)
        return torch.sparse_csr_tensor(self.ptr, self.col, g, self.shape)


def as_csr(A: torch.Tensor) -> CSRView:
    """The CSR view of a detached sparse COO/CSR tensor of shape (n, m) or (b, n, m)."""
    if A.layout == torch.sparse_csr:
        return _from_csr(A)
    return _from_coo(A)


def _from_csr(A: torch.Tensor) -> CSRView:
    if A.dense_dim() != 0:
        raise ValueError("A must not have dense dimensions (hybrid CSR tensors are not supported)")
    batched = A.dim() == 3
    n, m = A.shape[-2], A.shape[-1]
    ptr, col, val = A.crow_indices(), A.col_indices(), A.values()
    if not ptr.is_contiguous():
        ptr = ptr.contiguous()
    if not col.is_contiguous():
        col = col.contiguous()
    if not val.is_contiguous():
        val = val.contiguous()
    return CSRView(ptr, col, val, A.shape[0] if batched else 1, n, m, A.shape, None)


def _from_coo(A: torch.Tensor) -> CSRView:
    if A.dense_dim() != 0:
        raise ValueError("A must not have dense dimensions (hybrid COO tensors are not supported)")
    sizes = tuple(A.shape)
    indices = _unit_stride_rows(A._indices())
    if not A.is_coalesced():
        # Check ranges before coalescing: coalesce would fold an out-of-range
        # index onto a valid position and hide the error.
        if A.device.type == "cpu":
            _C.coo_row_ptr(indices, sizes, None, torch.get_num_threads())
        else:
            _check_coo_ranges_torch(indices, sizes)
        A = A.coalesce()
        indices = _unit_stride_rows(A._indices())
    val = A._values()
    if not val.is_contiguous():
        val = val.contiguous()
    batch = sizes[0] if len(sizes) == 3 else 1
    n, m = sizes[-2], sizes[-1]
    if A.device.type == "cpu":
        ptr = torch.empty(batch * n + 1, dtype=torch.int64)
        _C.coo_row_ptr(indices, sizes, ptr, torch.get_num_threads())
    else:
        _check_coo_ranges_torch(indices, sizes)
        rows = indices[-2] + (indices[0] * n if len(sizes) == 3 else 0)
        ptr = torch.zeros(batch * n + 1, dtype=torch.int64, device=A.device)
        ptr[1:] = torch.bincount(rows, minlength=batch * n).cumsum(0)
    return CSRView(ptr, indices[-1], val, batch, n, m, A.shape, indices)


def _unit_stride_rows(indices: torch.Tensor) -> torch.Tensor:
    """indices itself when each of its rows is unit-stride (a coalesced tensor's
    indices are often a view into a longer buffer), else a contiguous copy."""
    if indices.shape[1] <= 1 or (indices.stride(1) == 1 and indices.stride(0) >= indices.shape[1]):
        return indices
    return indices.contiguous()


def _check_coo_ranges_torch(indices: torch.Tensor, sizes) -> None:
    """The range check of coo_row_ptr, for tensors the C kernels cannot read."""
    if indices.numel():
        bound = torch.tensor(sizes, device=indices.device).unsqueeze(1)
        if bool(((indices < 0) | (indices >= bound)).any()):
            raise ValueError(
                "malformed sparse matrix: an index is negative or not less than the size of its dimension"
            )
