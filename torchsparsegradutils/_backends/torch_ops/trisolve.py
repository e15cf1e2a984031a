"""Triangular solves (sparse_triangular_solve): the kernel's structure checks in torch
ops, then PyTorch's sparse triangular solve."""
import warnings

import torch

from ..._core.native import STATUS
from ..._core.view import CSRView
from ._common import global_csr


def triangular_diagonal(A: CSRView, rows: torch.Tensor, cols: torch.Tensor, upper: bool, unitriangular: bool):
    """The checks of a triangular A's structure, the kernel's errors (ValueError): an
    entry on the wrong side, a diagonal entry stored with unitriangular, or a row
    without one otherwise.  Returns the flat positions of the diagonal entries, one
    per global row in row order (None with unitriangular).  rows, cols: global_csr's."""
    n = A.nrows
    i, j = rows % n if n else rows, cols % n if n else cols
    if bool((j < i).any() if upper else (j > i).any()):
        raise ValueError(STATUS["ETRI_SIDE"])
    on_diag = i == j
    if unitriangular:
        if bool(on_diag.any()):
            raise ValueError(STATUS["EDIAG_UNIT"])
        return None
    diag = torch.nonzero(on_diag).squeeze(1)
    if diag.numel() != A.batch * n:
        raise ValueError(STATUS["EDIAG_ZERO"])
    return diag


def check_diagonal(values: torch.Tensor, diag: torch.Tensor) -> None:
    """A zero among the diagonal entries (values at triangular_diagonal's positions) is
    the kernel's error."""
    if bool((values.index_select(0, diag) == 0).any()):
        raise ValueError(STATUS["EDIAG_ZERO"])


def trisolve(A: CSRView, B: torch.Tensor, upper: bool, unitriangular: bool, transpose: bool) -> torch.Tensor:
    """X = A^{-1} B (or A^{-T} B) through PyTorch's sparse triangular solve on the
    block-diagonal 2D form (cuSPARSE serves it on CUDA), after the kernel's structure
    checks in torch ops, so both paths raise the same errors."""
    A2, rows, cols = global_csr(A)
    n, p = A.nrows, B.shape[-1]
    diag = triangular_diagonal(A, rows, cols, upper, unitriangular)
    if diag is not None:
        check_diagonal(A2.values(), diag)
    if A.batch * n == 0 or p == 0:
        return B.detach().clone()
    # torch.linalg.solve_triangular takes only strided matrices: sparse ones still
    # need the deprecated torch.triangular_solve (pytorch#87358)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"torch\.triangular_solve is deprecated", category=UserWarning)
        X = torch.triangular_solve(B.detach().reshape(A.batch * n, p), A2.detach(), upper=upper,
                                   transpose=transpose, unitriangular=unitriangular).solution
    return X.reshape(B.shape)
