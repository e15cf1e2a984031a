"""Tests of sparse_mm with a dense A, torch.sparse.mm's other call forms: dense @ dense
and dense @ sparse (a COO, CSR or SparseCSR B).

References: torch.sparse.mm itself for the 2D forms PyTorch has (values, and for a COO B
the gradients, sparse at B's entries), and the dense product in float64 with PyTorch's
autograd elsewhere (batches, a CSR B, a SparseCSR B, an uncoalesced COO B); gradcheck
through B's values.  The hygiene sweep and property tests take the op from the registry
(support/registry.py) ("sparse_mm_dense_a").
"""
import pytest
import torch
from support.operands import random_dense, seeded, to_sparse

from torchsparsegradutils import SparseCSR, sparse_mm

LAYOUTS = ["coo", "coo_uncoalesced", "csr"]


def operands(batch=None, n=5, l=7, m=6, key=0):
    gen = seeded("dense_a", batch, n, l, m, key)
    lead = () if batch is None else (batch,)
    X = torch.randn(*lead, n, l, dtype=torch.float64, generator=gen)
    D = random_dense((*lead, l, m), torch.float64, gen, density=0.4, same_pattern=True)   # batched CSR: one nnz
    return X, D


def sparse_b(D, layout):
    if layout == "SparseCSR":
        C = D.to_sparse_csr()
        return SparseCSR(C.crow_indices(), C.col_indices(), C.values().clone().requires_grad_(), tuple(D.shape))
    return to_sparse(D, layout, gen=seeded("layout", layout)).requires_grad_()


def grad_at_entries(B):
    """B's gradient as a dense tensor, and its pattern."""
    if isinstance(B, SparseCSR):
        return SparseCSR(B.crow_indices, B.col_indices, B.values.grad, B.size).to_torch().to_dense()
    return B.grad.to_dense()


@pytest.mark.parametrize("layout", LAYOUTS + ["SparseCSR"])
@pytest.mark.parametrize("batch", [None, 3])
def test_dense_times_sparse_matches_dense_autograd(layout, batch):
    X, D = operands(batch)
    x, B = X.clone().requires_grad_(), sparse_b(D, layout)
    C = sparse_mm(x, B)
    assert C.layout == torch.strided and C.shape == (X @ D).shape and C.is_contiguous()
    G = torch.randn(C.shape, dtype=torch.float64, generator=seeded("G", layout, batch))
    (C * G).sum().backward()
    torch.testing.assert_close(C, X @ D, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(x.grad, G @ D.mT, rtol=1e-12, atol=1e-12)
    # B's gradient: A^T G at B's stored entries only, in B's layout
    torch.testing.assert_close(grad_at_entries(B), (X.mT @ G) * (D != 0), rtol=1e-12, atol=1e-12)
    if not isinstance(B, SparseCSR):
        assert B.grad.layout == B.layout


@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_matches_torch_sparse_mm(layout):
    X, D = operands()
    B = to_sparse(D, layout)
    torch.testing.assert_close(sparse_mm(X, B), torch.sparse.mm(X, B), rtol=1e-12, atol=1e-12)
    if layout == "coo":             # PyTorch's gradient of a COO B: sparse, at B's entries
        ours, theirs = [B.detach().clone().requires_grad_() for _ in range(2)]
        sparse_mm(X, ours).square().sum().backward()
        torch.sparse.mm(X, theirs).square().sum().backward()
        torch.testing.assert_close(ours.grad.to_dense(), theirs.grad.to_dense(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("batch", [None, 2])
def test_dense_times_dense_is_the_product(batch):
    X, D = operands(batch)
    x, d = X.clone().requires_grad_(), D.clone().requires_grad_()
    C = sparse_mm(x, d)
    torch.testing.assert_close(C, X @ D)
    C.sum().backward()
    torch.testing.assert_close(d.grad, X.mT @ torch.ones_like(C))
    if batch is None:
        torch.testing.assert_close(C, torch.sparse.mm(X, D))


def test_gradcheck_through_b_values_and_x():
    X, D = operands(n=3, l=4, m=5)
    S = D.to_sparse()
    f = lambda x, v: sparse_mm(x, torch.sparse_coo_tensor(S.indices(), v, S.shape))  # noqa: E731
    assert torch.autograd.gradcheck(f, (X.clone().requires_grad_(), S.values().clone().requires_grad_()))


def test_inputs_unchanged_and_float32():
    X, D = operands(n=4, l=6, m=3)
    X32, B = X.float(), D.float().to_sparse_csr()
    before = (X32.clone(), B.values().clone())
    torch.testing.assert_close(sparse_mm(X32, B), X32 @ D.float(), rtol=1e-5, atol=1e-5)
    assert torch.equal(X32, before[0]) and torch.equal(B.values(), before[1])


@pytest.mark.parametrize("A, B, error, match", [
    (torch.ones(3, 4), torch.ones(4, 2), ValueError, "reduce='mean' needs a sparse A"),
    (torch.ones(3, 4), torch.ones(5, 2).to_sparse(), ValueError, r"Incompatible inner dimensions: A\[..., 4\] vs B"),
    (torch.ones(3, 4), torch.ones(4, 2, dtype=torch.float64).to_sparse(), TypeError, "same dtype"),
    (torch.ones(3, 4, dtype=torch.int64), torch.ones(4, 2, dtype=torch.int64), TypeError, "supports"),
    (torch.ones(3, 4), torch.ones(4, 2).to_sparse_csc(), ValueError, "B must be dense or a sparse COO or CSR"),
    (torch.ones(3, 4), torch.ones(2, 4, 2).to_sparse(), ValueError, "both be 2D or both be 3D"),
    (torch.ones(2, 3, 4), torch.ones(3, 4, 2).to_sparse(), ValueError, "same batch size"),
    (torch.ones(3, 4), "B", ValueError, "Both A and B should be instances of torch.Tensor"),
])
def test_errors(A, B, error, match):
    reduce = "mean" if "reduce" in match else "sum"
    with pytest.raises(error, match=match):
        sparse_mm(A, B, reduce)


def test_sparse_a_of_layout_csc_is_still_refused():
    """The published release's contract (its own test) for a CSC A, kept."""
    with pytest.raises(ValueError, match="^A should be in either COO or CSR sparse format"):
        sparse_mm(torch.rand(4, 6).to_sparse_csc(), torch.rand(6, 2))
