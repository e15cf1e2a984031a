"""SparseMultivariateNormal / SparseMultivariateNormalNative against dense torch.distributions.MultivariateNormal."""
import math

import pytest
import torch
from torch.distributions import MultivariateNormal

from torchsparsegradutils import sparse_mm
from torchsparsegradutils.distributions import SparseMultivariateNormal, SparseMultivariateNormalNative
from torchsparsegradutils.distributions.sparse_multivariate_normal import _batch_sparse_mv
from torchsparsegradutils.utils import rand_sparse_tri

LAYOUTS = [torch.sparse_coo, torch.sparse_csr]
FORMS = [("cov", "llt"), ("cov", "ldlt"), ("prec", "llt"), ("prec", "ldlt")]


def make(form, param, layout, batch=None, n=7, nnz=14, dtype=torch.float64, seed=0):
    """(distribution, dense reference MultivariateNormal, loc, diagonal, factor)."""
    g = torch.Generator().manual_seed(seed)
    size = (batch, n, n) if batch else (n, n)
    torch.manual_seed(seed)
    strict = param == "ldlt"
    F = rand_sparse_tri(size, nnz if not strict else nnz - n, layout, upper=False, strict=strict,
                        values_dtype=dtype, well_conditioned=not strict, value_range=(-0.5, 0.5))
    loc = torch.randn(*((batch,) if batch else ()), n, dtype=dtype, generator=g)
    D = torch.rand(n, dtype=dtype, generator=g) + 0.5 if strict else None
    Ld = F.to_dense() + (torch.eye(n, dtype=dtype) if strict else 0)
    M = Ld @ ((D.unsqueeze(-1) if strict else 1) * Ld.transpose(-1, -2))
    kw = {"scale_tril": F} if form == "cov" else {"precision_tril": F}
    dist = SparseMultivariateNormal(loc, D, **kw)
    ref = MultivariateNormal(loc, covariance_matrix=M) if form == "cov" else MultivariateNormal(loc, precision_matrix=M)
    return dist, ref, loc, D, F


@pytest.mark.parametrize("layout", LAYOUTS, ids=["COO", "CSR"])
@pytest.mark.parametrize("form,param", FORMS)
@pytest.mark.parametrize("batch", [None, 3])
def test_moments_and_log_prob_match_dense(form, param, layout, batch):
    dist, ref, _, _, _ = make(form, param, layout, batch)
    x = ref.sample((5,))
    torch.testing.assert_close(dist.log_prob(x), ref.log_prob(x))
    torch.testing.assert_close(dist.log_prob(x[0]), ref.log_prob(x[0]))
    torch.testing.assert_close(dist.mean, ref.mean)
    torch.testing.assert_close(dist.variance, ref.variance)
    torch.testing.assert_close(dist.entropy(), ref.entropy())
    torch.testing.assert_close(dist.covariance_matrix, ref.covariance_matrix)
    torch.testing.assert_close(dist.precision_matrix, ref.precision_matrix)
    assert dist.batch_shape == ref.batch_shape and dist.event_shape == ref.event_shape


def test_broadcast_batched_loc_with_unbatched_factor():
    dist, _, loc, D, F = make("prec", "ldlt", torch.sparse_csr)
    locs = torch.randn(4, loc.shape[0], dtype=loc.dtype)
    b = SparseMultivariateNormal(locs, D, precision_tril=F)
    x = torch.randn(2, 4, loc.shape[0], dtype=loc.dtype)
    assert b.batch_shape == (4,) and b.rsample((2,)).shape == (2, 4, loc.shape[0])
    for i in range(4):
        torch.testing.assert_close(b.log_prob(x)[:, i], SparseMultivariateNormal(locs[i], D, precision_tril=F)
                                   .log_prob(x[:, i]))
    torch.testing.assert_close(b.variance[1], dist.variance)


@pytest.mark.parametrize("form,param", FORMS)
def test_sample_moments(form, param):
    """Mean and covariance of 200k samples against the exact ones (tolerances of ~6 standard errors)."""
    dist, ref, _, _, _ = make(form, param, torch.sparse_csr, n=5, nnz=9)
    torch.manual_seed(1)
    s = dist.rsample((200_000,))
    sd = ref.variance.sqrt()
    assert ((s.mean(0) - ref.mean).abs() < 6 * sd / math.sqrt(2e5)).all()
    C, S = torch.cov(s.T), ref.covariance_matrix
    bound = 6 * torch.sqrt((S.diagonal().outer(S.diagonal()) + S.square()) / 2e5)
    assert ((C - S).abs() < bound).all()


@pytest.mark.parametrize("layout", LAYOUTS, ids=["COO", "CSR"])
@pytest.mark.parametrize("form,param", FORMS)
def test_log_prob_gradients_match_dense_autograd(form, param, layout):
    """d log_prob / d (loc, diagonal, stored factor values) against autograd through the dense MVN."""
    dist, _, loc, D, F = make(form, param, layout, batch=2)
    x = torch.randn(3, 2, loc.shape[-1], dtype=loc.dtype)
    loc = loc.clone().requires_grad_()
    Dg = D.clone().requires_grad_() if D is not None else None
    Fg = (F.coalesce() if layout == torch.sparse_coo else F).detach().requires_grad_()
    kw = {"scale_tril": Fg} if form == "cov" else {"precision_tril": Fg}
    SparseMultivariateNormal(loc, Dg, **kw).log_prob(x).sum().backward()
    assert Fg.grad.layout == layout                     # the factor's gradient stays sparse

    loc2 = loc.detach().clone().requires_grad_()
    D2 = D.clone().requires_grad_() if D is not None else None
    Fd = Fg.detach().to_dense().requires_grad_()
    n = loc.shape[-1]
    Ld = Fd + (torch.eye(n, dtype=loc.dtype) if D is not None else 0)
    M = Ld @ ((D2.unsqueeze(-1) if D is not None else 1) * Ld.transpose(-1, -2))
    ref = MultivariateNormal(loc2, **{"covariance_matrix" if form == "cov" else "precision_matrix": M})
    ref.log_prob(x).sum().backward()
    torch.testing.assert_close(loc.grad, loc2.grad)
    if D is not None:
        torch.testing.assert_close(Dg.grad, D2.grad)
    torch.testing.assert_close(Fg.grad.to_dense(), Fd.grad * (Fg.detach().to_dense() != 0))


@pytest.mark.parametrize("form,param", FORMS)
def test_rsample_reparameterisation_gradient(form, param):
    """x = loc + A eps is linear in eps: its gradient w.r.t. the factor values, with
    eps fixed by the seed, matches the dense construction of the same sample."""
    dist, _, loc, D, F = make(form, param, torch.sparse_coo)
    Fg = F.coalesce().detach().requires_grad_()
    kw = {"scale_tril": Fg} if form == "cov" else {"precision_tril": Fg}
    torch.manual_seed(3)
    SparseMultivariateNormal(loc, D, **kw).rsample((4,)).square().sum().backward()
    torch.manual_seed(3)
    eps = torch.randn(4, loc.shape[0], dtype=loc.dtype)
    Fd = Fg.detach().to_dense().requires_grad_()
    n = loc.shape[0]
    L = Fd + (torch.eye(n, dtype=loc.dtype) if D is not None else 0)
    e = eps * D.sqrt() if (D is not None and form == "cov") else (eps / D.sqrt() if D is not None else eps)
    x = e @ L.T if form == "cov" else torch.linalg.solve_triangular(L.T, e.T, upper=True).T
    (loc + x).square().sum().backward()
    torch.testing.assert_close(Fg.grad.to_dense(), Fd.grad * (Fg.detach().to_dense() != 0))


def test_native_matches_dense():
    torch.manual_seed(0)
    L = rand_sparse_tri((6, 6), 15, torch.sparse_csr, upper=False, well_conditioned=True, values_dtype=torch.float64)
    loc = torch.randn(6, dtype=torch.float64)
    dist = SparseMultivariateNormalNative(loc, L)
    ref = MultivariateNormal(loc, scale_tril=L.to_dense())
    x = ref.sample((4,))
    torch.testing.assert_close(dist.log_prob(x), ref.log_prob(x))
    torch.testing.assert_close(dist.variance, ref.variance)
    torch.testing.assert_close(dist.covariance_matrix, ref.covariance_matrix)
    torch.testing.assert_close(dist.entropy(), ref.entropy())
    torch.manual_seed(5)
    s = dist.rsample((3,))
    torch.manual_seed(5)
    torch.testing.assert_close(s, loc + torch.randn(3, 6, dtype=torch.float64) @ L.to_dense().T)


@pytest.mark.parametrize("bmat,bvec", [((3, 3), (3,)), ((3, 3), (5, 3)), ((3, 3), (2, 5, 3)),
                                       ((4, 3, 3), (4, 3)), ((4, 3, 3), (5, 4, 3)), ((4, 3, 3), (2, 5, 4, 3))])
def test_batch_sparse_mv_against_dense(bmat, bvec):
    A, v = torch.randn(bmat, dtype=torch.float64), torch.randn(bvec, dtype=torch.float64)
    torch.testing.assert_close(_batch_sparse_mv(sparse_mm, A.to_sparse(), v), (A @ v.unsqueeze(-1)).squeeze(-1))


def test_errors():
    loc = torch.zeros(3, dtype=torch.float64)
    L = torch.eye(3, dtype=torch.float64).to_sparse()
    with pytest.raises(ValueError, match="Exactly one"):
        SparseMultivariateNormal(loc, scale_tril=L, precision_tril=L)
    with pytest.raises(ValueError, match="Exactly one"):
        SparseMultivariateNormal(loc)
    with pytest.raises(ValueError, match="sparse COO or CSR"):
        SparseMultivariateNormal(loc, scale_tril=L.to_dense())
    with pytest.raises(ValueError, match="event size"):
        SparseMultivariateNormal(torch.zeros(4, dtype=torch.float64), scale_tril=L)
    with pytest.raises(ValueError, match="dtype"):
        SparseMultivariateNormal(loc.float(), scale_tril=L)
    # validation explicitly on: torch.compile, once used in the process, turns PyTorch's default off
    with pytest.raises(ValueError, match="lower triangular"):
        SparseMultivariateNormal(loc, scale_tril=(torch.eye(3) + torch.triu(torch.ones(3, 3), 1)).double().to_sparse(),
                                 validate_args=True)
    with pytest.raises(ValueError, match="diagonal must be positive"):
        SparseMultivariateNormal(loc, -torch.ones(3, dtype=torch.float64), scale_tril=L, validate_args=True)
    with pytest.raises(ValueError, match="1 batch dimension"):
        SparseMultivariateNormal(torch.zeros(2, 2, 3), scale_tril=L)
    with pytest.raises(ValueError, match="Invalid dimensions"):
        _batch_sparse_mv(sparse_mm, torch.eye(3).to_sparse().unsqueeze(0).coalesce(), torch.ones(3))
    with pytest.raises(ValueError, match="scale_tril must be sparse CSR"):
        SparseMultivariateNormalNative(loc, L)
    # LDL^T precision: the unit diagonal is implicit, a stored one is refused by the solve
    with pytest.raises(ValueError, match="unitriangular"):
        SparseMultivariateNormal(loc, torch.ones(3, dtype=torch.float64), precision_tril=L).rsample()


def test_ldlt_covariance_with_a_stored_diagonal():
    """As in the release, a diagonal stored in the LDL^T covariance factor adds to the unit one
    (L = I + F) for sampling and moments; the solve of log_prob refuses it."""
    torch.manual_seed(0)
    F = rand_sparse_tri((5, 5), 9, upper=False, values_dtype=torch.float64, value_range=(-0.5, 0.5))
    D = torch.rand(5, dtype=torch.float64) + 0.5
    loc = torch.zeros(5, dtype=torch.float64)
    dist = SparseMultivariateNormal(loc, D, scale_tril=F)
    L = torch.eye(5, dtype=torch.float64) + F.to_dense()
    S = L @ torch.diag(D) @ L.T
    torch.testing.assert_close(dist.covariance_matrix, S)
    torch.testing.assert_close(dist.variance, S.diagonal())
    torch.manual_seed(2)
    x = dist.rsample((3,))
    torch.manual_seed(2)
    torch.testing.assert_close(x, (torch.randn(3, 5, dtype=torch.float64) * D.sqrt()) @ L.T)
    with pytest.raises(ValueError, match="unitriangular"):
        dist.log_prob(x)
