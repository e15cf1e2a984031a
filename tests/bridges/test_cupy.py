"""torchsparsegradutils.cupy on CPU (the SciPy path): conversions, sparse_solve_c4t against dense
torch.linalg.solve, its gradients against dense autograd, and its errors."""
import warnings

import numpy as np
import pytest
import scipy.sparse as nsp
import torch

import torchsparsegradutils.cupy as tc
from torchsparsegradutils.utils import ConvergenceWarning, make_spd_sparse, rand_sparse

LAYOUTS = [torch.sparse_coo, torch.sparse_csr]
SOLVERS = [None, "spsolve", "cg", "cgs", "minres", "gmres"]
TOL = {torch.float64: dict(rtol=1e-6, atol=1e-8), torch.float32: dict(rtol=1e-3, atol=1e-4)}


def nonsymmetric(n, layout, dtype, seed=0):
    torch.manual_seed(seed)
    A = rand_sparse((n, n), 4 * n, layout, values_dtype=dtype, well_conditioned=True)
    return A, A.to_dense()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("itype", [torch.int32, torch.int64])
def test_conversions_roundtrip(layout, itype):
    torch.manual_seed(0)
    A = rand_sparse((5, 7), 12, layout, indices_dtype=itype, values_dtype=torch.float64)
    to_c, to_t = (tc.t2c_coo, tc.c2t_coo) if layout == torch.sparse_coo else (tc.t2c_csr, tc.c2t_csr)
    S = to_c(A)
    assert isinstance(S, nsp.coo_matrix if layout == torch.sparse_coo else nsp.csr_matrix)
    np.testing.assert_array_equal(S.toarray(), A.to_dense().numpy())
    B = to_t(S)
    assert B.layout == layout and B.shape == A.shape
    torch.testing.assert_close(B.to_dense(), A.to_dense(), rtol=0, atol=0)
    # from SciPy first
    D = nsp.random(4, 6, density=0.4, format="coo" if layout == torch.sparse_coo else "csr", random_state=1)
    np.testing.assert_array_equal(to_t(D).to_dense().numpy(), D.toarray())


def test_uncoalesced_coo_is_coalesced_with_warning():
    A = torch.sparse_coo_tensor([[0, 0, 1], [1, 1, 0]], [1.0, 2.0, 3.0], (2, 2))
    with pytest.warns(UserWarning, match="non-coalesced"):
        S = tc.t2c_coo(A)
    np.testing.assert_array_equal(S.toarray(), [[0.0, 3.0], [3.0, 0.0]])


def test_backend_selection_on_cpu():
    import scipy.sparse
    assert tc._get_array_modules(torch.zeros(1)) == (np, scipy.sparse)
    x = torch.arange(4.0)
    a = tc._torch_to_backend(x, np)
    assert isinstance(a, np.ndarray) and np.shares_memory(a, x.numpy())
    assert torch.equal(tc._backend_to_torch(a), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("bshape", [(12,), (12, 1), (12, 3)])
def test_solve_and_gradients_match_dense(solver, layout, dtype, bshape):
    if solver in ("cg", "minres"):           # symmetric solvers: an SPD matrix
        torch.manual_seed(1)
        A, D = make_spd_sparse(12, layout, dtype, torch.int64, torch.device("cpu"), nz=40)
    else:
        A, D = nonsymmetric(12, layout, dtype)
    torch.manual_seed(2)
    B = torch.rand(bshape, dtype=dtype)
    kw = {} if solver in (None, "spsolve") else dict(tol=1e-10 if dtype == torch.float64 else 1e-5, maxiter=500)
    A = A.detach().requires_grad_()
    Bt = B.clone().requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        X = tc.sparse_solve_c4t(A, Bt, solve=solver, **kw)
    assert X.shape == B.shape and X.dtype == dtype
    Dd = D.clone().requires_grad_()
    Bd = B.clone().requires_grad_()
    Xd = torch.linalg.solve(Dd, Bd)
    torch.testing.assert_close(X, Xd, **TOL[dtype])
    G = torch.rand_like(X)
    X.backward(G)
    Xd.backward(G)
    assert A.grad.layout == layout
    mask = A.detach().to_dense() != 0
    torch.testing.assert_close(A.grad.to_dense()[mask], Dd.grad[mask], **TOL[dtype])
    assert not bool(A.grad.to_dense()[~mask].any())          # the gradient stays on A's pattern
    torch.testing.assert_close(Bt.grad, Bd.grad, **TOL[dtype])


def test_gradcheck_default_and_named():
    A, _ = nonsymmetric(6, torch.sparse_csr, torch.float64)
    vals = A.values().clone().requires_grad_()
    B = torch.rand(6, 2, dtype=torch.float64, requires_grad=True)
    for solver in (None, "spsolve", "gmres"):
        kw = {} if solver in (None, "spsolve") else dict(tol=1e-13, atol=0)

        def f(v, b):
            M = torch.sparse_csr_tensor(A.crow_indices(), A.col_indices(), v, A.shape)
            return tc.sparse_solve_c4t(M, b, solve=solver, **kw)
        assert torch.autograd.gradcheck(f, (vals, B))


def test_callable_solvers_receive_matrix_and_rhs_shape():
    A, D = nonsymmetric(8, torch.sparse_coo, torch.float64)
    seen = []

    def solve(M, b, scale=1.0):
        seen.append((type(M).__name__, b.shape, scale))
        return nsp.linalg.spsolve(M, b)

    def tsolve(M, g, scale=1.0):         # given A, solves with its transpose (the release's contract)
        return nsp.linalg.spsolve(M.T.tocsr(), g)
    b = torch.rand(8, dtype=torch.float64, requires_grad=True)
    x = tc.sparse_solve_c4t(A, b, solve=solve, transpose_solve=tsolve, scale=2.0)
    assert seen == [("csr_matrix", (8,), 2.0)]
    torch.testing.assert_close(x, torch.linalg.solve(D, b.detach()))
    x.sum().backward()
    torch.testing.assert_close(b.grad, torch.linalg.solve(D.T, torch.ones(8, dtype=torch.float64)))


def test_non_convergence_is_reported():
    A, _ = nonsymmetric(30, torch.sparse_csr, torch.float64)
    with pytest.warns(ConvergenceWarning, match="gmres"):
        tc.sparse_solve_c4t(A, torch.rand(30, dtype=torch.float64), solve="gmres", tol=1e-14, atol=0, maxiter=1,
                            restart=2)


def test_errors():
    A, _ = nonsymmetric(4, torch.sparse_csr, torch.float64)
    b = torch.ones(4, dtype=torch.float64)
    with pytest.raises(ValueError, match="Both A and B should be instances of torch.Tensor"):
        tc.sparse_solve_c4t(A.to_dense().numpy(), b)
    with pytest.raises(TypeError, match="Only COO and CSR"):
        tc.sparse_solve_c4t(A.to_dense(), b)
    with pytest.raises(ValueError, match="A must be square"):
        tc.sparse_solve_c4t(rand_sparse((4, 5), 6, torch.sparse_csr, values_dtype=torch.float64), b)
    with pytest.raises(ValueError, match="B must be a 1D or 2D tensor"):
        tc.sparse_solve_c4t(A, torch.ones(4, 1, 1, dtype=torch.float64))
    with pytest.raises(ValueError, match="Incompatible dimensions"):
        tc.sparse_solve_c4t(A, torch.ones(3, dtype=torch.float64))
    with pytest.raises(ValueError, match="Unknown solver: lu"):
        tc.sparse_solve_c4t(A, b, solve="lu")
    with pytest.warns(UserWarning, match="different dtypes"):
        x = tc.sparse_solve_c4t(A, b.float())
    assert x.dtype == torch.float64
    with pytest.raises(ValueError, match="2D"):
        tc.t2c_csr(A.to_sparse_coo())


def test_gradient_of_A_is_one_sddmm(monkeypatch):
    """grad_A comes from the sampled-product kernel on A's pattern (no nnz x k gather)."""
    from torchsparsegradutils import _backends
    calls = []
    real = _backends.sddmm

    def spy(view, G, X, mean=False):
        calls.append((G.shape, X.shape, mean))
        return real(view, G, X, mean)
    monkeypatch.setattr(_backends, "sddmm", spy)
    A, D = nonsymmetric(9, torch.sparse_coo, torch.float64)
    A.requires_grad_()
    B = torch.rand(9, 4, dtype=torch.float64)
    tc.sparse_solve_c4t(A, B).sum().backward()
    assert calls == [((9, 4), (9, 4), False)]
    mask = D != 0
    Dd = D.clone().requires_grad_()
    torch.linalg.solve(Dd, B).sum().backward()
    torch.testing.assert_close(A.grad.to_dense()[mask], Dd.grad[mask])
