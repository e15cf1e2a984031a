"""SparseMultivariateNormal / SparseMultivariateNormalNative against dense torch.distributions.MultivariateNormal."""
import math

import pytest
import torch
from torch.distributions import MultivariateNormal

from torchsparsegradutils import sparse_csr_tensor, sparse_mm
from torchsparsegradutils.distributions import SparseMultivariateNormal, SparseMultivariateNormalNative
from torchsparsegradutils.distributions._linalg import _batch_sparse_mv
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
                                       ((4, 3, 3), (4, 3)), ((4, 3, 3), (5, 4, 3)), ((4, 3, 3), (2, 5, 4, 3)),
                                       ((1, 3, 3), (3,)), ((1, 3, 3), (5, 4, 3))])
def test_batch_sparse_mv_against_dense(bmat, bvec):
    """A batch of one item meets every vector, whatever their batch shape (as A[0])."""
    A, v = torch.randn(bmat, dtype=torch.float64), torch.randn(bvec, dtype=torch.float64)
    ref = (A[0] if bmat[0] == 1 else A) @ v.unsqueeze(-1)
    torch.testing.assert_close(_batch_sparse_mv(sparse_mm, A.to_sparse(), v), ref.squeeze(-1))


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
        _batch_sparse_mv(sparse_mm, torch.eye(3).expand(2, 3, 3).to_sparse(), torch.ones(3))
    with pytest.raises(ValueError, match="scale_tril must be sparse CSR"):
        SparseMultivariateNormalNative(loc, L)


def test_ldlt_covariance_with_a_stored_diagonal():
    """As in the release, a diagonal stored in the LDL^T covariance factor adds to the unit one
    (L = I + F) for sampling and moments, and so for the entropy (which once ignored it);
    the solve of log_prob refuses it."""
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
    torch.testing.assert_close(dist.entropy(), MultivariateNormal(loc, covariance_matrix=S).entropy())


@pytest.mark.parametrize("layout", LAYOUTS, ids=["COO", "CSR"])
def test_ldlt_precision_with_a_stored_diagonal_is_refused(layout):
    """Its log_prob and entropy once returned values of neither reading (exp(log_prob)
    integrated to 0.5 for the issue's 1-D case) while rsample and variance refused it."""
    F = torch.tensor([[1.0]]).to_sparse() if layout == torch.sparse_coo else torch.tensor([[1.0]]).to_sparse_csr()
    with pytest.raises(ValueError, match="must not store diagonal entries"):
        SparseMultivariateNormal(torch.zeros(1), diagonal=torch.ones(1), precision_tril=F)
    F = torch.tensor([[0.0, 0.0], [0.5, 0.0]])      # a strictly lower one is the form's factor
    SparseMultivariateNormal(torch.zeros(2), diagonal=torch.ones(2), precision_tril=F.to_sparse())


# ------------------------------------------- the grid: every form x batch shape against MultivariateNormal
BATCHES = [(), (1,), (3,)]


def _grid_operands(param, layout, loc_b, diag_b, f_b, n=4):
    """loc, D (LDL^T only), the sparse factor F (one pattern for all items: batched CSR
    needs equal nnz) and its dense matrix L (with the unit diagonal for LDL^T)."""
    g = torch.Generator().manual_seed(11)
    ldlt = param == "ldlt"
    mask = torch.tril(torch.rand(n, n, generator=g) < 0.6, -1)
    vals = torch.rand(*f_b, n, n, generator=g, dtype=torch.float64) - 0.5
    Fd = vals * mask
    if not ldlt:
        Fd = Fd + torch.diag_embed(1 + torch.rand(*f_b, n, generator=g, dtype=torch.float64))
    F = Fd.to_sparse() if layout == torch.sparse_coo else Fd.to_sparse_csr()
    loc = torch.randn(*loc_b, n, generator=g, dtype=torch.float64)
    D = torch.rand(*diag_b, n, generator=g, dtype=torch.float64) + 0.5 if ldlt else None
    return loc, D, F, Fd + (torch.eye(n, dtype=torch.float64) if ldlt else 0)


def _reference(form, loc, D, L):
    """MultivariateNormal of the same parameters, from dense matrices (differentiable)."""
    if form == "cov":
        return MultivariateNormal(loc, scale_tril=L if D is None else L * D.sqrt().unsqueeze(-2))
    M = L @ ((D.unsqueeze(-1) if D is not None else 1) * L.transpose(-1, -2))
    return MultivariateNormal(loc, precision_matrix=M)


GRID = [pytest.param(form, param, layout, loc_b, diag_b, f_b,
                     id=f"{form}-{param}-{'coo' if layout == torch.sparse_coo else 'csr'}-loc{loc_b}-D{diag_b}-F{f_b}")
        for form, param in FORMS for layout in LAYOUTS for loc_b in BATCHES for f_b in BATCHES
        for diag_b in (BATCHES if param == "ldlt" else [None])]


@pytest.mark.parametrize("form,param,layout,loc_b,diag_b,f_b", GRID)
def test_agrees_with_multivariate_normal_on_every_form_and_batch_shape(form, param, layout, loc_b, diag_b, f_b):
    """Shapes, moments, log_prob (batched and broadcast values), entropy, dense matrices,
    the sample for a fixed seed, and the gradients of log_prob + entropy w.r.t. loc, D
    and the factor (a leaf sparse tensor, batched CSR too) against torch.distributions."""
    loc, D, F, L = _grid_operands(param, layout, loc_b, diag_b, f_b)
    kw = {"scale_tril" if form == "cov" else "precision_tril": F}
    dist, ref = SparseMultivariateNormal(loc, D, **kw), _reference(form, loc, D, L)
    assert dist.batch_shape == ref.batch_shape and dist.event_shape == ref.event_shape
    x = ref.sample((2,))
    for value in (x, x[0], x.reshape(-1, 4)[0]):
        torch.testing.assert_close(dist.log_prob(value), ref.log_prob(value))
    for name in ("mean", "variance", "covariance_matrix", "precision_matrix"):
        torch.testing.assert_close(getattr(dist, name), getattr(ref, name), msg=name)
    torch.testing.assert_close(dist.entropy(), ref.entropy())
    # the sample: loc + L (D^1/2) eps for the covariance forms (MultivariateNormal's own
    # draw), loc + L^-T (D^-1/2) eps for the precision forms
    torch.manual_seed(4)
    s = dist.rsample((2,))
    torch.manual_seed(4)
    if form == "cov":
        torch.testing.assert_close(s, ref.rsample((2,)))
    else:
        eps = torch.randn(s.shape, dtype=torch.float64)
        Lt_r = ((s - loc).unsqueeze(-2) @ L).squeeze(-2)
        torch.testing.assert_close(Lt_r * (D.sqrt() if D is not None else 1), eps)

    leaf = (F.coalesce() if layout == torch.sparse_coo else F).detach().requires_grad_()
    loc1, D1 = loc.clone().requires_grad_(), D.clone().requires_grad_() if D is not None else None
    d = SparseMultivariateNormal(loc1, D1, **{next(iter(kw)): leaf})
    if layout == torch.sparse_csr and f_b and param == "llt":
        # the factor on two paths of one graph (the entropy of LL^T reads its diagonal):
        # PyTorch cannot add batched CSR gradients, the clear error of docs/gradients.md; separate
        # backward passes accumulate
        with pytest.raises(RuntimeError, match="batched CSR tensor used more than once in one graph"):
            (d.log_prob(x).sum() + d.entropy().sum()).backward()
        leaf.grad = loc1.grad = None
        d.log_prob(x).sum().backward()
        d.entropy().sum().backward()
    else:
        (d.log_prob(x).sum() + d.entropy().sum()).backward()
    loc2, D2 = loc.clone().requires_grad_(), D.clone().requires_grad_() if D is not None else None
    Ld = L.clone().requires_grad_()
    r = _reference(form, loc2, D2, Ld)
    (r.log_prob(x).sum() + r.entropy().sum()).backward()
    torch.testing.assert_close(loc1.grad, loc2.grad)
    if D is not None:
        torch.testing.assert_close(D1.grad, D2.grad)
    assert leaf.grad.layout == layout
    stored = leaf.detach().to_dense() != 0
    torch.testing.assert_close(leaf.grad.to_dense(), Ld.grad * stored)


def test_variance_with_a_batch_of_diagonals_and_one_factor():
    """loc (n,), diagonal (B, n), a strictly lower scale_tril (n, n): variance once raised
    in expand() while log_prob, entropy and rsample worked."""
    loc, D, F, L = _grid_operands("ldlt", torch.sparse_coo, (), (3,), ())
    dist = SparseMultivariateNormal(loc, D, scale_tril=F)
    torch.testing.assert_close(dist.variance, _reference("cov", loc, D, L).variance)


def test_factor_batch_of_one_broadcasts_against_a_batch_of_locs():
    """loc (3, n), scale_tril (1, n, n): batch_shape (3,), and log_prob once raised
    "Invalid dimensions for bmat and bvec"."""
    loc, _, F, L = _grid_operands("llt", torch.sparse_csr, (3,), None, (1,))
    dist, ref = SparseMultivariateNormal(loc, scale_tril=F), _reference("cov", loc, None, L)
    x = ref.sample((2,))
    assert dist.batch_shape == (3,)
    torch.testing.assert_close(dist.log_prob(x), ref.log_prob(x))


def test_batched_csr_factor_on_two_paths_of_one_graph_raises_the_clear_error():
    """(log_prob + entropy).backward() with a batched CSR factor once stored a malformed
    gradient (or failed inside autograd with a shape error)."""
    loc, _, F, _ = _grid_operands("llt", torch.sparse_csr, (3,), None, (3,))
    F.requires_grad_()
    dist = SparseMultivariateNormal(loc, scale_tril=F)
    with pytest.raises(RuntimeError, match="used more than once in one graph"):
        (dist.log_prob(torch.zeros(3, 4, dtype=torch.float64)).sum() + dist.entropy().sum()).backward()


@pytest.mark.parametrize("layout", LAYOUTS, ids=["COO", "CSR"])
def test_inplace_edit_of_the_factor_values_between_log_prob_and_backward(layout):
    """The factor rebuilt on F.values() (an alias with a version counter of its own) once
    hid the edit: the gradient was computed from the edited values.  Now the edit raises,
    or (where the tensor F was built from cannot be found) cannot reach the backward."""
    loc, _, F, _ = _grid_operands("llt", layout, (), None, ())
    v = F.values().clone().requires_grad_()

    def log_prob_and_grad(edit):
        w = v.detach().clone().requires_grad_()
        Fw = (torch.sparse_coo_tensor(F.indices(), w, F.shape, is_coalesced=True) if layout == torch.sparse_coo
              else sparse_csr_tensor(F.crow_indices(), F.col_indices(), w, F.shape))
        lp = SparseMultivariateNormal(loc, scale_tril=Fw).log_prob(torch.ones(4, dtype=torch.float64))
        if edit:
            with torch.no_grad():
                w.mul_(3)
        lp.backward()
        return w.grad

    clean = log_prob_and_grad(False)
    try:
        edited = log_prob_and_grad(True)
    except RuntimeError as e:
        assert "modified by an inplace operation" in str(e)
    else:
        torch.testing.assert_close(edited, clean)
