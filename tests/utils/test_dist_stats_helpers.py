"""mean_hotelling_t2_test and cov_nagao_test against statistics computed independently with NumPy/SciPy."""
import numpy as np
import pytest
import torch
from scipy import linalg, stats

from torchsparsegradutils.utils import cov_nagao_test, mean_hotelling_t2_test


def samples(n, p, B, seed, shift=0.0, scale=1.0):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((B, p, p)) / np.sqrt(p) + np.eye(p)
    x = np.einsum("nbj,bij->nbi", rng.standard_normal((n, B, p)), A) * scale + shift
    return x, A @ A.transpose(0, 2, 1)


@pytest.mark.parametrize("shift", [0.0, 0.05])
@pytest.mark.parametrize("level", [0.5, 0.9, 0.99])
def test_hotelling_against_scipy_f(shift, level):
    n, p, B = 400, 3, 4
    x, _ = samples(n, p, B, 0, shift)
    mean, cov = x.mean(0), np.stack([np.cov(x[:, b].T) for b in range(B)])
    ok, t2, thr = mean_hotelling_t2_test(torch.from_numpy(mean), torch.zeros(p, dtype=torch.float64),
                                         torch.from_numpy(cov), n, confidence_level=level)
    t2_ref = np.array([n * mean[b] @ np.linalg.solve(cov[b], mean[b]) for b in range(B)])
    np.testing.assert_allclose(t2.numpy(), t2_ref, rtol=1e-10)
    # accepted exactly when the F test's p-value is at least 1 - level
    pval = stats.f.sf(t2_ref * (n - p) / (p * (n - 1)), p, n - p)
    assert ok.tolist() == (pval >= 1 - level).tolist()
    assert thr == pytest.approx(p * (n - 1) / (n - p) * stats.f.ppf(level, p, n - p))


@pytest.mark.parametrize("scale", [1.0, 1.3])
@pytest.mark.parametrize("level", [0.5, 0.95])
def test_nagao_against_symmetric_whitening_and_chi2(scale, level):
    """T_N with the symmetric inverse square root (scipy.linalg.sqrtm): the same statistic
    as with the Cholesky factor, since the two whitenings differ by a rotation."""
    n, p, B = 2000, 3, 3
    x, S = samples(n, p, B, 1, scale=scale)
    emp = np.stack([np.cov(x[:, b].T) for b in range(B)])
    ok, tn, thr = cov_nagao_test(torch.from_numpy(emp), torch.from_numpy(S), n, confidence_level=level)
    ref = []
    for b in range(B):
        R = np.real(linalg.inv(linalg.sqrtm(S[b])))
        W = R @ emp[b] @ R
        ref.append(n / 2 * np.sum((W - np.eye(p)) ** 2))
    np.testing.assert_allclose(tn.numpy(), ref, rtol=1e-8)
    assert thr == pytest.approx(stats.chi2.ppf(level, p * (p + 1) / 2))
    assert ok.tolist() == (np.array(ref) <= thr).tolist()
    if scale != 1.0:
        assert not ok.any()                            # a 1.69x covariance is rejected at n = 2000


def test_false_rejection_rate_is_nominal():
    """Over 400 draws from the hypothesised normal, the rejection rate at level 0.9 is near 10%."""
    n, p = 500, 2
    rng = np.random.default_rng(2)
    x = torch.from_numpy(rng.standard_normal((n, 400, p)))
    mean, cov = x.mean(0), torch.stack([torch.cov(x[:, b].T) for b in range(400)])
    ok_m, _, _ = mean_hotelling_t2_test(mean, torch.zeros(p, dtype=torch.float64), cov, n, 0.9)
    ok_c, _, _ = cov_nagao_test(cov, torch.eye(p, dtype=torch.float64), n, 0.9)
    assert 0.05 < 1 - ok_m.double().mean() < 0.15
    assert 0.04 < 1 - ok_c.double().mean() < 0.18     # chi-square is asymptotic


def test_errors():
    m, c = torch.zeros(1, 2), torch.eye(2).unsqueeze(0)
    with pytest.raises(ValueError, match="confidence_level"):
        mean_hotelling_t2_test(m, m, c, 10, confidence_level=1.0)
    with pytest.raises(ValueError, match="more samples than dimensions"):
        mean_hotelling_t2_test(m, m, c, 2)
    with pytest.raises(ValueError, match="broadcastable"):
        mean_hotelling_t2_test(m, torch.zeros(3), c, 10)
    with pytest.raises(ValueError, match="broadcastable"):
        cov_nagao_test(c, torch.eye(3), 10)
