"""What the iterative solvers share: turning "A" into a product, and reporting non-convergence.

A may be a sparse COO/CSR tensor (its CSR view is built and checked once; the
products then run on the C kernels on CPU, PyTorch's sparse ops elsewhere), a
dense tensor, or any callable x -> A @ x on (n, k) blocks.  Products are taken
without autograd: the solvers are called on detached data by the solve
Functions, which supply the gradients themselves.
"""
import warnings
from typing import Callable, Optional, Union

import torch

Operator = Union[torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]


class ConvergenceWarning(UserWarning):
    """An iterative solver stopped before meeting its tolerance."""


def warn_not_converged(solver: str, iterations: int, residual: float, tolerance: float) -> None:
    warnings.warn(f"{solver} did not converge within {iterations} iterations: relative residual "
                  f"{residual:.3e} > tolerance {tolerance:.1e}", ConvergenceWarning, stacklevel=3)


def _sparse_products(A: torch.Tensor):
    from .._csr import as_csr
    from .. import _kernels
    view = as_csr(A.detach())
    dt = A.dtype

    def mv(x):
        return _kernels.spmm(view, x.to(dt)) if x.shape[-1] else x.new_zeros(x.shape[:-2] + (A.shape[-2], 0))

    def rmv(x):
        return _kernels.spmm_t(view, x.to(dt)) if x.shape[-1] else x.new_zeros(x.shape[:-2] + (A.shape[-1], 0))
    return mv, rmv


def as_matmul(A: Operator, name: str = "A") -> Callable[[torch.Tensor], torch.Tensor]:
    """x -> A @ x for x of shape (n, k) (or (b, n, k))."""
    if isinstance(A, torch.Tensor):
        if A.layout in (torch.sparse_coo, torch.sparse_csr):
            return _sparse_products(A)[0]
        if A.layout == torch.strided:
            Ad = A.detach()
            return lambda x: Ad.matmul(x)
        raise TypeError(f"{name} must be a COO/CSR/dense tensor or a callable, got layout {A.layout}")
    if callable(A):
        return A
    raise TypeError(f"{name} must be a tensor or a callable computing A @ x, got {type(A).__name__}")


def as_rmatmul(A: Operator, Armat: Optional[Operator]) -> Callable[[torch.Tensor], torch.Tensor]:
    """x -> A^T @ x, from Armat when given, else from the tensor A."""
    if Armat is not None:
        return as_matmul(Armat, "Armat")
    if isinstance(A, torch.Tensor):
        if A.layout in (torch.sparse_coo, torch.sparse_csr):
            return _sparse_products(A)[1]
        if A.layout == torch.strided:
            At = A.detach().transpose(-2, -1)
            return lambda x: At.matmul(x)
    raise TypeError("Armat (x -> A^T @ x) is required when A is a callable")


def col_norm(x: torch.Tensor) -> torch.Tensor:
    """2-norm of every column, keeping the reduced dimension: (..., 1, k)."""
    return torch.linalg.vector_norm(x, dim=-2, keepdim=True)


def col_dot(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (x * y).sum(dim=-2, keepdim=True)


def safe_div(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a / b, and 0 where b == 0 (a column that has converged exactly)."""
    zero = b == 0
    return torch.where(zero, torch.zeros_like(a), a / torch.where(zero, torch.ones_like(b), b))
