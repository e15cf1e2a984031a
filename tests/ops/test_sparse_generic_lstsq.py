"""Tests of sparse_generic_lstsq against dense torch.linalg.lstsq with autograd, and gradcheck."""
import pytest
import torch

from torchsparsegradutils import sparse_csr_tensor, sparse_generic_lstsq
from torchsparsegradutils.utils import lsmr, rand_sparse

HAS_CUDA = torch.cuda.is_available()
TOL = dict(rtol=1e-6, atol=1e-8)


def tall(m, n, layout, seed=0):
    torch.manual_seed(seed)
    A = rand_sparse((m, n), 3 * m, layout, values_dtype=torch.float64)
    return A, A.to_dense()


def check(A, D, B, **kw):
    A = A.detach().requires_grad_(True)
    Bs, Dd, Bd = (t.detach().clone().requires_grad_(True) for t in (B, D, B))
    X = sparse_generic_lstsq(A, Bs, **kw)
    Xr = torch.linalg.lstsq(Dd, Bd.unsqueeze(-1) if B.dim() == 1 else Bd).solution
    Xr = Xr.squeeze(-1) if B.dim() == 1 else Xr
    torch.testing.assert_close(X, Xr, **TOL)
    W = torch.randn_like(Xr)
    (X * W).sum().backward()
    (Xr * W).sum().backward()
    torch.testing.assert_close(Bs.grad, Bd.grad, **TOL)
    torch.testing.assert_close(A.grad.to_dense(), Dd.grad * (D != 0), **TOL)   # residual term included


@pytest.mark.parametrize("layout", [torch.sparse_coo, torch.sparse_csr])
@pytest.mark.parametrize("vector", [False, True])
def test_matches_dense(layout, vector):
    A, D = tall(30, 8, layout)
    B = torch.randn(30, dtype=torch.float64) if vector else torch.randn(30, 3, dtype=torch.float64)
    check(A, D, B)


def test_square_and_custom_solvers():
    A, D = tall(12, 12, torch.sparse_csr, seed=3)
    D = D + 5 * torch.eye(12, dtype=torch.float64)
    A = D.to_sparse_csr()
    B = torch.randn(12, 2, dtype=torch.float64)
    check(A, D, B, lstsq=lambda A, B: torch.linalg.lstsq(A.to_dense(), B).solution,
          transpose_lstsq=lambda A, G: torch.linalg.pinv(A.to_dense().T) @ G)
    check(A, D, B, lstsq=lambda A, B: lsmr(A, B, atol=1e-12, btol=1e-12, maxiter=200))


def test_gradcheck_through_values():
    A, D = tall(10, 4, torch.sparse_csr, seed=1)
    crow, col, vals = A.crow_indices(), A.col_indices(), A.values().clone().requires_grad_(True)
    B = torch.randn(10, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda v, B: sparse_generic_lstsq(sparse_csr_tensor(crow, col, v, (10, 4)), B),
                                    (vals, B))


@pytest.mark.parametrize("A, B, exc, match", [
    ("x", torch.ones(2), ValueError, "instances of torch.Tensor"),
    (torch.ones(2, 3).to_sparse(), torch.ones(2), ValueError, "tall full-rank"),
    (torch.eye(2), torch.ones(2), TypeError, "Only COO and CSR"),
    (torch.ones(3, 2).to_sparse(), torch.ones(2), ValueError, "Incompatible dimensions"),
    (torch.ones(3, 2).to_sparse(), torch.ones(3, 1, 1), ValueError, "1D or 2D"),
    (torch.ones(3, 2).to_sparse(), torch.ones(3, dtype=torch.float64), TypeError, "same dtype"),
])
def test_errors(A, B, exc, match):
    with pytest.raises(exc, match=match):
        sparse_generic_lstsq(A, B)


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device")
def test_cuda():
    A, D = tall(20, 5, torch.sparse_csr)
    B = torch.randn(20, 2, dtype=torch.float64)
    A = A.cuda().requires_grad_(True)
    X = sparse_generic_lstsq(A, B.cuda())
    torch.testing.assert_close(X.cpu(), torch.linalg.lstsq(D, B).solution, **TOL)
    X.sum().backward()
    assert A.grad.is_cuda


@pytest.mark.parametrize("shape", [(2, 1), (5, 1), (3, 2)])
def test_right_hand_side_without_columns(shape):
    """B of shape (m, 0): X of shape (n, 0) and empty gradients, as torch.linalg.lstsq gives."""
    D = torch.zeros(shape, dtype=torch.float64)
    D[: shape[1], : shape[1]] = 3 * torch.eye(shape[1], dtype=torch.float64)
    A = D.to_sparse().requires_grad_()
    B = torch.zeros(shape[0], 0, dtype=torch.float64, requires_grad=True)
    X = sparse_generic_lstsq(A, B)
    assert X.shape == (shape[1], 0)
    X.sum().backward()
    assert B.grad.shape == B.shape and A.grad._nnz() == A._nnz() and torch.all(A.grad._values() == 0)
