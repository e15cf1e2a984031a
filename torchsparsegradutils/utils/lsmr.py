"""LSMR (Fong & Saunders 2011) for least squares min ||A x - b|| (optionally damped), A of any shape."""
import math
from typing import Optional, Tuple

import torch

from ._operator import Operator, as_matmul, as_rmatmul, warn_not_converged


def _sym_ortho(a: float, b: float) -> Tuple[float, float, float]:
    """A stable Givens rotation: (c, s, r) with [c s; -s c] [a; b] = [r; 0]."""
    if b == 0:
        return math.copysign(1.0, a) if a else 0.0, 0.0, abs(a)
    if a == 0:
        return 0.0, math.copysign(1.0, b), abs(b)
    if abs(b) > abs(a):
        tau = a / b
        s = math.copysign(1.0, b) / math.sqrt(1 + tau * tau)
        return s * tau, s, b / s
    tau = b / a
    c = math.copysign(1.0, a) / math.sqrt(1 + tau * tau)
    return c, c * tau, a / c


def lsmr(A: Operator, b: torch.Tensor, Armat: Optional[Operator] = None, n: Optional[int] = None,
         damp: float = 0.0, atol: float = 1e-6, btol: float = 1e-6, conlim: float = 1e8,
         maxiter: Optional[int] = None, x0: Optional[torch.Tensor] = None,
         check_nonzero: bool = True) -> Tuple[torch.Tensor, int]:
    r"""Least squares by LSMR: ``x = argmin ||A x - b||^2 + damp^2 ||x||^2``, real or complex.

    Parameters
    ----------
    A : sparse COO/CSR or dense ``(m, n)`` tensor, or callable ``x -> A @ x`` (then
        ``Armat`` and ``n`` are required).
    b : ``(m,)``; ``(m, k)`` (the columns are solved one after another); or a row
        ``(1, m)`` with ``m > 1`` (unless A is a tensor with one row), solved as ``(m,)``.
    Armat : callable or tensor for ``x -> A^H @ x`` (the adjoint: the conjugate
        transpose, ``A^T`` for real A); default from the tensor A.
    n : number of columns of A (inferred from a tensor A).
    damp, atol, btol, conlim : as in Fong & Saunders / scipy.sparse.linalg.lsmr.
    maxiter : iteration cap (default ``min(m, n)``, at least 1).
    x0 : initial guess (default zeros), shaped like the solution; never modified.
    check_nonzero : accepted for API compatibility.

    Returns
    -------
    ``(x, iterations)``; x has shape ``(n,)``, ``(n, k)`` or ``(1, n)`` following b,
    iterations the most any column took.  Stopping on the iteration cap, or on
    the condition limit, gives a :class:`ConvergenceWarning` with the iteration
    count and the residual.  For tall full-rank A this is the least-squares
    solution; for wide A with ``damp = 0`` the minimum-norm one.

    Examples
    --------
    >>> import torch
    >>> A = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 2.0]], dtype=torch.float64)
    >>> b = torch.tensor([1.0, 2.0, 2.0], dtype=torch.float64)
    >>> x, itn = lsmr(A.to_sparse(), b, atol=1e-12, btol=1e-12)
    >>> torch.allclose(x, torch.linalg.lstsq(A, b.unsqueeze(1)).solution.squeeze(1))
    True
    >>> Ac = torch.tensor([[2.0, 1j], [0.0, 1.0 - 1j]], dtype=torch.complex128)
    >>> xc, _ = lsmr(Ac, torch.tensor([1.0, 1j], dtype=torch.complex128), atol=1e-12, btol=1e-12)
    >>> torch.allclose(Ac @ xc, torch.tensor([1.0, 1j], dtype=torch.complex128))
    True
    """
    mv = as_matmul(A, "A")
    rmv = as_rmatmul(A, Armat)
    if n is None:
        if not isinstance(A, torch.Tensor):
            raise TypeError("lsmr: n (the number of columns of A) is required when A is a callable")
        n = A.shape[-1]
    rows = A.shape[-2] if isinstance(A, torch.Tensor) else None
    if b.dim() == 2 and b.shape[0] == 1 and b.shape[1] != 1 and rows is not None and rows != 1:
        # a row vector (1, m) for a matrix A of m != 1 rows, as the release accepts: solved
        # as (m,), returned as (1, n) (for an operator A, b is always (m, k))
        x, itn = lsmr(mv, b[0], rmv, n, damp, atol, btol, conlim, maxiter,
                      None if x0 is None else x0.reshape(-1))
        return x.unsqueeze(0), itn
    if b.dim() == 2:
        outs = [lsmr(mv, b[:, j], rmv, n, damp, atol, btol, conlim, maxiter,
                     None if x0 is None else x0[:, j]) for j in range(b.shape[1])]
        if not outs:
            return b.new_zeros(n, 0), 0
        return torch.stack([o[0] for o in outs], 1), max(o[1] for o in outs)
    m = b.shape[0]
    cap = maxiter if maxiter is not None else max(min(m, n), 1)

    def Av(x):
        return mv(x.unsqueeze(-1)).squeeze(-1)

    def Atv(x):
        return rmv(x.unsqueeze(-1)).squeeze(-1)

    def norm(x):
        return float(torch.linalg.vector_norm(x))

    u = b.clone()
    normb = norm(b)
    if x0 is None:
        x = b.new_zeros(n)
    else:
        x = x0.clone()
        u = u - Av(x)
    beta = norm(u)
    if beta > 0:
        u = u / beta
        v = Atv(u)
        alpha = norm(v)
    else:
        v, alpha = b.new_zeros(n), 0.0
    if alpha > 0:
        v = v / alpha
    zetabar, alphabar, rho, rhobar, cbar, sbar = alpha * beta, alpha, 1.0, 1.0, 1.0, 0.0
    h, hbar = v.clone(), b.new_zeros(n)
    betadd, betad, rhodold, tautildeold, thetatilde, zeta, d = beta, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0
    normA2 = alpha * alpha
    maxrbar, minrbar = 0.0, 1e100
    normr, normar = beta, alpha * beta
    ctol = 1.0 / conlim if conlim > 0 else 0.0
    if normar == 0:
        return x, 0
    itn, istop, test1 = 0, 0, 1.0
    while itn < cap:
        itn += 1
        u = Av(v) - alpha * u                       # bidiagonalization: beta u = A v - alpha u
        beta = norm(u)
        if beta > 0:
            u = u / beta
            v = Atv(u) - beta * v                   # alpha v = A^T u - beta v
            alpha = norm(v)
            if alpha > 0:
                v = v / alpha
        chat, shat, alphahat = _sym_ortho(alphabar, damp)
        rhoold = rho                                # rotation that eliminates beta
        c, s, rho = _sym_ortho(alphahat, beta)
        thetanew, alphabar = s * alpha, c * alpha
        rhobarold, zetaold = rhobar, zeta           # rotation that eliminates thetanew
        thetabar, rhotemp = sbar * rho, cbar * rho
        cbar, sbar, rhobar = _sym_ortho(cbar * rho, thetanew)
        zeta, zetabar = cbar * zetabar, -sbar * zetabar
        hbar = h - (thetabar * rho / (rhoold * rhobarold)) * hbar
        x = x + (zeta / (rho * rhobar)) * hbar
        h = v - (thetanew / rho) * h
        betaacute, betacheck = chat * betadd, -shat * betadd   # estimate of ||r||
        betahat, betadd = c * betaacute, -s * betaacute
        thetatildeold = thetatilde
        ctildeold, stildeold, rhotildeold = _sym_ortho(rhodold, thetabar)
        thetatilde, rhodold = stildeold * rhobar, ctildeold * rhobar
        betad = -stildeold * betad + ctildeold * betahat
        tautildeold = (zetaold - thetatildeold * tautildeold) / rhotildeold
        taud = (zeta - thetatilde * tautildeold) / rhodold
        d += betacheck * betacheck
        normr = math.sqrt(d + (betad - taud) ** 2 + betadd * betadd)
        normA2 += beta * beta
        normA = math.sqrt(normA2)
        normA2 += alpha * alpha
        maxrbar = max(maxrbar, rhobarold)
        if itn > 1:
            minrbar = min(minrbar, rhobarold)
        condA = max(maxrbar, rhotemp) / min(minrbar, rhotemp)
        normar, normx = abs(zetabar), norm(x)
        test1 = normr / normb if normb else 0.0
        test2 = normar / (normA * normr) if normA * normr else math.inf
        test3 = 1.0 / condA
        t1 = test1 / (1 + normA * normx / normb) if normb else 0.0
        rtol = btol + atol * normA * normx / normb if normb else btol
        if test3 <= ctol or 1 + test3 <= 1:
            istop = 3                               # A too ill-conditioned for conlim
        if 1 + test2 <= 1 or 1 + t1 <= 1 or test2 <= atol or test1 <= rtol:
            istop = 1                               # converged (compatible or least squares)
        if istop:
            break
    if istop != 1:
        warn_not_converged("lsmr", itn, test1, btol)
    return x, itn
