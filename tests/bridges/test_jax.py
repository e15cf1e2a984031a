"""torchsparsegradutils.jax against independent references: conversions round trip, spmm_t4j and its
JAX gradient against dense products, sparse_solve_j4t and its torch gradients against dense
torch.linalg.solve / autograd.  Skipped when JAX is not installed (pip install jax jaxlib)."""
import numpy as np
import pytest
import torch

jax = pytest.importorskip("jax")
import jax.experimental.sparse as jsparse  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.scipy.sparse.linalg import cg  # noqa: E402

import torchsparsegradutils.jax as tj  # noqa: E402
from torchsparsegradutils.utils import make_spd_sparse, rand_sparse  # noqa: E402

LAYOUTS = [torch.sparse_coo, torch.sparse_csr]
TOL = {torch.float64: dict(rtol=1e-6, atol=1e-8), torch.float32: dict(rtol=1e-3, atol=1e-4)}


def test_dense_roundtrip_shares_memory():
    x = torch.arange(6.0).reshape(2, 3)
    j = tj.t2j(x)
    assert j.shape == (2, 3) and np.array_equal(np.asarray(j), x.numpy())
    back = tj.j2t(j)
    assert torch.equal(back, x)
    # non-contiguous input is made contiguous first
    assert np.array_equal(np.asarray(tj.t2j(x.t())), x.t().numpy())


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("itype", [torch.int32, torch.int64])
def test_sparse_roundtrip(layout, itype):
    torch.manual_seed(0)
    A = rand_sparse((5, 7), 12, layout, indices_dtype=itype)
    to_j, to_t = (tj.t2j_coo, tj.j2t_coo) if layout == torch.sparse_coo else (tj.t2j_csr, tj.j2t_csr)
    J = to_j(A)
    assert isinstance(J, jsparse.COO if layout == torch.sparse_coo else jsparse.CSR)
    np.testing.assert_array_equal(np.asarray(J.todense()), A.to_dense().numpy())
    B = to_t(J)
    assert B.layout == layout and B.shape == A.shape
    assert torch.equal(B.to_dense(), A.to_dense())
    D = jnp.asarray(A.to_dense().numpy())
    J2 = (jsparse.COO if layout == torch.sparse_coo else jsparse.CSR).fromdense(D)
    assert torch.equal(to_t(J2).to_dense(), A.to_dense())


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("xshape", [(6,), (6, 3)])
def test_spmm_t4j_and_its_jax_gradient(layout, xshape):
    torch.manual_seed(1)
    A = rand_sparse((4, 6), 10, layout)
    D = A.to_dense()
    f = tj.spmm_t4j(A)
    x = jnp.asarray(np.random.default_rng(0).standard_normal(xshape).astype(np.float32))
    y = f(x)
    np.testing.assert_allclose(np.asarray(y), (D @ torch.from_numpy(np.asarray(x))).numpy(), rtol=1e-6, atol=1e-6)
    # d/dx 0.5 ||A x||^2 = A^T A x, through the custom VJP (the transpose kernel)
    g = jax.grad(lambda v: 0.5 * jnp.sum(f(v) ** 2))(x)
    ref = D.T @ (D @ torch.from_numpy(np.asarray(x)))
    np.testing.assert_allclose(np.asarray(g), ref.numpy(), rtol=1e-5, atol=1e-5)


def test_spmm_t4j_errors():
    A = rand_sparse((3, 3), 4, torch.sparse_csr)
    with pytest.raises(ValueError, match="2D sparse"):
        tj.spmm_t4j(A.to_dense())
    if not jax.config.read("jax_enable_x64"):
        with pytest.raises(TypeError, match="jax_enable_x64"):
            tj.spmm_t4j(A.double())
    f = tj.spmm_t4j(A)
    with pytest.raises(TypeError, match="jax.jit"):
        jax.jit(f)(jnp.ones(3))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("solver", [None, cg])   # None: bicgstab
@pytest.mark.parametrize("bshape", [(10,), (10, 2)])
def test_solve_and_gradients_match_dense(solver, layout, dtype, bshape):
    torch.manual_seed(2)
    A, D = make_spd_sparse(10, layout, dtype, torch.int64, torch.device("cpu"), nz=30)
    B = torch.rand(bshape, dtype=dtype)
    kw = dict(tol=1e-12 if dtype == torch.float64 else 1e-6, maxiter=200)
    A = A.detach().requires_grad_()
    Bt = B.clone().requires_grad_()
    X = tj.sparse_solve_j4t(A, Bt, solve=solver, **kw)
    assert X.shape == B.shape and X.dtype == dtype
    Dd, Bd = D.clone().requires_grad_(), B.clone().requires_grad_()
    Xd = torch.linalg.solve(Dd, Bd)
    torch.testing.assert_close(X, Xd, **TOL[dtype])
    G = torch.rand_like(X)
    X.backward(G)
    Xd.backward(G)
    mask = A.detach().to_dense() != 0
    assert A.grad.layout == layout
    torch.testing.assert_close(A.grad.to_dense()[mask], Dd.grad[mask], **TOL[dtype])
    torch.testing.assert_close(Bt.grad, Bd.grad, **TOL[dtype])
    assert not jax.config.read("jax_enable_x64")        # float64 switched on for the call only


def test_nonsymmetric_adjoint_uses_the_transpose():
    torch.manual_seed(3)
    A = rand_sparse((8, 8), 30, torch.sparse_csr, values_dtype=torch.float64, well_conditioned=True)
    D = A.to_dense()
    b = torch.rand(8, dtype=torch.float64, requires_grad=True)
    x = tj.sparse_solve_j4t(A, b, tol=1e-13)
    torch.testing.assert_close(x, torch.linalg.solve(D, b.detach()))
    x.sum().backward()
    torch.testing.assert_close(b.grad, torch.linalg.solve(D.T, torch.ones(8, dtype=torch.float64)))


def test_gradcheck():
    torch.manual_seed(4)
    A = rand_sparse((5, 5), 15, torch.sparse_csr, values_dtype=torch.float64, well_conditioned=True)
    vals = A.values().clone().requires_grad_()
    B = torch.rand(5, 2, dtype=torch.float64, requires_grad=True)

    def f(v, b):
        return tj.sparse_solve_j4t(torch.sparse_csr_tensor(A.crow_indices(), A.col_indices(), v, A.shape), b,
                                   tol=1e-14, atol=0.0)
    assert torch.autograd.gradcheck(f, (vals, B))


def test_solve_errors():
    A = rand_sparse((4, 4), 8, torch.sparse_csr, values_dtype=torch.float64, well_conditioned=True)
    with pytest.raises(ValueError, match="A and B must have the same dtype"):
        tj.sparse_solve_j4t(A, torch.ones(4))
    with pytest.raises(ValueError, match="A must be square"):
        tj.sparse_solve_j4t(rand_sparse((4, 5), 8, torch.sparse_csr), torch.ones(4))
    with pytest.raises(TypeError, match="Only COO and CSR"):
        tj.sparse_solve_j4t(A.to_dense(), torch.ones(4, dtype=torch.float64))
