"""A JAX solver (``jax.scipy.sparse.linalg.bicgstab``, ``cg``, ...) inside torch autograd.

The solve and the adjoint solve run in JAX on A converted once through DLPack;
the gradient w.r.t. A is ``-grad_B X^T`` at A's stored positions by our SDDMM
kernel (_ops/solve.py: bridge_solve), never an nnz x k or n x n temporary.
JAX's own solvers are compiled once per (solver, keyword arguments) and reused
for every call with the same shapes: run eagerly they re-trace their loop on
every call (about 1 s for a 10 x 10 system on CPU, against 0.1 ms compiled).
"""
import functools
from typing import Any, Callable, Optional

import jax
import jax.scipy.sparse.linalg
import torch

from .._ops.solve import bridge_solve
from .jax_bindings import j2t, t2j, t2j_coo, t2j_csr

JaxSolver = Callable[..., Any]


_JAX_SOLVERS = (jax.scipy.sparse.linalg.bicgstab, jax.scipy.sparse.linalg.cg, jax.scipy.sparse.linalg.gmres)


@functools.lru_cache(maxsize=64)
def _compiled(solver: JaxSolver, kw_items: tuple) -> Callable[..., Any]:
    kwargs = dict(kw_items)
    return jax.jit(lambda A, b: solver(A, b, **kwargs)[0])


def _runner(solver: JaxSolver, kwargs: dict) -> Callable[..., Any]:
    """(A, b) -> x: compiled and cached for JAX's own solvers with hashable
    keywords, else the solver called as given."""
    if solver in _JAX_SOLVERS:
        try:
            return _compiled(solver, tuple(sorted(kwargs.items())))
        except TypeError:                       # unhashable keywords (x0=array, ...): run eagerly
            pass

    def eager(A, b):
        out = solver(A, b, **kwargs)
        return out[0] if isinstance(out, (tuple, list)) else out
    return eager


def sparse_solve_j4t(A: torch.Tensor, B: torch.Tensor, solve: Optional[JaxSolver] = None,
                     transpose_solve: Optional[JaxSolver] = None, **kwargs: Any) -> torch.Tensor:
    r"""Solve ``A X = B`` with a JAX solver; differentiable in A (sparse gradient) and B.

    Parameters
    ----------
    A : 2D square sparse COO or CSR tensor (CPU, or CUDA with a CUDA build of JAX).
    B : ``(n,)`` or ``(n, k)``, A's dtype and device.  float64 runs with
        ``jax_enable_x64`` switched on for the call only.
    solve : ``solve(A_jax, b_jax, **kwargs) -> x`` or ``(x, info)`` solving
        ``A x = b``, A_jax a ``jax.experimental.sparse`` matrix (``CSR`` or
        ``COO`` after A's layout); default ``jax.scipy.sparse.linalg.bicgstab``.
        It receives b with B's own shape.
    transpose_solve : the same for the backward: called with ``A^T`` (as a JAX
        sparse matrix) and the incoming gradient; default ``solve``.
    **kwargs : passed to both (``tol``, ``atol``, ``maxiter``, ...).

    Returns
    -------
    ``X`` shaped like B.

    Raises
    ------
    ValueError : non-tensors, A not 2D or not square, B not 1D/2D, mismatched
        rows, dtypes or devices.
    TypeError : A neither COO nor CSR.

    Examples
    --------
    >>> import torch
    >>> from jax.scipy.sparse.linalg import cg
    >>> A = torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64).to_sparse_csr().requires_grad_()
    >>> b = torch.tensor([1.0, 2.0], dtype=torch.float64)
    >>> x = sparse_solve_j4t(A, b, solve=cg, tol=1e-12)
    >>> torch.allclose(A.detach().to_dense() @ x, b)
    True
    >>> x.sum().backward()
    >>> A.grad.layout
    torch.sparse_csr
    """
    if isinstance(A, torch.Tensor) and isinstance(B, torch.Tensor) and A.dtype != B.dtype:
        raise ValueError(f"A and B must have the same dtype. Got A: {A.dtype}, B: {B.dtype}")
    solve = solve or jax.scipy.sparse.linalg.bicgstab
    transpose_solve = transpose_solve or solve
    vector = isinstance(B, torch.Tensor) and B.dim() == 1
    x64 = isinstance(A, torch.Tensor) and A.dtype == torch.float64
    mats = {}

    def matrix(transposed: bool):
        """A (or A^T) as a JAX sparse matrix, converted on first use."""
        if transposed not in mats:
            if not mats:
                with jax.enable_x64(x64):
                    mats[False] = t2j_coo(A.detach()) if A.layout == torch.sparse_coo else t2j_csr(A.detach())
            if transposed:
                mats[True] = mats[False].transpose()
        return mats[transposed]

    def run(solver: JaxSolver, transposed: bool):
        def apply(rhs: torch.Tensor, **kw) -> torch.Tensor:
            with jax.enable_x64(x64):
                return j2t(_runner(solver, kw)(matrix(transposed), t2j(rhs[:, 0] if vector else rhs)))
        return apply

    return bridge_solve(A, B, run(solve, False), run(transpose_solve, True), kwargs)
