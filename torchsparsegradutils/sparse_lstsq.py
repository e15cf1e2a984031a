"""sparse_generic_lstsq: least squares with a tall sparse A, whose gradient w.r.t. A stays sparse."""
from typing import Callable, Optional

import torch

from ._core.validate import SystemSpec, eager_only
from ._ops.solve import SparseGenericLstsq, run_lstsq  # noqa: F401  (SparseGenericLstsq: the published name)
from .utils._operator import as_matmul, as_rmatmul
from .utils.lsmr import lsmr

SPEC = SystemSpec("sparse_generic_lstsq", tall=True)


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
    return run_lstsq(SPEC, A, B, lstsq or _default_lstsq, transpose_lstsq or _default_transpose_lstsq)


def _lsmr_options(A: torch.Tensor, n: int) -> dict:
    tol = 1e-10 if A.dtype == torch.float64 else 1e-6
    return dict(atol=tol, btol=tol, maxiter=max(4 * n, 100))


def _default_lstsq(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    return lsmr(A, B, **_lsmr_options(A, A.shape[1]))[0]


def _default_transpose_lstsq(A: torch.Tensor, G: torch.Tensor) -> torch.Tensor:
    Av, Atv = as_matmul(A), as_rmatmul(A, None)
    return lsmr(Atv, G, Armat=Av, n=A.shape[0], **_lsmr_options(A, A.shape[1]))[0]
