"""Preconditioned conjugate gradients for symmetric positive definite A X = B, all columns at once,
with the Lanczos tridiagonal matrices that CG's coefficients define (for log-determinant estimates).

A sparse CPU A without preconditioner or probes runs the whole loop in C (csrc/cg.c, through
_backends.cg); _cg_loop is the same iteration in torch ops for every other operator."""
import math
from dataclasses import dataclass
from typing import Callable, List, Literal, NamedTuple, Optional

import torch

from .. import _backends
from ._operator import Operator, as_matmul, checked, col_dot, col_norm, warn_not_converged

# the breakdowns, by the code the C loop gives them (1, 2, 3)
_BREAKDOWN = {
    1: "CG breakdown: preconditioned residual inner product must be finite and at least eps for unconverged "
       "right-hand sides (is the preconditioner SPD?)",
    2: "CG breakdown: p^T A p must be finite and at least eps for unconverged right-hand sides "
       "(is A positive definite?)",
    3: "CG breakdown: residual inner product must be finite and at least eps for unconverged right-hand sides",
}


class LinearCGSettings(NamedTuple):
    """Defaults of :func:`linear_cg` (names as in the published release)."""

    max_cg_iterations: int = 1000            # iteration cap when max_iter is not given
    max_lanczos_quadrature_iterations: int = 20  # Lanczos size cap when max_tridiag_iter is not given
    cg_tolerance: float = 1e-5               # relative residual ||b - A x|| / ||b|| per column
    terminate_cg_by_size: bool = False       # also stop after n iterations for an n x n matrix
    verbose_linalg: bool = False             # unused: the solver never prints


@dataclass(frozen=True)
class CGInfo:
    """How a :func:`linear_cg` run ended.  Residuals have shape ``(*batch, k)``.

    ``reason``: "converged" when the recomputed residual ``||b - A x|| / ||b||``
    meets the tolerance for every column; "recursive_converged" (or
    "mean_converged" with ``convergence_reduction="mean"``) when CG's own
    recurrence met it but the recomputed residual does not; "stopped_updating"
    when every starting residual was below ``stop_updating_after`` but not the
    tolerance; "max_iter" when the iteration cap was reached."""

    iterations: int
    matvecs: int
    converged: torch.Tensor
    recursive_relative_residual: torch.Tensor
    true_relative_residual: torch.Tensor
    tolerance: float
    reason: Literal["converged", "recursive_converged", "mean_converged", "stopped_updating", "max_iter"]


def _finite_at_least(value: float, name: str, low: float, strict: bool) -> float:
    if not math.isfinite(value) or value < low or (strict and value == low):
        raise ValueError(f"{name} must be finite and {'positive' if strict else 'nonnegative'}, got {value}")
    return float(value)


def _lanczos_matrices(alphas: List[torch.Tensor], betas: List[torch.Tensor]) -> torch.Tensor:
    """The r x r Lanczos tridiagonal matrix of every probe from CG's step sizes
    alpha_k and direction ratios beta_k (each (*batch, n_tridiag)):
        T[k, k]   = 1/alpha_k + beta_{k-1}/alpha_{k-1}     (the second term for k > 0)
        T[k, k-1] = T[k-1, k] = sqrt(beta_{k-1}) / alpha_{k-1}
    Returned as (n_tridiag, *batch, r, r)."""
    r = len(alphas)
    a = torch.stack(alphas, -1).movedim(-2, 0)            # (n_tridiag, *batch, r)
    b = torch.stack(betas, -1).movedim(-2, 0)
    diag = 1 / a
    diag[..., 1:] += b[..., :-1] / a[..., :-1]
    off = b[..., :-1].sqrt() / a[..., :-1]
    T = torch.diag_embed(diag)
    if r > 1:
        T = T + torch.diag_embed(off, 1) + torch.diag_embed(off, -1)
    return T


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
    matmul_closure : sparse COO/CSR or dense tensor, or callable ``x -> A @ x`` on
        blocks shaped like ``rhs`` (with a column dimension).
    rhs : ``(n,)``, ``(n, k)`` or ``(*batch, n, k)``; every column is an independent system.
    n_tridiag : number of leading columns of ``rhs`` whose Lanczos tridiagonal
        matrices are also returned (probe vectors for stochastic Lanczos quadrature).
    tolerance : relative residual ``||b - A x|| / ||b||`` to reach per column
        (default ``settings.cg_tolerance``); finite and nonnegative.
    eps : breakdown threshold: an unconverged column whose ``p^T A p`` or
        ``r^T M^{-1} r`` falls below it raises ``RuntimeError`` (default: the
        smallest positive normal number of rhs's dtype); finite and positive.
    stop_updating_after : a column stops moving once its relative residual is
        at most this (default ``tolerance``); finite and nonnegative.
    max_iter : iteration cap (default ``settings.max_cg_iterations``).
    max_tridiag_iter : Lanczos size cap (default ``settings.max_lanczos_quadrature_iterations``).
    initial_guess : start ``x0`` shaped like rhs (default zeros).
    preconditioner : callable ``r -> M^{-1} r`` with M SPD.
    convergence_reduction : stop when ``"all"`` columns converged, or their ``"mean"`` residual did.
    min_iter : iterate at least this many times.
    return_info : also return a :class:`CGInfo`.

    Returns
    -------
    ``X`` shaped like rhs; with ``n_tridiag > 0`` also ``T`` of shape
    ``(n_tridiag, *batch, r, r)``, ``r <= min(max_tridiag_iter, n)``: the Lanczos
    matrix of ``A`` (of ``M^{-1} A`` with a preconditioner) started from each probe
    column, whose eigenvalues are Ritz values of ``A``.  Its growth stops when a
    probe column converges (after that CG's coefficients carry no information).
    With ``return_info`` the :class:`CGInfo` comes last.  A column that does
    not meet the tolerance gives a :class:`ConvergenceWarning`.

    Raises
    ------
    TypeError : rhs not a real floating-point tensor; operator neither a tensor
        nor a callable (also a RuntimeError, as the release raised).
    ValueError : invalid settings or shapes.
    RuntimeError : breakdown (see ``eps``); an operator or preconditioner
        output not shaped like rhs; ``max_tridiag_iter > max_iter`` with ``n_tridiag > 0``.

    Examples
    --------
    >>> import torch
    >>> A = torch.tensor([[4.0, 1.0, 0.0], [1.0, 3.0, 1.0], [0.0, 1.0, 2.0]], dtype=torch.float64)
    >>> b = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    >>> x = linear_cg(A, b, tolerance=1e-12)
    >>> torch.allclose(A @ x, b)
    True
    >>> x, T, info = linear_cg(A, b, n_tridiag=1, tolerance=1e-10, max_tridiag_iter=3, return_info=True)
    >>> T.shape, info.reason
    (torch.Size([1, 3, 3]), 'converged')
    >>> torch.allclose(torch.linalg.eigvalsh(T[0]), torch.linalg.eigvalsh(A))
    True
    """
    if not isinstance(rhs, torch.Tensor) or not torch.is_floating_point(rhs):
        raise TypeError("rhs must be a real floating-point torch.Tensor")
    if rhs.dim() < 1:
        raise ValueError("rhs must have at least one dimension")
    vector = rhs.dim() == 1
    B = rhs.unsqueeze(-1) if vector else rhs
    tol = _finite_at_least(settings.cg_tolerance if tolerance is None else tolerance, "tolerance", 0, False)
    tiny = _finite_at_least(torch.finfo(B.dtype).tiny if eps is None else eps, "eps", 0, True)
    if eps is not None and not torch.tensor(tiny, dtype=B.dtype) > 0:   # finfo.tiny always is
        raise ValueError(f"eps must be representable as a positive value in the rhs dtype {B.dtype}, got {tiny}")
    stop = tol if stop_updating_after is None else _finite_at_least(stop_updating_after, "stop_updating_after",
                                                                      0, False)
    if convergence_reduction not in ("all", "mean"):
        raise ValueError(f"convergence_reduction must be 'all' or 'mean', got {convergence_reduction!r}")
    if min_iter < 0:
        raise ValueError(f"min_iter must be nonnegative, got {min_iter}")
    cap = settings.max_cg_iterations if max_iter is None else max_iter
    if settings.terminate_cg_by_size:
        cap = min(cap, B.shape[-2])
    if not 0 <= n_tridiag <= B.shape[-1]:
        raise ValueError(f"n_tridiag must be in [0, {B.shape[-1]}] (the number of rhs columns), got {n_tridiag}")
    tri_cap = settings.max_lanczos_quadrature_iterations if max_tridiag_iter is None else max_tridiag_iter
    if n_tridiag and tri_cap > cap:
        raise RuntimeError(f"max_tridiag_iter ({tri_cap}) cannot exceed max_iter ({cap}): the Lanczos matrix "
                           "has one row per CG iteration")
    tri_cap = min(tri_cap, B.shape[-2])
    x0 = None
    if initial_guess is not None:
        x0 = initial_guess.unsqueeze(-1) if initial_guess.dim() == 1 else initial_guess
        if x0.shape != B.shape:
            raise ValueError(f"initial_guess must have shape {tuple(B.shape)}, got {tuple(initial_guess.shape)}")
        if x0.device != B.device or x0.dtype != B.dtype:
            raise ValueError("initial_guess must share rhs device and dtype")
    view = None if n_tridiag or preconditioner is not None else _backends.krylov_view(matmul_closure, B, x0)
    if view is not None:                              # the whole loop in C
        X, rel, true_rel, (it, matvecs, recursive_stop, stopped_before, broke) = _backends.cg(
            view, B, x0, tol, stop, tiny, convergence_reduction == "mean", cap, min_iter)
        if broke:
            raise RuntimeError(_BREAKDOWN[broke])
        rel, true_rel = rel.to(B.dtype).unsqueeze(0), true_rel.to(B.dtype).unsqueeze(0)    # (1, k)
        alphas, betas = [], []
    else:
        X, rel, true_rel, it, matvecs, recursive_stop, stopped_before, alphas, betas = _cg_loop(
            matmul_closure, B, x0, preconditioner, tol, tiny, stop, cap, min_iter, n_tridiag, tri_cap,
            convergence_reduction)
    converged = true_rel <= tol
    if bool(converged.all()):
        reason = "converged"
    elif recursive_stop:
        reason = "recursive_converged" if convergence_reduction == "all" else "mean_converged"
    else:
        reason = "stopped_updating" if stopped_before else "max_iter"
    if reason != "converged":
        warn_not_converged("linear_cg", it, float(true_rel.max()), tol)
    out = [X.squeeze(-1) if vector else X]
    if n_tridiag:
        if alphas:
            out.append(_lanczos_matrices(alphas, betas))
        else:
            out.append(B.new_zeros((n_tridiag,) + B.shape[:-2] + (0, 0)))
    if return_info:
        out.append(CGInfo(it, matvecs, converged.squeeze(-2), rel.squeeze(-2), true_rel.squeeze(-2), tol, reason))
    return out[0] if len(out) == 1 else tuple(out)


def _cg_loop(matmul_closure: Operator, B: torch.Tensor, x0: Optional[torch.Tensor],
             preconditioner: Optional[Callable[[torch.Tensor], torch.Tensor]], tol: float, tiny: float, stop: float,
             cap: int, min_iter: int, n_tridiag: int, tri_cap: int, convergence_reduction: str):
    """linear_cg's iteration with torch ops, for any operator (the C loop of
    _backends.cg takes a sparse CPU A without preconditioner or probes).  Returns
    (X, rel, true_rel, iterations, matvecs, recursive_stop, stopped_before, alphas, betas)."""
    matmul = checked(as_matmul(matmul_closure, "matmul_closure"), "matmul_closure", B)
    precond = None if preconditioner is None else checked(preconditioner, "preconditioner", B)

    # Work on b / ||b|| per column, so residuals are relative; a zero column's
    # solution is zero whatever the initial guess.
    bnorm = col_norm(B)
    zero_col = bnorm == 0
    bnorm = bnorm.masked_fill(zero_col, 1)
    Bn = B / bnorm
    X = torch.zeros_like(B) if x0 is None else (x0 / bnorm).masked_fill(zero_col, 0)
    R = Bn - matmul(X)
    matvecs = 1
    rel = col_norm(R)
    frozen = rel <= stop                              # columns that no longer move
    probes = slice(0, n_tridiag)
    alphas: List[torch.Tensor] = []
    betas: List[torch.Tensor] = []
    it, recursive_stop = 0, False
    stopped_before = bool(frozen.all()) and not n_tridiag and min_iter == 0
    if stopped_before:
        cap = 0
    else:
        Z = R if precond is None else precond(R)
        P = Z
        rz = col_dot(R, Z)
        if bool((~frozen & ((rz < tiny) | ~torch.isfinite(rz))).any()):
            raise RuntimeError(_BREAKDOWN[1])

    def reached(rel):
        return bool((rel <= tol).all()) if convergence_reduction == "all" else float(rel.mean()) <= tol

    while it < cap:
        AP = matmul(P)
        matvecs += 1
        pAp = col_dot(P, AP)
        active = ~frozen
        if bool((active & ((pAp < tiny) | ~torch.isfinite(pAp))).any()):
            raise RuntimeError(_BREAKDOWN[2])
        if bool((active & ((rz < tiny) | ~torch.isfinite(rz))).any()):
            raise RuntimeError(_BREAKDOWN[3])
        alpha = torch.where(active, rz / torch.where(active, pAp, torch.ones_like(pAp)), torch.zeros_like(rz))
        X = X + alpha * P
        R = R - alpha * AP
        Z = R if precond is None else precond(R)
        rz_new = col_dot(R, Z)
        beta = torch.where(active, rz_new / torch.where(active, rz, torch.ones_like(rz)), torch.zeros_like(rz))
        P = Z + beta * P
        rz = rz_new
        if n_tridiag and len(alphas) < tri_cap and bool(active[..., probes].all()):
            alphas.append(alpha[..., 0, probes])
            betas.append(beta[..., 0, probes])
        rel = col_norm(R)
        frozen = rel <= stop
        it += 1
        lanczos_open = n_tridiag and len(alphas) == it and len(alphas) < tri_cap \
            and not bool(frozen[..., probes].any())
        if it >= min_iter and reached(rel) and not lanczos_open:
            recursive_stop = True
            break

    X = X * bnorm
    true_rel = col_norm(B - matmul(X)) / bnorm
    matvecs += 1
    return X, rel, true_rel, it, matvecs, recursive_stop, stopped_before, alphas, betas
