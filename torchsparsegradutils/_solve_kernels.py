"""Typed wrappers around the solve kernels (csrc/trisolve.c), on a CSRView.

CPU tensors go to torchsparsegradutils._C.  Other devices go through PyTorch's
own sparse triangular solve (``torch.triangular_solve`` with a CSR matrix, via
_compat; cuSPARSE serves it on CUDA) on the block-diagonal 2D form of the batch, built by
index arithmetic: A is never densified.  The structure checks of the kernel are
repeated there with torch ops so both paths raise the same errors.
"""
import torch

from . import _C, _kernels
from ._compat import linalg_solve_triangular_compat
from ._csr import CSRView, plain

# the messages of the C status codes TSGU_ETRI_SIDE, TSGU_EDIAG_ZERO, TSGU_EDIAG_UNIT
_MSG_SIDE = ("A is not triangular on the requested side: it stores an entry below the diagonal "
             "with upper=True, or above it with upper=False")
_MSG_ZERO = ("A is singular: a diagonal entry is zero or not stored "
             "(pass unitriangular=True if the diagonal is implicit ones)")
_MSG_UNIT = ("unitriangular=True, but A stores diagonal entries: the unit diagonal must be "
             "implicit (A strictly triangular)")


def trisolve(A: CSRView, B: torch.Tensor, upper: bool, unitriangular: bool,
             transpose: bool) -> torch.Tensor:
    """X = A^{-1} B (or A^{-T} B with transpose) for every batch item of a
    triangular A; B is (n, p) or (b, n, p).  Returns a new tensor."""
    if not _kernels._use_c(A.values, B):
        return _trisolve_torch(A, B, upper, unitriangular, transpose)
    X = torch.empty(B.shape, dtype=B.dtype).copy_(B.detach())   # copy_ applies B's negative bit
    _C.trisolve(A.ptr, A.col, plain(A.values), A.batch, A.nrows, X, bool(upper),
                bool(unitriangular), bool(transpose), torch.get_num_threads())
    return X


def _trisolve_torch(A: CSRView, B: torch.Tensor, upper: bool, unitriangular: bool,
                    transpose: bool) -> torch.Tensor:
    A2, rows, cols = _kernels._global_csr(A)
    n, p = A.nrows, B.shape[-1]
    i, j = rows % n if n else rows, cols % n if n else cols
    if bool((j < i).any() if upper else (j > i).any()):
        raise ValueError(_MSG_SIDE)
    on_diag = i == j
    if unitriangular:
        if bool(on_diag.any()):
            raise ValueError(_MSG_UNIT)
    else:
        nonzero_diag = on_diag & (A2.values() != 0)
        if int(nonzero_diag.sum()) != A.batch * n:
            raise ValueError(_MSG_ZERO)
    if A.batch * n == 0 or p == 0:
        return B.detach().clone()
    X = linalg_solve_triangular_compat(A2.detach(), B.detach().reshape(A.batch * n, p), upper=upper,
                                       transpose=transpose, unitriangular=unitriangular)
    return X.reshape(B.shape)
