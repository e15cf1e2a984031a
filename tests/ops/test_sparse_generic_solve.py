"""Tests of sparse_generic_solve against dense torch.linalg.solve with autograd, gradcheck and gradgradcheck."""
import pytest
import torch

from torchsparsegradutils import sparse_csr_tensor, sparse_generic_solve
from torchsparsegradutils.utils import (BICGSTABSettings, MINRESSettings, bicgstab, linear_cg, make_spd_sparse, minres,
                                        rand_sparse)

HAS_CUDA = torch.cuda.is_available()
TOL = dict(rtol=1e-6, atol=1e-8)
SOLVERS = {
    "minres": (minres, dict(settings=MINRESSettings(minres_tolerance=1e-12))),
    "linear_cg": (linear_cg, dict(tolerance=1e-12)),
    "bicgstab": (bicgstab, dict(settings=BICGSTABSettings(reltol=1e-13, abstol=0))),
}


def spd(n, layout, seed=0):
    torch.manual_seed(seed)
    return make_spd_sparse(n, layout, torch.float64, torch.int64, torch.device("cpu"), sparsity_ratio=0.6)


def check(A, D, B, **kw):
    A = A.detach().requires_grad_(True)
    Bs, Dd, Bd = (t.detach().clone().requires_grad_(True) for t in (B, D, B))
    X = sparse_generic_solve(A, Bs, **kw)
    Xr = torch.linalg.solve(Dd, Bd)
    torch.testing.assert_close(X, Xr, **TOL)
    W = torch.randn_like(Xr)
    (X * W).sum().backward()
    (Xr * W).sum().backward()
    torch.testing.assert_close(Bs.grad, Bd.grad, **TOL)
    assert A.grad.layout == A.layout
    torch.testing.assert_close(A.grad.to_dense(), Dd.grad * (D != 0), **TOL)


@pytest.mark.parametrize("layout", [torch.sparse_coo, torch.sparse_csr])
@pytest.mark.parametrize("name", sorted(SOLVERS))
@pytest.mark.parametrize("vector", [False, True])
def test_spd_matches_dense(layout, name, vector):
    A, D = spd(25, layout)
    B = torch.randn(25, dtype=torch.float64) if vector else torch.randn(25, 3, dtype=torch.float64)
    solve, kw = SOLVERS[name]
    check(A, D, B, solve=solve, **kw)


@pytest.mark.parametrize("layout", [torch.sparse_coo, torch.sparse_csr])
def test_nonsymmetric_bicgstab_uses_true_transpose(layout):
    torch.manual_seed(4)
    A = rand_sparse((30, 30), 150, layout, values_dtype=torch.float64, well_conditioned=True)
    B = torch.randn(30, 2, dtype=torch.float64)
    solve, kw = SOLVERS["bicgstab"]
    check(A, A.to_dense(), B, solve=solve, **kw)


def test_explicit_transpose_solve_and_default_solver():
    A, D = spd(20, torch.sparse_csr)
    B = torch.randn(20, 2, dtype=torch.float64)
    calls = []

    def tsolve(A, G, **kw):
        calls.append(1)
        return torch.linalg.solve(A.to_dense().T, G)

    check(A, D, B, solve=lambda A, B, **kw: torch.linalg.solve(A.to_dense(), B), transpose_solve=tsolve)
    assert calls
    check(A, D, B, settings=MINRESSettings(minres_tolerance=1e-12))          # default: MINRES


@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_gradcheck_and_gradgradcheck(layout):
    A, D = spd(7, torch.sparse_coo, seed=1)
    B = torch.randn(7, 2, dtype=torch.float64, requires_grad=True)
    kw = dict(solve=bicgstab, settings=BICGSTABSettings(reltol=1e-13, abstol=0))
    if layout == "coo":
        idx, vals = A.indices(), A.values().clone().requires_grad_(True)

        def f(v, B):
            return sparse_generic_solve(torch.sparse_coo_tensor(idx, v, (7, 7)), B, **kw)
    else:
        C = A.to_sparse_csr()
        crow, col, vals = C.crow_indices(), C.col_indices(), C.values().clone().requires_grad_(True)

        def f(v, B):
            return sparse_generic_solve(sparse_csr_tensor(crow, col, v, (7, 7)), B, **kw)
    assert torch.autograd.gradcheck(f, (vals, B))
    assert torch.autograd.gradgradcheck(f, (vals, B))


def test_hessian_vector_product_matches_dense():
    """HVP w.r.t. a values leaf through sparse_csr_tensor (PyTorch's own sparse_coo_tensor
    backward into values is not differentiable again, so COO leaves get no second derivative)."""
    A, D = spd(10, torch.sparse_csr, seed=2)
    crow, col = A.crow_indices(), A.col_indices()
    rows = torch.repeat_interleave(torch.arange(10), crow[1:] - crow[:-1])
    B = torch.randn(10, 2, dtype=torch.float64)
    v = torch.randn(col.numel(), dtype=torch.float64)

    def loss_sparse(vals):
        X = sparse_generic_solve(sparse_csr_tensor(crow, col, vals, (10, 10)), B, solve=linear_cg, tolerance=1e-13)
        return (X ** 2).sum()

    def loss_dense(vals):
        M = torch.zeros(10, 10, dtype=torch.float64).index_put((rows, col), vals)
        return (torch.linalg.solve(M, B) ** 2).sum()

    vals = A.values().clone().requires_grad_(True)
    (g,) = torch.autograd.grad(loss_sparse(vals), vals, create_graph=True)
    (hv,) = torch.autograd.grad((g * v).sum(), vals)
    _, hv_ref = torch.autograd.functional.hvp(loss_dense, A.values().clone(), v)
    torch.testing.assert_close(hv, hv_ref, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("A, B, exc, match", [
    ("x", torch.ones(2), ValueError, "instances of torch.Tensor"),
    (torch.eye(2), torch.ones(2), TypeError, "Only COO and CSR"),
    (torch.eye(2).repeat(2, 1, 1).to_sparse(), torch.ones(2, 2, 1), ValueError, "2D tensor"),
    (torch.ones(2, 3).to_sparse(), torch.ones(2), ValueError, "square"),
    (torch.eye(2).to_sparse(), torch.ones(2, 1, 1), ValueError, "1D or 2D"),
    (torch.eye(2).to_sparse(), torch.ones(3), ValueError, "Incompatible dimensions"),
    (torch.eye(2).to_sparse(), torch.eye(2).to_sparse(), TypeError, "dense"),
    (torch.eye(2, dtype=torch.float16).to_sparse(), torch.ones(2, dtype=torch.float16), TypeError, "float32 and float64"),
])
def test_errors(A, B, exc, match):
    with pytest.raises(exc, match=match):
        sparse_generic_solve(A, B)


def test_dtype_mismatch_warns_and_converts():
    A, D = spd(6, torch.sparse_coo)
    with pytest.warns(UserWarning, match="different dtypes"):
        X = sparse_generic_solve(A, torch.ones(6, dtype=torch.float32), settings=MINRESSettings(minres_tolerance=1e-12))
    assert X.dtype == torch.float64


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device")
def test_cuda():
    A, D = spd(20, torch.sparse_csr)
    B = torch.randn(20, 2, dtype=torch.float64)
    A = A.cuda().requires_grad_(True)
    X = sparse_generic_solve(A, B.cuda(), solve=linear_cg, tolerance=1e-12)
    torch.testing.assert_close(X.cpu(), torch.linalg.solve(D, B), **TOL)
    X.sum().backward()
    assert A.grad.is_cuda and A.grad.layout == torch.sparse_csr


@pytest.mark.parametrize("layout", [torch.sparse_coo, torch.sparse_csr])
def test_inplace_edit_of_values_between_forward_and_backward_raises(layout):
    """Issue 7, finding 3: v.mul_(3) on the values A was built from, between forward
    and backward, raises autograd's version-counter error (was a silently wrong gradient)."""
    S, _ = spd(8, layout, seed=5)
    v = S.values().clone().requires_grad_()
    if layout == torch.sparse_csr:
        A = sparse_csr_tensor(S.crow_indices(), S.col_indices(), v, S.shape)
    else:
        A = torch.sparse_coo_tensor(S.indices(), v, S.shape)
    B = torch.randn(8, 2, dtype=torch.float64, requires_grad=True)
    X = sparse_generic_solve(A, B, solve=linear_cg, tolerance=1e-12)
    with torch.no_grad():
        v.mul_(3)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        X.sum().backward()
