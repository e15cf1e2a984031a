"""What the Triton kernels share: the operand as one block-diagonal 2-D pattern
(torch_ops.global_csr, which also checks a structure not checked yet), the
transpose's pattern for sums over columns, block sizes and accumulation types."""
from typing import NamedTuple

import torch
import triton.language as tl

from ..torch_ops._common import global_csr

# Entries of a row taken at once by a program (a loop over the rest).
BLOCK_E = 16

_ACC = {torch.float64: tl.float64}


class Pattern(NamedTuple):
    """A batch as one (R, M) matrix: ptr (R+1,) int64, col (nnz,) int64 global columns,
    rows (nnz,) int64 each entry's row, values (nnz,) flat (or None)."""
    ptr: torch.Tensor
    col: torch.Tensor
    rows: torch.Tensor
    values: object
    nrows: int
    ncols: int


def pattern(A) -> Pattern:
    """The global 2-D pattern of a CSRView A (no kept-rows view: _backends handles those)."""
    A2, rows, cols = global_csr(A)
    values = A.values.reshape(-1) if A.values is not None else None
    return Pattern(A2.crow_indices(), cols, rows, values, A.batch * A.nrows, A.batch * A.ncols)


def transpose(P: Pattern):
    """(tptr (M+1,), trow (nnz,), perm (nnz,)): the transpose's pattern, int64: column
    j's entries are perm[tptr[j]:tptr[j+1]] (positions in P's entry arrays), in
    increasing row order (a stable sort), trow their rows.  Deterministic, no atomics."""
    perm = torch.argsort(P.col, stable=True)
    tptr = torch.zeros(P.ncols + 1, dtype=torch.int64, device=P.col.device)
    torch.cumsum(torch.bincount(P.col, minlength=P.ncols), 0, out=tptr[1:])
    return tptr, P.rows.index_select(0, perm), perm


def acc_type(dtype: torch.dtype):
    """The type sums are kept in: float64 for float64, else float32 (16-bit too, rounded
    once at the end, as the C kernels do)."""
    return _ACC.get(dtype, tl.float32)


def block(n: int, least: int = 1) -> int:
    """A power-of-two block covering n (at least `least`)."""
    return max(least, 1 << max(0, int(n) - 1).bit_length())
