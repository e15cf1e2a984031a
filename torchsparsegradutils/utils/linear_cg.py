"""Preconditioned conjugate gradients for symmetric positive definite A X = B, all columns at once."""
from dataclasses import dataclass
from typing import Callable, Literal, NamedTuple, Optional

import torch

from ._operator import Operator, as_matmul, col_dot, col_norm, safe_div, warn_not_converged


class LinearCGSettings(NamedTuple):
    """Defaults of :func:`linear_cg` (names as in the published release)."""

    max_cg_iterations: int = 1000            # iteration cap when max_iter is not given
    max_lanczos_quadrature_iterations: int = 20  # unused here: kept for API compatibility
    cg_tolerance: float = 1e-5               # relative residual ||b - A x|| / ||b|| per column
    terminate_cg_by_size: bool = False       # also stop after n iterations for an n x n matrix
    verbose_linalg: bool = False             # unused: the solver never prints


@dataclass(frozen=True)
class CGInfo:
    """How a :func:`linear_cg` run ended.  Residuals have shape (*batch, k)."""

    iterations: int
    matvecs: int
    converged: torch.Tensor
    recursive_relative_residual: torch.Tensor
    true_relative_residual: torch.Tensor
    tolerance: float
    reason: Literal["converged", "recursive_converged", "mean_converged", "stopped_updating", "max_iter"]


def linear_cg(matmul_closure: Operator, rhs: torch.Tensor, n_tridiag: int = 0,
              tolerance: Optional[float] = None, eps: Optional[float] = None,
              stop_updating_after: Optional[float] = None, max_iter: Optional[int] = None,
              max_tridiag_iter: Optional[int] = None, initial_guess: Optional[torch.Tensor] = None,
              preconditioner: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
              settings: LinearCGSettings = LinearCGSettings(),
              convergence_reduction: Literal["all", "mean"] = "all", min_iter: int = 0,
              return_info: bool = False):
    r"""Solve ``A X = B`` for symmetric positive definite ``A`` by (preconditioned) conjugate gradients.

    Parameters
    ----------
    matmul_closure : sparse COO/CSR or dense tensor, or callable ``x -> A @ x`` on ``(n, k)`` blocks.
    rhs : ``(n,)``, ``(n, k)`` or ``(b, n, k)``; every column is an independent system.
    tolerance : relative residual ``||b - A x|| / ||b||`` to reach per column
        (default ``settings.cg_tolerance``).
    eps : denominators below this count as breakdown (default: 1e-10 for float32, 1e-30 for float64).
    max_iter : iteration cap (default ``settings.max_cg_iterations``).
    initial_guess : start ``x0`` shaped like rhs (default zeros).
    preconditioner : callable ``r -> M^{-1} r`` with M SPD.
    convergence_reduction : ``"all"`` columns must converge, or their ``"mean"`` residual.
    min_iter : iterate at least this many times.
    return_info : also return a :class:`CGInfo`.
    n_tridiag, max_tridiag_iter, stop_updating_after : accepted for API compatibility;
        Lanczos tridiagonalization (``n_tridiag > 0``) is not supported.

    Returns
    -------
    ``X`` shaped like rhs (and the :class:`CGInfo` with ``return_info``).  When the
    tolerance is not met within ``max_iter`` iterations a
    :class:`ConvergenceWarning` names the iteration count and the residual.
    """
    if n_tridiag:
        raise ValueError("linear_cg: Lanczos tridiagonalization (n_tridiag > 0) is not supported")
    if convergence_reduction not in ("all", "mean"):
        raise ValueError(f"convergence_reduction must be 'all' or 'mean', got {convergence_reduction!r}")
    matmul = as_matmul(matmul_closure, "matmul_closure")
    vector = rhs.dim() == 1
    B = rhs.unsqueeze(-1) if vector else rhs
    tol = settings.cg_tolerance if tolerance is None else tolerance
    cap = settings.max_cg_iterations if max_iter is None else max_iter
    if settings.terminate_cg_by_size:
        cap = min(cap, B.shape[-2])
    tiny = eps if eps is not None else (1e-30 if B.dtype == torch.float64 else 1e-10)
    precond = preconditioner or (lambda r: r)

    X = torch.zeros_like(B) if initial_guess is None else (
        initial_guess.unsqueeze(-1) if vector else initial_guess).clone()
    bnorm = col_norm(B)
    bnorm = torch.where(bnorm == 0, torch.ones_like(bnorm), bnorm)
    R = B - matmul(X) if initial_guess is not None else B.clone()
    matvecs = int(initial_guess is not None)
    Z = precond(R)
    P = Z.clone()
    rz = col_dot(R, Z)
    rel = col_norm(R) / bnorm
    it = 0

    def done(rel):
        return bool((rel <= tol).all()) if convergence_reduction == "all" else float(rel.mean()) <= tol

    while it < cap and (it < min_iter or not done(rel)):
        AP = matmul(P)
        matvecs += 1
        pAp = col_dot(P, AP)
        active = pAp.abs() > tiny                   # converged or broken-down columns stop moving
        alpha = torch.where(active, safe_div(rz, pAp), torch.zeros_like(rz))
        X = X + alpha * P
        R = R - alpha * AP
        Z = precond(R)
        rz_new = col_dot(R, Z)
        beta = torch.where(active & (rz.abs() > tiny), safe_div(rz_new, rz), torch.zeros_like(rz))
        P = Z + beta * P
        rz = rz_new
        rel = col_norm(R) / bnorm
        it += 1

    true_rel = col_norm(B - matmul(X)) / bnorm
    matvecs += 1
    converged = (true_rel <= tol).squeeze(-2)
    if done(true_rel):
        reason = "converged"
    elif done(rel):
        reason = "recursive_converged"
    else:
        reason = "max_iter"
        warn_not_converged("linear_cg", it, float(true_rel.max()), tol)
    out = X.squeeze(-1) if vector else X
    if return_info:
        info = CGInfo(it, matvecs, converged, rel.squeeze(-2), true_rel.squeeze(-2), tol, reason)
        return out, info
    return out
