"""What the iterative solvers and the SciPy/CuPy/JAX bridges share: turning "A" into a
product, checking operator outputs and reporting non-convergence.

A may be a sparse COO/CSR tensor (its CSR view is built and checked once; the
products then run on the C kernels on CPU, PyTorch's sparse ops elsewhere and
for complex values), a dense tensor, or any callable x -> A @ x on (n, k) blocks.
Products are taken without autograd: the solvers are called on detached data by
the solve Functions, which supply the gradients themselves.
"""
import warnings
from typing import Callable, Optional, Union

import torch

from .. import _backends
from .._core.intake import as_csr

Operator = Union[torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]


class ConvergenceWarning(UserWarning):
    """An iterative solver stopped before meeting its tolerance."""


class OperatorTypeError(TypeError, RuntimeError):
    """An operator argument that is neither a tensor nor a callable.

    A TypeError by nature; also a RuntimeError because the published release
    raises RuntimeError here and callers may catch that."""


def warn_not_converged(solver: str, iterations: int, residual: float, tolerance: float) -> None:
    warnings.warn(f"{solver} did not converge within {iterations} iterations: relative residual "
                  f"{residual:.3e} > tolerance {tolerance:.1e}", ConvergenceWarning, stacklevel=3)


def _sparse_products(A: torch.Tensor):
    """(x -> A x, x -> A^H x) for a sparse A: the C kernels for real values,
    PyTorch's sparse ops for complex ones (the kernels take float32/float64)."""
    if A.is_complex():
        Ac = A.detach().to_sparse_coo().coalesce()
        Ah = Ac.transpose(-2, -1).conj().coalesce()
        mm = torch.sparse.mm if Ac.dim() == 2 else torch.bmm
        return lambda x: mm(Ac, x.to(Ac.dtype)), lambda x: mm(Ah, x.to(Ah.dtype))
    view = as_csr(A.detach())
    dt = A.dtype

    def product(kernel, rows_out):
        def run(x):
            x = x.to(dt)
            fold = len(view.shape) == 2 and x.dim() > 2    # 2D A on (..., n, k) blocks
            X = x.movedim(-2, 0).reshape(x.shape[-2], -1) if fold else x
            Y = kernel(view, X) if X.shape[-1] else X.new_zeros(X.shape[:-2] + (rows_out, 0))
            if fold:
                Y = Y.reshape((rows_out,) + x.shape[:-2] + x.shape[-1:]).movedim(0, -2)
            return Y
        return run
    return product(_backends.spmm, A.shape[-2]), product(_backends.spmm_t, A.shape[-1])


def as_matmul(A: Operator, name: str = "A") -> Callable[[torch.Tensor], torch.Tensor]:
    """x -> A @ x for x of shape (n, k) (or (b, n, k))."""
    if isinstance(A, torch.Tensor):
        if A.layout in (torch.sparse_coo, torch.sparse_csr):
            return _sparse_products(A)[0]
        if A.layout == torch.strided:
            Ad = A.detach()
            return lambda x: Ad.matmul(x)
        raise OperatorTypeError(f"{name} must be a COO/CSR/dense tensor or a callable, got layout {A.layout}")
    if callable(A):
        return A
    raise OperatorTypeError(f"{name} must be a tensor or a callable computing A @ x, got {type(A).__name__}")


def as_rmatmul(A: Operator, Armat: Optional[Operator]) -> Callable[[torch.Tensor], torch.Tensor]:
    """x -> A^H @ x (the adjoint: A^T for real A), from Armat when given, else from the tensor A."""
    if Armat is not None:
        return as_matmul(Armat, "Armat")
    if isinstance(A, torch.Tensor):
        if A.layout in (torch.sparse_coo, torch.sparse_csr):
            return _sparse_products(A)[1]
        if A.layout == torch.strided:
            Ah = A.detach().transpose(-2, -1).conj()
            return lambda x: Ah.matmul(x)
    raise OperatorTypeError("Armat (x -> A^H @ x) is required when A is a callable")


def checked(fn: Callable[[torch.Tensor], torch.Tensor], what: str,
            like: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    """fn, raising RuntimeError when its output's shape, device or dtype differs from `like`'s."""
    def run(x):
        y = fn(x)
        if not isinstance(y, torch.Tensor) or y.shape != like.shape or y.device != like.device \
                or y.dtype != like.dtype:
            got = (tuple(y.shape), y.dtype, y.device) if isinstance(y, torch.Tensor) else type(y).__name__
            raise RuntimeError(f"{what} output must match rhs shape, device, and dtype: expected "
                               f"{(tuple(like.shape), like.dtype, like.device)}, got {got}")
        return y
    return run


def col_norm(x: torch.Tensor) -> torch.Tensor:
    """2-norm of every column, keeping the reduced dimension: (..., 1, k)."""
    return torch.linalg.vector_norm(x, dim=-2, keepdim=True)


def col_dot(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (x * y).sum(dim=-2, keepdim=True)


def safe_div(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a / b, and 0 where b == 0 (a column that has converged exactly)."""
    zero = b == 0
    return torch.where(zero, torch.zeros_like(a), a / torch.where(zero, torch.ones_like(b), b))
