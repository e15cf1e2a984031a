"""BiCGSTAB (van der Vorst) for general nonsymmetric A X = B, all columns at once."""
import logging
from typing import Callable, NamedTuple, Optional, Union

import torch

from ._operator import Operator, as_matmul, col_dot, col_norm, safe_div, warn_not_converged

_null_log = logging.getLogger("torchsparsegradutils.bicgstab")
_null_log.addHandler(logging.NullHandler())


class BICGSTABSettings(NamedTuple):
    """Defaults of :func:`bicgstab` (names as in the published release)."""

    matvec_max: Optional[int] = None   # cap on products with A per column (default 2n)
    abstol: float = 1.0e-8             # stop when ||b - A x|| <= abstol + reltol * ||b||
    reltol: float = 1.0e-6
    precon: Optional[Union[torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]] = None  # M^{-1}
    logger: logging.Logger = _null_log


def bicgstab(matmul_closure: Operator, rhs: torch.Tensor, initial_guess: Optional[torch.Tensor] = None,
             settings: BICGSTABSettings = BICGSTABSettings()) -> torch.Tensor:
    r"""Solve ``A X = B`` for a general nonsingular ``A`` by (right-preconditioned) BiCGSTAB.

    Parameters
    ----------
    matmul_closure : sparse COO/CSR or dense tensor, or callable ``x -> A @ x`` on ``(n, k)`` blocks.
    rhs : ``(n,)``, ``(n, k)`` or ``(b, n, k)``.
    initial_guess : ``x0`` shaped like rhs (default zeros).
    settings : :class:`BICGSTABSettings`: tolerances, matvec cap (2 per iteration),
        preconditioner ``precon`` (tensor or callable applying ``M^{-1}``).

    Returns
    -------
    ``X`` shaped like rhs.  Not converging within the cap, or a breakdown
    (``rho = 0``), gives a :class:`ConvergenceWarning` with the iteration count
    and the residual.
    """
    matmul = as_matmul(matmul_closure, "matmul_closure")
    precond = (lambda r: r) if settings.precon is None else as_matmul(settings.precon, "precon")
    vector = rhs.dim() == 1
    B = rhs.unsqueeze(-1) if vector else rhs
    n = B.shape[-2]
    cap = 2 * n if settings.matvec_max is None else settings.matvec_max
    X = torch.zeros_like(B) if initial_guess is None else (
        initial_guess.unsqueeze(-1) if vector else initial_guess).clone()
    R = B - matmul(X) if initial_guess is not None else B.clone()
    bnorm = col_norm(B)
    target = settings.abstol + settings.reltol * bnorm
    rhat = R.clone()
    ones = torch.ones_like(bnorm)
    rho, alpha, omega = ones, ones, ones
    V = P = torch.zeros_like(B)
    matvecs, it = 0, 0
    rnorm = col_norm(R)
    while matvecs + 2 <= cap and not bool((rnorm <= target).all()):
        it += 1
        active = rnorm > target                      # converged columns stay where they are
        rho_new = col_dot(rhat, R)
        if bool(((rho_new == 0) & active).any()):
            break                                    # breakdown: reported below
        beta = safe_div(rho_new, rho) * safe_div(alpha, omega)
        P = R + beta * (P - omega * V)
        Ph = precond(P)
        V = matmul(Ph)
        alpha = torch.where(active, safe_div(rho_new, col_dot(rhat, V)), torch.zeros_like(rho_new))
        S = R - alpha * V
        Sh = precond(S)
        T = matmul(Sh)
        omega = torch.where(active, safe_div(col_dot(T, S), col_dot(T, T)), torch.zeros_like(rho_new))
        X = X + alpha * Ph + omega * Sh
        R = S - omega * T
        rho = rho_new
        matvecs += 2
        rnorm = col_norm(R)
        settings.logger.info("bicgstab iteration %d: max residual %.3e", it, float(rnorm.max()))
    true = col_norm(B - matmul(X))
    if not bool((true <= target * 10).all()) or not bool((rnorm <= target).all()):
        bn = torch.where(bnorm == 0, torch.ones_like(bnorm), bnorm)
        warn_not_converged("bicgstab", it, float((true / bn).max()), settings.reltol)
    return X.squeeze(-1) if vector else X
