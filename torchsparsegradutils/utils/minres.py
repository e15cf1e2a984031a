"""MINRES (Paige & Saunders) for symmetric, possibly indefinite, A X = B, all columns at once.

A sparse CPU A without preconditioner runs the whole loop in C (csrc/minres.c, through
_backends.minres); _minres_loop is the same iteration in torch ops for every other operator."""
from typing import Callable, NamedTuple, Optional, Union

import torch

from .. import _backends
from ._operator import Operator, as_matmul, col_dot, col_norm, safe_div, warn_not_converged


class MINRESSettings(NamedTuple):
    """Defaults of :func:`minres` (names as in the published release)."""

    max_cg_iterations: int = 1000   # iteration cap when max_iter is not given
    minres_tolerance: float = 1e-4  # relative residual ||b - A x|| / ||b|| per column
    verbose_linalg: bool = False    # unused: the solver never prints


def minres(matmul_closure: Operator, rhs: torch.Tensor, eps: float = 1e-25,
           shifts: Optional[Union[float, torch.Tensor]] = None, value: Optional[float] = None,
           max_iter: Optional[int] = None, preconditioner: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
           settings: MINRESSettings = MINRESSettings()) -> torch.Tensor:
    r"""Solve ``(value * A + shift I) X = B`` for symmetric ``A`` by MINRES.

    MINRES minimizes ``||b - A x||`` over the Krylov space, so it handles
    indefinite symmetric matrices where CG may fail.

    Parameters
    ----------
    matmul_closure : sparse COO/CSR or dense tensor, or callable ``x -> A @ x`` on ``(n, k)`` blocks.
    rhs : ``(n,)``, ``(n, k)`` or ``(b, n, k)``.
    eps : floor of the Givens norm (guards division by zero).
    shifts : None, a scalar, or a 1D tensor of ``s`` shifts (solutions stacked on a new leading dim).
    value : scale of the operator (default 1).
    max_iter : iteration cap (default ``settings.max_cg_iterations``).
    preconditioner : callable ``r -> M^{-1} r`` with M SPD.
    settings : :class:`MINRESSettings`; ``minres_tolerance`` is the relative residual per column.

    Returns
    -------
    ``X`` shaped like rhs (``(s, *rhs.shape)`` for ``s`` shifts).  Not converging
    within the cap gives a :class:`ConvergenceWarning` with the iteration count
    and the residual.

    Examples
    --------
    >>> import torch
    >>> A = torch.tensor([[2.0, 1.0, 0.0], [1.0, -1.0, 1.0], [0.0, 1.0, 3.0]], dtype=torch.float64)
    >>> b = torch.tensor([1.0, 0.0, 2.0], dtype=torch.float64)
    >>> x = minres(A.to_sparse_csr(), b, settings=MINRESSettings(minres_tolerance=1e-12))
    >>> torch.allclose(A @ x, b)          # A is indefinite: CG would not apply
    True
    >>> X = minres(A, b, shifts=torch.tensor([0.0, 5.0], dtype=torch.float64),
    ...            settings=MINRESSettings(minres_tolerance=1e-12))
    >>> X.shape, torch.allclose((A + 5 * torch.eye(3, dtype=torch.float64)) @ X[1], b)
    (torch.Size([2, 3]), True)
    """
    if isinstance(shifts, torch.Tensor) and shifts.numel() > 1:
        return torch.stack([minres(matmul_closure, rhs, eps, float(s), value, max_iter, preconditioner, settings)
                            for s in shifts.reshape(-1)])
    shift = 0.0 if shifts is None else float(shifts)
    scale = 1.0 if value is None else float(value)
    vector = rhs.dim() == 1
    B = rhs.unsqueeze(-1) if vector else rhs
    tol = settings.minres_tolerance
    cap = settings.max_cg_iterations if max_iter is None else max_iter
    view = None if preconditioner is not None else _backends.krylov_view(matmul_closure, B)
    if view is not None:                              # the whole loop in C
        X, rel, true_rel, it = _backends.minres(view, B, tol, eps, scale, shift, cap)
    else:
        X, rel, true_rel, it = _minres_loop(as_matmul(matmul_closure, "matmul_closure"), B, eps, shift, scale,
                                            tol, cap, preconditioner)
    # the recurrence's estimate decides; the true residual catches drift in finite precision
    if not bool((rel <= tol).all()) or not bool((true_rel <= 10 * tol).all()):
        warn_not_converged("minres", it, float(true_rel.max()), tol)
    return X.squeeze(-1) if vector else X


def _minres_loop(matmul: Callable[[torch.Tensor], torch.Tensor], B: torch.Tensor, eps: float, shift: float,
                 scale: float, tol: float, cap: int, preconditioner: Optional[Callable[[torch.Tensor], torch.Tensor]]):
    """minres's iteration with torch ops, for any operator (the C loop of
    _backends.minres takes a sparse CPU A without preconditioner).  Returns
    (X, rel, true_rel, iterations)."""
    precond = preconditioner or (lambda r: r)

    def op(v):
        y = matmul(v)
        if scale != 1.0:
            y = y * scale
        return y + shift * v if shift else y

    bnorm = col_norm(B)
    bnorm1 = torch.where(bnorm == 0, torch.ones_like(bnorm), bnorm)
    X = torch.zeros_like(B)
    r1 = B.clone()
    y = precond(r1)
    beta1 = col_dot(r1, y).clamp_min(0).sqrt()
    zero = torch.zeros_like(beta1)
    beta, oldb, dbar, epsln, phibar = beta1, zero, zero, zero, beta1
    cs, sn = -torch.ones_like(beta1), zero
    w = w2 = torch.zeros_like(B)
    r2 = r1
    it = 0
    rel = phibar / bnorm1
    while it < cap and not bool((rel <= tol).all()):
        it += 1
        v = y * safe_div(torch.ones_like(beta), beta)
        y = op(v)
        if it >= 2:
            y = y - safe_div(beta, oldb) * r1
        alfa = col_dot(v, y)
        y = y - safe_div(alfa, beta) * r2
        r1, r2 = r2, y
        y = precond(r2)
        oldb, beta = beta, col_dot(r2, y).clamp_min(0).sqrt()
        oldeps = epsln
        delta = cs * dbar + sn * alfa               # previous plane rotation on the new column
        gbar = sn * dbar - cs * alfa
        epsln = sn * beta
        dbar = -cs * beta
        gamma = torch.sqrt(gbar * gbar + beta * beta).clamp_min(eps)
        cs, sn = gbar / gamma, beta / gamma         # the next plane rotation
        phi = cs * phibar
        phibar = sn * phibar
        w1, w2 = w2, w
        w = (v - oldeps * w1 - delta * w2) / gamma
        X = X + phi * w
        rel = phibar.abs() / bnorm1
    true_rel = col_norm(B - op(X)) / bnorm1
    return X, rel, true_rel, it
