"""sparse_generic_lstsq: least squares with a tall sparse A, whose gradient w.r.t. A stays sparse."""
from typing import Callable, Optional

import torch

from . import _backends
from ._core.intake import as_csr
from ._core.saved import load_operand, save_operand
from ._core.undefined_grad import none_for_undefined
from ._core.validate import check_system, eager_only, refuse_create_graph
from .sparse_matmul import sparse_mm
from .sparse_solve import solver_result
from .utils.lsmr import lsmr
from .utils._operator import as_matmul, as_rmatmul


@eager_only
def sparse_generic_lstsq(A: torch.Tensor, B: torch.Tensor,
                         lstsq: Optional[Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = None,
                         transpose_lstsq: Optional[Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = None
                         ) -> torch.Tensor:
    r"""``X = argmin ||A X - B||`` for a tall, full-column-rank sparse ``A``; the gradient w.r.t. ``A`` is sparse.

    API-compatible with the published ``torchsparsegradutils.sparse_generic_lstsq``.

    Parameters
    ----------
    A : sparse COO or CSR tensor ``(m, n)`` with ``m >= n`` and full column rank.
    B : dense ``(m,)`` or ``(m, p)``.
    lstsq : callable ``lstsq(A, B) -> X`` (``A^+ B``), given a detached ``A``.
        Default: :func:`~torchsparsegradutils.utils.lsmr` column by column, with
        tolerances 1e-10 (float64) / 1e-6 (float32) and up to ``max(4 n, 100)`` iterations.
    transpose_lstsq : callable ``transpose_lstsq(A, G) -> (A^T)^+ G`` (the minimum-norm
        solution of the wide system ``A^T Y = G``), given ``A``.  Default: LSMR on
        ``A^T`` as an operator (A^T is never built).

    Returns
    -------
    ``X`` of shape ``(n,)`` or ``(n, p)``.

    Gradients
    ---------
    With ``G = dL/dX``, ``grad_B = (A^T)^+ G`` and, ``r = B - A X`` the residual
    and ``Y = A^+ grad_B = (A^T A)^{-1} G``,
    ``grad_A = -grad_B X^T + r Y^T`` (Golub & Pereyra 1973), both terms
    evaluated only at A's stored positions (sampled products; no m x n matrix).
    Differentiable once: a backward with ``create_graph=True`` raises ``RuntimeError``.

    Raises
    ------
    ValueError
        Non-tensor inputs; A not 2D; A wide (``m < n``); B not 1D/2D; mismatched
        rows; different devices.
    TypeError
        A not COO/CSR, B not strided, values not float32/float64 or of different dtypes.

    Examples
    --------
    >>> A = torch.tensor([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]], dtype=torch.float64).to_sparse()
    >>> x = sparse_generic_lstsq(A, torch.tensor([1.0, 2.0, 2.0], dtype=torch.float64))
    >>> torch.allclose(x, torch.tensor([1.0, 1.0], dtype=torch.float64))
    True
    """
    check_system(A, B, "sparse_generic_lstsq", lambda s: s[0] >= s[1],
                 "A should be a tall full-rank matrix (rows >= columns)")
    if B.dtype != A.dtype:
        raise TypeError(f"A and B must have the same dtype, got {A.dtype} and {B.dtype}")
    lstsq = lstsq or _default_lstsq
    transpose_lstsq = transpose_lstsq or _default_transpose_lstsq
    B2 = B.unsqueeze(-1) if B.dim() == 1 else B
    X = SparseGenericLstsq.apply(A, B2, lstsq, transpose_lstsq)
    return X.squeeze(-1) if B.dim() == 1 else X


def _lsmr_options(A: torch.Tensor, n: int) -> dict:
    tol = 1e-10 if A.dtype == torch.float64 else 1e-6
    return dict(atol=tol, btol=tol, maxiter=max(4 * n, 100))


def _default_lstsq(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    return lsmr(A, B, **_lsmr_options(A, A.shape[1]))[0]


def _default_transpose_lstsq(A: torch.Tensor, G: torch.Tensor) -> torch.Tensor:
    Av, Atv = as_matmul(A), as_rmatmul(A, None)
    return lsmr(Atv, G, Armat=Av, n=A.shape[0], **_lsmr_options(A, A.shape[1]))[0]


def _solve(solver, A: torch.Tensor, B: torch.Tensor, rows: int) -> torch.Tensor:
    """solver(A, B) as a (rows, B's columns) tensor of B's dtype; no call when B has no
    columns (the answer is empty, and solvers mishandle it)."""
    if B.shape[1] == 0:
        return B.new_zeros(rows, 0)
    return solver_result(solver(A, B), (rows, B.shape[1]), B.dtype, "least-squares solver")


class SparseGenericLstsq(torch.autograd.Function):
    """The autograd Function behind :func:`sparse_generic_lstsq` (validate with it first)."""

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
            R = B - sparse_mm(A, X)
            g = _backends.sddmm(view, R, Y) - _backends.sddmm(view, grad_B, X)
            grad_A = view.grad_like(g)
        return grad_A, grad_B if ctx.needs_input_grad[1] else None, None, None
