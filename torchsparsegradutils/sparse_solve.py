"""Solves with a sparse A whose gradient w.r.t. A stays sparse.

sparse_triangular_solve: substitution in C (csrc/trisolve.c) on the CPU, a sync-free
                         Triton kernel on CUDA (_backends/triton/trisolve.py), forward
                         and backward.
sparse_generic_solve:    any iterative solver (default MINRES), backward by the
                         adjoint solve, differentiable again (create_graph=True).
"""
import warnings
from typing import Callable, Optional

import torch

from . import _backends
from ._core.intake import as_csr
from ._core.saved import load_operand, save_operand
from ._core.sparse_csr import SparseCSR
from ._core.torch_sparse import coo_tensor
from ._core.undefined_grad import none_for_undefined
from ._core.validate import check_operands, check_system, eager_only, error, records_graph, refuse_create_graph
from ._core.view import op_args
from ._ops.products import sddmm
from ._ops.trisolve import trisolve, trisolve_backward
from .utils.minres import minres


def sparse_triangular_solve(A, B: torch.Tensor, upper: bool = True,
                            unitriangular: bool = False, transpose: bool = False) -> torch.Tensor:
    r"""Solve ``A X = B`` (or ``A^T X = B``) for a sparse triangular ``A``; the gradient w.r.t. ``A`` is sparse.

    API-compatible with the published ``torchsparsegradutils.sparse_triangular_solve``.

    Parameters
    ----------
    A : sparse COO or CSR tensor, shape ``(n, n)`` or batched ``(b, n, n)``, float32 or float64,
        or a :class:`~torchsparsegradutils.SparseCSR` (traced by ``torch.compile``; the
        gradient goes to its values).
        Triangular: entries only on and above (``upper=True``) or on and below the diagonal.
    B : dense tensor, shape ``(n, p)`` or ``(b, n, p)``, A's dtype and device.
    upper : bool
        ``A`` is upper (default) or lower triangular.
    unitriangular : bool
        The diagonal is implicit ones; ``A`` must then store no diagonal entry.
    transpose : bool
        Solve ``A^T X = B`` instead (``A^T`` is never built).

    Returns
    -------
    Dense ``X`` shaped like ``B``.

    Gradients
    ---------
    With ``G = dL/dX`` and ``M = A`` (or ``A^T`` with ``transpose``):
    ``grad_B = M^{-T} G`` (one more triangular solve) and
    ``grad_M = -grad_B X^T``, evaluated only at ``A``'s stored positions, so
    ``grad_A`` is a sparse tensor in A's layout and no n x n matrix is formed.
    On CPU both directions run in C; on other devices through
    ``torch.triangular_solve`` with a CSR matrix.  Differentiable once for a torch
    sparse ``A`` (a backward with ``create_graph=True`` raises ``RuntimeError``);
    a ``SparseCSR`` gives second derivatives.

    Raises
    ------
    ValueError
        Non-tensor inputs; ranks not both 2D / both 3D; A not COO/CSR or B not
        strided; A not square; mismatched rows or batch sizes; different devices;
        malformed indices; an entry on the wrong side of the diagonal; a zero or
        missing diagonal entry (A singular); a stored diagonal with
        ``unitriangular=True``.
    TypeError
        Values not float32/float64, or A and B of different dtypes.

    Examples
    --------
    >>> L = torch.tensor([[2.0, 0.0], [1.0, 4.0]]).to_sparse_csr()
    >>> sparse_triangular_solve(L, torch.tensor([[2.0], [9.0]]), upper=False)
    tensor([[1.],
            [2.]])
    """
    flags = (bool(upper), bool(unitriangular), bool(transpose))
    if not isinstance(A, SparseCSR):
        return _triangular_solve_torch(A, B, *flags)
    shape = _check_solve_args(A, B)
    values = A.values
    if torch.compiler.is_compiling() or records_graph(values, B):
        return trisolve(A.view(), values, B, *flags)
    # what the custom operator runs, without its dispatch (nothing to trace or record)
    return _backends.trisolve_arrays(A.crow_indices, A.col_indices, values, shape, B, *flags)


@eager_only
def _triangular_solve_torch(A: torch.Tensor, B: torch.Tensor, *flags) -> torch.Tensor:
    shape = _check_solve_args(A, B)
    if torch.is_grad_enabled() and (A.requires_grad or B.requires_grad):
        return SparseTriangularSolve.apply(A, B, *flags)
    # nothing to save for a backward (and no graph to record): a CSR A's own arrays
    if A.layout is torch.sparse_csr:
        return _backends.trisolve_arrays(A.crow_indices(), A.col_indices(), A.values(), shape, B, *flags)
    return _backends.trisolve(as_csr(A), B, *flags)


def _check_solve_args(A, B):
    """sparse_triangular_solve's contract; returns A's shape."""
    a_shape, b_shape = check_operands(A, B, "sparse_triangular_solve")
    if a_shape[-2] != a_shape[-1]:
        raise error(ValueError, "A must be square on its last two dimensions", f"got shape {tuple(a_shape)}")
    if a_shape[-2] != b_shape[-2]:
        raise ValueError(f"Incompatible inner dimensions: A[..., {a_shape[-2]}] vs B[..., {b_shape[-2]}]")
    return a_shape


class SparseTriangularSolve(torch.autograd.Function):
    """The autograd Function behind :func:`sparse_triangular_solve` (validate with it first)."""

    @staticmethod
    def forward(ctx, A, B, upper, unitriangular, transpose):
        ctx.set_materialize_grads(False)     # an undefined gradient reaches backward as None
        view = as_csr(A.detach())
        X = _backends.trisolve(view, B, upper, unitriangular, transpose)
        ctx.flags = (upper, unitriangular, transpose)
        save_operand(ctx, A, view, True, X)
        return X

    @staticmethod
    @none_for_undefined
    def backward(ctx, G):
        refuse_create_graph("sparse_triangular_solve")
        view, _, (X,) = load_operand(ctx)
        if not (ctx.needs_input_grad[0] or ctx.needs_input_grad[1]):
            return None, None, None, None, None
        g, grad_B = trisolve_backward(op_args(view), view.values, X, G, ctx.flags,
                                           ctx.needs_input_grad[0])
        grad_A = view.grad_like(g) if g is not None else None
        return grad_A, grad_B if ctx.needs_input_grad[1] else None, None, None, None


def sparse_generic_solve(A: torch.Tensor, B: torch.Tensor, solve: Optional[Callable[..., torch.Tensor]] = None,
                         transpose_solve: Optional[Callable[..., torch.Tensor]] = None,
                         **kwargs) -> torch.Tensor:
    r"""Solve ``A X = B`` with a pluggable (iterative) solver; the gradient w.r.t. ``A`` is sparse.

    API-compatible with the published ``torchsparsegradutils.sparse_generic_solve``.

    Parameters
    ----------
    A : sparse COO or CSR tensor ``(n, n)``, nonsingular.
    B : dense ``(n,)`` or ``(n, k)``.
    solve : callable ``solve(A, B, **kwargs) -> X`` solving ``A X = B``, given a
        detached ``A``.  Default :func:`~torchsparsegradutils.utils.minres`
        (symmetric ``A``).  Others: ``linear_cg`` (SPD), ``bicgstab`` (general).
    transpose_solve : callable ``transpose_solve(A, G, **kwargs) -> Y`` solving
        ``A^T Y = G`` (it is given ``A``, not ``A^T``).  Default: MINRES on ``A``
        itself when ``solve`` is also defaulted (``A`` symmetric), otherwise
        ``solve`` applied to a sparse ``A^T``.
    **kwargs : passed to both solvers (tolerances, ``settings=...``).

    Returns
    -------
    ``X`` shaped like ``B``.

    Gradients
    ---------
    ``grad_B = A^{-T} G`` by the adjoint solve and ``grad_A = -grad_B X^T`` only
    at A's stored positions (a sampled product; no n x n matrix).  The backward
    is itself differentiable, so ``create_graph=True`` gives second derivatives
    and Hessian-vector products w.r.t. ``A`` and ``B``.  For second derivatives
    w.r.t. a leaf ``values`` tensor, build ``A`` with
    :func:`torchsparsegradutils.sparse_csr_tensor` or
    :func:`torchsparsegradutils.sparse_coo_tensor`: PyTorch's own
    ``torch.sparse_coo_tensor`` backward into its values is not differentiable again.

    Raises
    ------
    ValueError
        Non-tensor inputs; A not 2D or not square; B not 1D/2D; mismatched rows;
        different devices.
    TypeError
        A not COO/CSR, B not strided, values not float32/float64.
    """
    check_system(A, B, "sparse_generic_solve", lambda s: s[0] == s[1], "A must be square")
    if B.dtype != A.dtype:
        warnings.warn(f"A and B have different dtypes: A={A.dtype}, B={B.dtype}; B is converted to {A.dtype}",
                      UserWarning, stacklevel=2)
        B = B.to(A.dtype)
    if solve is None and transpose_solve is None:
        solve = transpose_solve = minres          # MINRES assumes A symmetric: A^T = A
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
    check_system(A, B, "the solve", lambda s: s[0] == s[1], "A must be square")
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


class SparseGenericSolve(torch.autograd.Function):
    """The autograd Function behind :func:`sparse_generic_solve`: solves ``A X = B``
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
