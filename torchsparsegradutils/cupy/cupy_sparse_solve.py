"""A SciPy (CPU) or CuPy (CUDA) sparse solver inside torch autograd.

The solve and the adjoint solve run in SciPy/CuPy on A converted once (memory
shared with A on CPU); the default factorizes A once (SuperLU) and reuses the
factors for the adjoint solve.  The gradient w.r.t. A is ``-grad_B X^T`` at A's
stored positions by our SDDMM kernel (_ops/solve.py: bridge_solve), never an
nnz x k or n x n temporary.
"""
import inspect
import warnings
from typing import Any, Callable, Union

import torch

from .._ops.solve import bridge_solve
from ..utils._operator import ConvergenceWarning
from . import cupy_bindings as cb

_ITERATIVE = ("cg", "cgs", "minres", "gmres")
_TOLERANCES = ("tol", "tolerance", "atol", "rtol", "maxiter", "matvec_max")
Solver = Union[str, Callable[..., Any], None]


def _iterative(name: str, xsp: Any) -> Callable[..., Any]:
    """SciPy/CuPy's iterative solver `name` on (n, k) blocks, column by column.
    ``tol`` becomes ``rtol`` where the solver takes that; keywords the solver
    does not take are dropped (the release's contract); a nonzero ``info``
    (not converged) is a ConvergenceWarning."""
    fn = getattr(xsp.linalg, name)
    accepted = set(inspect.signature(fn).parameters)

    def run(M, rhs, **kwargs):
        if "tol" in kwargs and "tol" not in accepted:
            kwargs["rtol"] = kwargs.pop("tol")
        kwargs = {k: v for k, v in kwargs.items() if k in accepted}
        cols = []
        for j in range(rhs.shape[1]):
            x, info = fn(M, rhs[:, j], **kwargs)
            if info != 0:
                warnings.warn(f"{name} (SciPy/CuPy) did not converge: info={info}", ConvergenceWarning, stacklevel=5)
            cols.append(x)
        xp = cb._get_array_modules(rhs)[0]
        return xp.stack(cols, 1) if cols else xp.zeros_like(rhs)
    return run


def sparse_solve_c4t(A: torch.Tensor, B: torch.Tensor, solve: Solver = None, transpose_solve: Solver = None,
                     **kwargs: Any) -> torch.Tensor:
    r"""Solve ``A X = B`` with SciPy (CPU) or CuPy (CUDA); differentiable in A (sparse gradient) and B.

    Parameters
    ----------
    A : 2D square sparse COO or CSR tensor.
    B : ``(n,)`` or ``(n, k)``; converted to A's dtype (with a warning) if it differs.
    solve : ``None`` (default: an LU factorization of A, ``splu``, reused by the
        backward; it ignores ``**kwargs``), ``"spsolve"``, one of the iterative ``"cg"``, ``"cgs"``,
        ``"minres"``, ``"gmres"`` (run column by column), or a callable
        ``solve(A_c, b_c, **kwargs) -> x`` or ``(x, info)`` on the SciPy/CuPy
        matrix A_c and an array b_c shaped like B.
    transpose_solve : the same for the adjoint solve ``A^T y = g`` of the
        backward.  A name is applied to ``A^T``; a callable is given A itself
        (it must solve with the transpose, as in the release).  Default: ``solve``.
    **kwargs : passed to the solvers: ``tol`` (as ``rtol`` where the solver
        takes that), ``atol``, ``maxiter``, ``x0``, ``M``, ...; keywords a named
        solver does not take are ignored, and ``spsolve`` / the LU ignore the
        tolerances.

    Returns
    -------
    ``X`` shaped like B, with B's dtype and device.  CUDA tensors without CuPy
    are solved by SciPy on a host copy.

    Raises
    ------
    ValueError : non-tensors, A not 2D or not square, B not 1D/2D, mismatched
        rows or devices, an unknown solver name.
    TypeError : A neither COO nor CSR.

    Examples
    --------
    >>> import torch
    >>> A = torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64).to_sparse_csr().requires_grad_()
    >>> b = torch.tensor([1.0, 2.0], dtype=torch.float64)
    >>> x = sparse_solve_c4t(A, b)
    >>> torch.allclose(A.detach().to_dense() @ x, b)
    True
    >>> x_cg = sparse_solve_c4t(A, b, solve="cg", tol=1e-12)
    >>> torch.allclose(x_cg, x)
    True
    >>> x.sum().backward()
    >>> A.grad.layout
    torch.sparse_csr
    """
    for s in (solve, transpose_solve):
        if isinstance(s, str) and s not in _ITERATIVE + ("spsolve",):
            raise ValueError(f"Unknown solver: {s}. Supported solvers: {list(_ITERATIVE + ('spsolve',))}")
    if isinstance(A, torch.Tensor) and isinstance(B, torch.Tensor) and B.dtype != A.dtype:
        warnings.warn(f"A and B have different dtypes: A={A.dtype}, B={B.dtype}; B is converted to {A.dtype}",
                      UserWarning, stacklevel=2)
        B = B.to(A.dtype)
    transpose_solve = solve if transpose_solve is None else transpose_solve
    vector = isinstance(B, torch.Tensor) and B.dim() == 1
    state = {}

    def backend():
        """(xp, xsp, A as a SciPy/CuPy CSR matrix), converted on first use."""
        if not state:
            xp, xsp = cb._get_array_modules(A)
            Ad = A.detach()
            Ac = cb.t2c_coo(Ad).tocsr() if A.layout == torch.sparse_coo else cb.t2c_csr(Ad)
            state.update(xp=xp, xsp=xsp, A=Ac)
        return state["xp"], state["xsp"], state["A"]

    def lu():
        if "lu" not in state:
            state["lu"] = backend()[1].linalg.splu(backend()[2].tocsc())
        return state["lu"]

    def run(solver: Solver, transposed: bool):
        def apply(rhs: torch.Tensor, **kw) -> torch.Tensor:
            xp, xsp, Ac = backend()
            r = cb._torch_to_backend(rhs, xp)
            if solver is None:
                x = lu().solve(r, trans="T" if transposed else "N")
            elif solver == "spsolve":
                kw_direct = {k: v for k, v in kw.items() if k not in _TOLERANCES}
                x = xsp.linalg.spsolve(Ac.T.tocsr() if transposed else Ac, r, **kw_direct)
                x = x.reshape(r.shape)
            elif isinstance(solver, str):
                x = _iterative(solver, xsp)(Ac.T.tocsr() if transposed else Ac, r, **kw)
            else:
                out = solver(Ac, r[:, 0] if vector else r, **kw)
                x = out[0] if isinstance(out, tuple) else out
            return cb._backend_to_torch(x).to(rhs.device)
        return apply

    return bridge_solve(A, B, run(solve, False), run(transpose_solve, True), kwargs)
