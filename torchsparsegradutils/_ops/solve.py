"""The generic solve and least squares (sparse_generic_solve, sparse_generic_lstsq, and the
bridges' solves): an outside solver's answer, with gradients sampled at A's pattern.

With X = A^{-1} B (or A^+ B) from the solver and G = dL/dX, the backward is one more
solve (the adjoint's) and sampled products at A's stored entries (tsgu::sddmm, see
products.py): grad_B = A^{-T} G, grad_A = -grad_B X^T (least squares: plus r Y^T, r the
residual, Y = A^+ grad_B).  The solve's backward runs through its own Function again, so
it is differentiable again; least squares is differentiable once.  The default solvers
(utils' MINRES and LSMR) are given by the public modules.
"""
import warnings
from typing import Callable

import torch

from .. import _backends
from .._core.intake import as_csr
from .._core.saved import load_operand, save_operand
from .._core.torch_sparse import coo_tensor
from .._core.undefined_grad import none_for_undefined
from .._core.validate import SystemSpec, check_system, refuse_create_graph
from .products import sddmm

_BRIDGE = SystemSpec("the solve")


def run_generic_solve(spec: SystemSpec, A: torch.Tensor, B: torch.Tensor, solve, transpose_solve, default,
                      kwargs: dict) -> torch.Tensor:
    """sparse_generic_solve of A and B against spec; `default` solves both directions
    where neither solver is given (A symmetric)."""
    check_system(spec, A, B)
    if B.dtype != A.dtype:
        warnings.warn(f"A and B have different dtypes: A={A.dtype}, B={B.dtype}; B is converted to {A.dtype}",
                      UserWarning, stacklevel=3)
        B = B.to(A.dtype)
    if solve is None and transpose_solve is None:
        solve = transpose_solve = default
    elif solve is None:
        solve = _transposed(transpose_solve)
    elif transpose_solve is None:
        transpose_solve = _transposed(solve)
    return _generic_solve(A, B, solve, transpose_solve, kwargs)


def bridge_solve(A: torch.Tensor, B: torch.Tensor, forward: Callable[..., torch.Tensor],
                 adjoint: Callable[..., torch.Tensor], kwargs: dict) -> torch.Tensor:
    """X = A^{-1} B by an outside solver (SciPy, CuPy, JAX), with the gradient of
    :func:`sparse_generic_solve`: ``grad_B = A^{-T} G`` by ``adjoint``,
    ``grad_A = -grad_B X^T`` sampled at A's pattern by the SDDMM kernel (no nnz x k
    or n x n temporary).  ``forward(rhs, **kwargs)`` solves ``A x = rhs``,
    ``adjoint(rhs, **kwargs)`` solves ``A^T y = rhs``, both on ``(n, k)`` tensors;
    the arguments are checked as sparse_generic_solve's are."""
    check_system(_BRIDGE, A, B)
    return _generic_solve(A, B, lambda _, rhs, **kw: forward(rhs, **kw), lambda _, rhs, **kw: adjoint(rhs, **kw),
                          kwargs)


def _generic_solve(A, B, solve, transpose_solve, kwargs) -> torch.Tensor:
    """SparseGenericSolve on a B of one or more columns, shaped like B."""
    B2 = B.unsqueeze(-1) if B.dim() == 1 else B
    X = SparseGenericSolve.apply(A, B2, solve, transpose_solve, kwargs, False, None)
    return X.squeeze(-1) if B.dim() == 1 else X


def _transposed(solver: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """(A, B) -> solver(A^T, B): the other direction from one solver, on a sparse A^T."""
    def run(A, B, **kwargs):
        return solver(_sparse_transpose(A), B, **kwargs)
    return run


def _sparse_transpose(A: torch.Tensor) -> torch.Tensor:
    """A^T of a detached 2D sparse matrix, in A's layout (O(nnz), never dense)."""
    if A.layout == torch.sparse_coo:
        A = A.coalesce()
        return coo_tensor(A.indices().flip(0), A.values(), (A.shape[1], A.shape[0])).coalesce()
    return _backends.csr_transpose(as_csr(A))


def solver_result(X, shape, dtype: torch.dtype, solver: str = "solver") -> torch.Tensor:
    """A solver's answer as a tensor of `shape` and `dtype` (solvers may return (n,) for
    (n, 1), or a tuple whose first item is the answer)."""
    if isinstance(X, (tuple, list)):
        X = X[0]
    if not isinstance(X, torch.Tensor):
        raise TypeError(f"the {solver} must return a tensor, got {type(X).__name__}")
    return X.to(dtype).reshape(shape)


def run_lstsq(spec: SystemSpec, A: torch.Tensor, B: torch.Tensor, lstsq, transpose_lstsq) -> torch.Tensor:
    """sparse_generic_lstsq of A and B against spec, with both solvers given."""
    check_system(spec, A, B)
    if B.dtype != A.dtype:
        raise TypeError(f"A and B must have the same dtype, got {A.dtype} and {B.dtype}")
    B2 = B.unsqueeze(-1) if B.dim() == 1 else B
    X = SparseGenericLstsq.apply(A, B2, lstsq, transpose_lstsq)
    return X.squeeze(-1) if B.dim() == 1 else X


def _solve(solver, A: torch.Tensor, B: torch.Tensor, rows: int) -> torch.Tensor:
    """solver(A, B) as a (rows, B's columns) tensor of B's dtype; no call when B has no
    columns (the answer is empty, and solvers mishandle it)."""
    if B.shape[1] == 0:
        return B.new_zeros(rows, 0)
    return solver_result(solver(A, B), (rows, B.shape[1]), B.dtype, "least-squares solver")


class SparseGenericSolve(torch.autograd.Function):
    """The autograd Function behind :func:`sparse_generic_solve` and bridge_solve: solves ``A X = B``
    (``A^T X = B`` when ``transposed``), whose backward is one more such solve.
    The solvers are given ``A_data`` (the values saved at the outer forward) when
    it is set, else ``A`` detached."""

    @staticmethod
    def forward(ctx, A, B, solve, transpose_solve, kwargs, transposed, A_data):
        ctx.set_materialize_grads(False)     # an undefined gradient reaches backward as None
        A_data = A.detach() if A_data is None else A_data
        view = as_csr(A_data)                   # A's structure checked before a solver reads A
        run = transpose_solve if transposed else solve
        with torch.no_grad():
            X = solver_result(run(A_data, B.detach(), **kwargs), B.shape, B.dtype)
        ctx.solvers = (solve, transpose_solve, kwargs, transposed)
        save_operand(ctx, A, view, True, X)
        return X

    @staticmethod
    @none_for_undefined
    def backward(ctx, G):
        view, A, (X,) = load_operand(ctx)
        solve, transpose_solve, kwargs, transposed = ctx.solvers
        # M = A (or A^T): grad_B = M^{-T} G, again through this Function so that
        # it stays differentiable for create_graph=True
        grad_B = SparseGenericSolve.apply(A, G, solve, transpose_solve, kwargs, not transposed, view.to_torch())
        grad_A = None
        if ctx.needs_input_grad[0]:
            g = sddmm(view, X, grad_B) if transposed else sddmm(view, grad_B, X)
            grad_A = view.grad_like(-g)
        return grad_A, grad_B if ctx.needs_input_grad[1] else None, None, None, None, None, None


class SparseGenericLstsq(torch.autograd.Function):
    """The autograd Function behind :func:`sparse_generic_lstsq` (validate with run_lstsq first)."""

    @staticmethod
    def forward(ctx, A, B, lstsq, transpose_lstsq):
        ctx.set_materialize_grads(False)     # an undefined gradient reaches backward as None
        Ad = A.detach()
        view = as_csr(Ad)                       # A's structure checked before a solver reads A
        X = _solve(lstsq, Ad, B.detach(), A.shape[1])
        ctx.solvers = (lstsq, transpose_lstsq)
        save_operand(ctx, A, view, True, B, X)
        return X

    @staticmethod
    @none_for_undefined
    def backward(ctx, G):
        refuse_create_graph("sparse_generic_lstsq", sparse_csr_twice=False)
        view, _, (B, X) = load_operand(ctx)
        lstsq, transpose_lstsq = ctx.solvers
        A = view.to_torch()
        grad_B = _solve(transpose_lstsq, A, G, A.shape[0])
        grad_A = None
        if ctx.needs_input_grad[0]:
            Y = _solve(lstsq, A, grad_B, A.shape[1])
            R = B - _backends.spmm(view, X)
            g = _backends.sddmm(view, R, Y) - _backends.sddmm(view, grad_B, X)
            grad_A = view.grad_like(g)
        return grad_A, grad_B if ctx.needs_input_grad[1] else None, None, None
