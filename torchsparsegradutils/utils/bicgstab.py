"""BiCGSTAB (van der Vorst) for general nonsymmetric A X = B, one column after another."""
import logging
import warnings
from typing import Callable, NamedTuple, Optional, Tuple, Union

import torch

from ._operator import Operator, as_matmul, warn_not_converged

_null_log = logging.getLogger("torchsparsegradutils.bicgstab")
_null_log.addHandler(logging.NullHandler())

Vector = Callable[[torch.Tensor], torch.Tensor]


class BICGSTABSettings(NamedTuple):
    """Defaults of :func:`bicgstab` (names as in the published release)."""

    matvec_max: Optional[int] = None   # cap on products with A per column, the b - A x0 one included (default 2n)
    abstol: float = 1.0e-8             # a column stops when ||b - A x|| <= max(abstol, reltol * ||b||)
    reltol: float = 1.0e-6
    precon: Optional[Union[torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]] = None  # M^{-1}
    logger: logging.Logger = _null_log


def _on_vectors(op: Operator, name: str) -> Vector:
    """x -> A x on (n,) vectors: a callable as given, a tensor through its product on (n, 1)."""
    mm = as_matmul(op, name)
    if isinstance(op, torch.Tensor):
        return lambda x: mm(x.unsqueeze(-1)).squeeze(-1)
    return mm


def _solve_column(A: Vector, M: Optional[Vector], b: torch.Tensor, x: torch.Tensor, budget: int,
                  settings: BICGSTABSettings) -> Tuple[torch.Tensor, bool, float, int]:
    """One column: (x, converged, ||b - A x|| / ||b||, iterations) within `budget` products with A."""
    bnorm = float(torch.linalg.vector_norm(b))
    target = max(settings.abstol, settings.reltol * bnorm)
    r = b - A(x)
    used, it = 1, 0
    rnorm = float(torch.linalg.vector_norm(r))
    rhat = r
    rho_old = alpha = omega = 1.0
    p = v = torch.zeros_like(r)
    converged = rnorm <= target
    while not converged and used < budget:
        it += 1
        rho = torch.vdot(rhat, r)
        if rho == 0 or omega == 0:
            break                                    # breakdown: reported as not converged
        p = r + (rho / rho_old) * (alpha / omega) * (p - omega * v)
        ph = p if M is None else M(p)
        v = A(ph)
        used += 1
        rv = torch.vdot(rhat, v)
        if rv == 0:
            break
        alpha = rho / rv
        s = r - alpha * v                            # residual after the half step x + alpha ph
        snorm = float(torch.linalg.vector_norm(s))
        if snorm <= target or used >= budget:
            if snorm < rnorm:
                x, rnorm = x + alpha * ph, snorm
            converged = snorm <= target
            break
        sh = s if M is None else M(s)
        t = A(sh)
        used += 1
        omega = torch.vdot(t, s) / torch.vdot(t, t)
        x = x + alpha * ph + omega * sh
        r = s - omega * t
        rho_old = rho
        rnorm = float(torch.linalg.vector_norm(r))
        settings.logger.info("bicgstab iteration %d: residual %.3e (target %.3e)", it, rnorm, target)
        converged = rnorm <= target
    return x, converged, rnorm / (bnorm or 1.0), it


def bicgstab(matmul_closure: Operator, rhs: torch.Tensor, initial_guess: Optional[torch.Tensor] = None,
             settings: BICGSTABSettings = BICGSTABSettings()) -> torch.Tensor:
    r"""Solve ``A X = B`` for a general nonsingular ``A`` by (right-preconditioned) BiCGSTAB.

    Parameters
    ----------
    matmul_closure : sparse COO/CSR or dense tensor, or callable ``x -> A @ x`` on ``(n,)`` vectors.
    rhs : ``(n,)`` or ``(n, k)``; the columns are solved one after another.
    initial_guess : ``x0`` shaped like rhs (default zeros); never modified.
    settings : :class:`BICGSTABSettings`.  Each column stops when
        ``||b - A x|| <= max(abstol, reltol * ||b||)`` (SciPy's convention: a
        warm start already within it costs one product), or after ``matvec_max``
        products with ``A`` (``2 n`` by default), the one computing ``b - A x0``
        included.  ``matvec_max=0`` returns (a copy of) the initial iterate with
        a warning and calls nothing.  ``precon`` (tensor or callable) applies ``M^{-1}``.

    Returns
    -------
    ``X`` shaped like rhs.  Columns that stop short of the tolerance (budget or
    breakdown) give one :class:`ConvergenceWarning`.

    Raises
    ------
    ValueError : negative ``matvec_max``; rhs not 1D/2D; initial_guess not shaped like rhs.
    TypeError : operator or ``precon`` neither a tensor nor a callable (also a
        RuntimeError, as the published release raised).

    Examples
    --------
    >>> import torch
    >>> A = torch.tensor([[3.0, 1.0], [2.0, 4.0]], dtype=torch.float64)
    >>> B = torch.tensor([[1.0, 0.0], [2.0, 1.0]], dtype=torch.float64)
    >>> X = bicgstab(A.to_sparse_csr(), B, settings=BICGSTABSettings(reltol=1e-12, abstol=0))
    >>> torch.allclose(A @ X, B)
    True
    """
    if settings.matvec_max is not None and settings.matvec_max < 0:
        raise ValueError(f"settings.matvec_max must be nonnegative or None, got {settings.matvec_max}")
    A = _on_vectors(matmul_closure, "matmul_closure")
    M = None if settings.precon is None else _on_vectors(settings.precon, "settings.precon")
    if not isinstance(rhs, torch.Tensor) or rhs.dim() not in (1, 2):
        raise ValueError("rhs must be a tensor of shape (n,) or (n, k)")
    if initial_guess is not None and initial_guess.shape != rhs.shape:
        raise ValueError(f"initial_guess must have shape {tuple(rhs.shape)}, got {tuple(initial_guess.shape)}")
    X0 = torch.zeros_like(rhs) if initial_guess is None else initial_guess.clone()
    if settings.matvec_max == 0:
        warnings.warn("bicgstab: matvec_max=0: returning the initial iterate without evaluating the operator "
                      "or checking convergence", UserWarning, stacklevel=2)
        return X0
    budget = 2 * rhs.shape[0] if settings.matvec_max is None else settings.matvec_max
    if rhs.dim() == 1:
        x, ok, rel, it = _solve_column(A, M, rhs, X0, budget, settings)
        results = [(x, ok, rel, it)]
        X = x
    else:
        results = [_solve_column(A, M, rhs[:, j], X0[:, j], budget, settings) for j in range(rhs.shape[1])]
        X = torch.stack([r[0] for r in results], 1) if results else X0
    failed = [r for r in results if not r[1]]
    if failed:
        warn_not_converged("bicgstab", max(r[3] for r in failed), max(r[2] for r in failed), settings.reltol)
    return X
