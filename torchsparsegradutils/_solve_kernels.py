"""Typed wrappers around the solve kernels (csrc/trisolve.c, cg.c, minres.c), on a CSRView.

The Krylov kernels run the whole loop of utils.linear_cg and utils.minres in one
call for a sparse CPU A (krylov_view says when); the solvers keep their torch
loops for everything else (callables, dense or CUDA operators, preconditioners).

CPU tensors go to torchsparsegradutils._C.  Other devices go through PyTorch's
own sparse triangular solve (``torch.triangular_solve`` with a CSR matrix, via
_compat; cuSPARSE serves it on CUDA) on the block-diagonal 2D form of the batch, built by
index arithmetic: A is never densified.  The structure checks of the kernel are
repeated there with torch ops so both paths raise the same errors.
"""
from typing import Optional, Tuple

import torch

from . import _C, _kernels
from ._compat import linalg_solve_triangular_compat
from ._csr import CSRView, as_csr, plain

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
    return trisolve_c(A.ptr, A.col, plain(A.values), A.batch, A.nrows, B, upper, unitriangular, transpose)


def trisolve_c(ptr: torch.Tensor, col: torch.Tensor, values: torch.Tensor, batch: int, n: int, B: torch.Tensor,
               upper: bool, unitriangular: bool, transpose: bool) -> torch.Tensor:
    """trisolve of CPU arrays as the kernels read them (_kernels.kernel_array's), where
    no graph is recorded: the C kernel with nothing else on the way."""
    X = B.clone(memory_format=torch.contiguous_format)     # a clone applies B's negative bit
    _C.trisolve(ptr, col, values, batch, n, X, upper, unitriangular, transpose, torch.get_num_threads())
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


def krylov_view(A, B: torch.Tensor, *dense: Optional[torch.Tensor]) -> Optional[CSRView]:
    """The CSR view of A when the Krylov kernels can solve A X = B: A a 2D sparse COO/CSR
    tensor (n, n) of B's dtype (float32/float64), B (n, k), both on the CPU, and no
    gradient to record through B or the other `dense` inputs (an initial guess); else None."""
    if not (isinstance(A, torch.Tensor) and A.layout in (torch.sparse_coo, torch.sparse_csr) and A.dim() == 2
            and A.dense_dim() == 0 and A.dtype in (torch.float32, torch.float64) and B.dtype == A.dtype
            and B.dim() == 2 and A.shape[0] == A.shape[1] == B.shape[0] and _kernels._use_c(A, B)):
        return None
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (B,) + dense):
        return None
    return as_csr(A.detach())


def _krylov_outputs(B: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(B as the kernels read it, X, residuals) for an (n, k) B; residuals float64 (2, k):
    the recurrence's relative residuals, then the recomputed ones"""
    return (plain(B).contiguous(), torch.empty(B.shape, dtype=B.dtype),
            torch.empty(2, B.shape[1], dtype=torch.float64))


def cg(A: CSRView, B: torch.Tensor, X0: Optional[torch.Tensor], tol: float, stop: float, tiny: float, mean: bool,
       max_iter: int, min_iter: int):
    """utils.linear_cg's loop for a sparse A without preconditioner or probes (csrc/cg.c).
    Returns (X, rel, true_rel, (iterations, matvecs, recursive_stop, stopped_before,
    breakdown)); rel and true_rel float64 (k,), breakdown 0 or the broken inner product
    (1: r^T r at the start, 2: p^T A p, 3: r^T r)."""
    B, X, res = _krylov_outputs(B)
    if X0 is not None:
        X.copy_(X0.detach())                     # the kernel starts from it, in place
    info = _C.cg(A.ptr, A.col, plain(A.values), A.nrows, B, X, res, X0 is not None, tol, stop, tiny, mean,
                 max_iter, min_iter, torch.get_num_threads())
    return X, res[0], res[1], info


def minres(A: CSRView, B: torch.Tensor, tol: float, eps: float, scale: float, shift: float, max_iter: int):
    """utils.minres's loop for a sparse A without preconditioner (csrc/minres.c), solving
    (scale A + shift I) X = B.  Returns (X, rel, true_rel, iterations)."""
    B, X, res = _krylov_outputs(B)
    info = _C.minres(A.ptr, A.col, plain(A.values), A.nrows, B, X, res, tol, eps, scale, shift, max_iter,
                     torch.get_num_threads())
    return X, res[0], res[1], info[0]
