"""sparse_mm's cases and references, shared by its test files (the grid, CUDA, the glue,
the constructors)."""
import torch
from torchsparsegradutils import sparse_mm

from support.operands import HALF_DTYPES, random_dense, to_sparse


def make_case(layout, batched, n, m, p, nnz, dtype, itype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    D = random_dense((3, n, m) if batched else (n, m), dtype, gen, nnz=nnz)
    A = to_sparse(D, layout, itype, gen)
    B = torch.randn(*D.shape[:-2], m, p, generator=gen, dtype=dtype)
    G = torch.randn(*D.shape[:-2], n, p, generator=gen, dtype=dtype)
    return A, B, G, D


def dense_reference(D, B, G):
    Dd = D.clone().requires_grad_()
    Bd = B.clone().requires_grad_()
    C = Dd @ Bd
    C.backward(G)
    return C.detach(), Dd.grad, Bd.grad


def check_against_dense(A, B, G, D, tol):
    A = A.detach().requires_grad_()
    B = B.clone().requires_grad_()
    C = sparse_mm(A, B)
    C.backward(G)
    Cr, gDr, gBr = dense_reference(D, B.detach(), G)
    torch.testing.assert_close(C, Cr, **tol)
    torch.testing.assert_close(B.grad, gBr, **tol)
    gA = A.grad
    assert gA.layout == A.layout and gA.shape == A.shape
    pattern = (D != 0).to(D.dtype) if A.layout == torch.sparse_csr else \
        torch.sparse_coo_tensor(A.detach().coalesce().indices(),
                                torch.ones(A.detach().coalesce()._nnz(), dtype=D.dtype, device=D.device),
                                D.shape).to_dense()
    torch.testing.assert_close(gA.to_dense(), gDr * pattern, **tol)
    # the gradient lives on A's (coalesced) pattern, nowhere else
    if A.layout == torch.sparse_coo:
        Ac = A.detach().coalesce()
        assert gA._nnz() == Ac._nnz()
        assert torch.equal(gA._indices(), Ac.indices())
    else:
        assert torch.equal(gA.crow_indices(), A.crow_indices())
        assert torch.equal(gA.col_indices(), A.col_indices())
    return C


TOL = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.float64: dict(rtol=1e-10, atol=1e-10)}
HALF = list(HALF_DTYPES)


def grads_of(A, B, G):
    """C = sparse_mm(A, B) and its gradients for dL/dC = G, all dense."""
    Ar, Br = A.detach().requires_grad_(), B.clone().requires_grad_()
    C = sparse_mm(Ar, Br)
    C.backward(G)
    assert Ar.grad.dtype == Br.grad.dtype == C.dtype == A.dtype
    return C.detach(), Ar.grad.to_dense(), Br.grad
