r"""Acceptance tests for sample moments of a multivariate normal: is a sample mean
(Hotelling's T^2) or a sample covariance (Nagao's T_N) consistent with a
hypothesised parameter at a given confidence level?

Both return ``(accepted, statistic, threshold)``: ``accepted`` is True where the
hypothesised parameter lies inside the confidence region of that level, so a
HIGHER ``confidence_level`` gives a larger region and a more lenient test
(0.99 accepts unless the evidence against is strong).  Batched over a leading
dimension ``B``.  The critical values come from SciPy (imported on first use).

References: H. Hotelling (1947), Multivariate quality control; H. Nagao (1973),
On some test criteria for covariance matrix, Ann. Statist. 1(4), eq. 3.3.
"""
from typing import Tuple

import torch

__all__ = ["mean_hotelling_t2_test", "cov_nagao_test"]


def _broadcasts_to(shape, target) -> bool:
    try:
        return torch.broadcast_shapes(shape, target) == target
    except RuntimeError:
        return False


def _check_level(confidence_level: float) -> None:
    if not 0.0 < confidence_level < 1.0:
        raise ValueError(f"confidence_level must be in (0, 1), got {confidence_level}")


def mean_hotelling_t2_test(sample_mean: torch.Tensor, true_mean: torch.Tensor, sample_cov: torch.Tensor,
                           n: int, confidence_level: float = 0.95) -> Tuple[torch.Tensor, torch.Tensor, float]:
    r"""One-sample Hotelling T^2 test of a mean vector.

    ``T^2 = n (xbar - mu0)^T S^{-1} (xbar - mu0)``; under ``mu = mu0`` (normal
    data, unknown covariance) ``T^2 (n - p) / (p (n - 1))`` follows
    ``F(p, n - p)``, so ``mu0`` is accepted when
    ``T^2 <= p (n - 1) / (n - p) * F^{-1}_{p, n-p}(confidence_level)``.

    Parameters
    ----------
    sample_mean : (B, p) tensor; true_mean : broadcastable to it, e.g. (p,).
    sample_cov : (B, p, p) sample covariance (symmetric positive definite).
    n : number of samples behind the statistics (``n > p``).
    confidence_level : in (0, 1).

    Returns
    -------
    accepted : (B,) bool tensor (CPU).
    t2 : (B,) T^2 statistics (CPU).
    threshold : float, the T^2 critical value.

    Examples
    --------
    >>> import torch
    >>> from torchsparsegradutils.utils import mean_hotelling_t2_test
    >>> g = torch.Generator().manual_seed(0)
    >>> x = torch.randn(2000, 1, 3, generator=g, dtype=torch.float64)   # 2000 samples, B=1, p=3
    >>> mean, cov = x.mean(0), torch.cov(x[:, 0].T).unsqueeze(0)
    >>> ok, t2, thr = mean_hotelling_t2_test(mean, torch.zeros(1, 3, dtype=torch.float64), cov, 2000)
    >>> bool(ok.item())
    True
    >>> ok, _, _ = mean_hotelling_t2_test(mean, torch.full((1, 3), 0.5, dtype=torch.float64), cov, 2000)
    >>> bool(ok.item())
    False
    """
    from scipy.stats import f as f_dist

    _check_level(confidence_level)
    if sample_mean.dim() != 2 or not _broadcasts_to(true_mean.shape, sample_mean.shape):
        raise ValueError(f"sample_mean must be (B, p) and true_mean broadcastable to it, got "
                         f"{tuple(sample_mean.shape)} and {tuple(true_mean.shape)}")
    B, p = sample_mean.shape
    if sample_cov.shape != (B, p, p):
        raise ValueError(f"sample_cov must be (B, p, p) = {(B, p, p)}, got {tuple(sample_cov.shape)}")
    if n <= p:
        raise ValueError(f"the test needs more samples than dimensions, got n={n} and p={p}")
    d = (sample_mean - true_mean).unsqueeze(-1)
    t2 = n * (d * torch.linalg.solve(sample_cov, d)).sum((-2, -1))
    threshold = p * (n - 1) / (n - p) * float(f_dist.ppf(confidence_level, p, n - p))
    t2 = t2.cpu()
    return t2 <= threshold, t2, threshold


def cov_nagao_test(emp_cov: torch.Tensor, ref_cov: torch.Tensor, n: int,
                   confidence_level: float = 0.95) -> Tuple[torch.Tensor, torch.Tensor, float]:
    r"""Nagao's one-sample test of a covariance matrix.

    With ``ref_cov = C C^T`` (Cholesky), ``W = C^{-1} emp_cov C^{-T}`` is the
    identity when the sample covariance equals the reference.  The statistic
    ``T_N = n/2 ||W - I||_F^2`` is asymptotically chi-square with
    ``p (p + 1) / 2`` degrees of freedom under ``Sigma = ref_cov``; the
    reference is accepted when ``T_N <= chi2^{-1}(confidence_level)``.

    Parameters
    ----------
    emp_cov : (B, p, p); ref_cov : symmetric positive definite, broadcastable to (B, p, p).
    n : number of samples behind ``emp_cov``.
    confidence_level : in (0, 1).

    Returns
    -------
    accepted : (B,) bool tensor (CPU).
    t_n : (B,) statistics (CPU).
    threshold : float, the chi-square critical value.

    Examples
    --------
    >>> import torch
    >>> from torchsparsegradutils.utils import cov_nagao_test
    >>> g = torch.Generator().manual_seed(0)
    >>> x = torch.randn(5000, 2, generator=g, dtype=torch.float64)
    >>> emp = torch.cov(x.T).unsqueeze(0)
    >>> ok, t_n, thr = cov_nagao_test(emp, torch.eye(2, dtype=torch.float64).unsqueeze(0), 5000)
    >>> bool(ok.item())
    True
    >>> ok, _, _ = cov_nagao_test(emp, 2 * torch.eye(2, dtype=torch.float64).unsqueeze(0), 5000)
    >>> bool(ok.item())
    False
    """
    from scipy.stats import chi2

    _check_level(confidence_level)
    if (emp_cov.dim() != 3 or emp_cov.shape[-1] != emp_cov.shape[-2]
            or not _broadcasts_to(ref_cov.shape, emp_cov.shape)):
        raise ValueError(f"emp_cov must be (B, p, p) and ref_cov broadcastable to it, got "
                         f"{tuple(emp_cov.shape)} and {tuple(ref_cov.shape)}")
    p = emp_cov.shape[-1]
    C = torch.linalg.cholesky(ref_cov)
    # W = C^{-1} emp C^{-T}, by two triangular solves
    half = torch.linalg.solve_triangular(C, emp_cov, upper=False)
    W = torch.linalg.solve_triangular(C, half.transpose(-1, -2), upper=False)
    D = W - torch.eye(p, dtype=W.dtype, device=W.device)
    t_n = (n / 2.0) * D.square().sum((-2, -1))
    threshold = float(chi2.ppf(confidence_level, p * (p + 1) / 2))
    t_n = t_n.cpu()
    return t_n <= threshold, t_n, threshold
