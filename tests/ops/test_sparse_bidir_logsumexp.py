"""Tests of sparse_bidir_logsumexp against the dense reference and two sparse_logsumexp
calls (inputs from support/operands.py, reference from support/lse.py)."""
import pytest
import torch
from support.lse import DTYPES, HAS_CUDA, LAYOUTS, TOL, dense_grad_at_entries, dense_reference, leaf_sparse
from support.operands import random_dense, to_layout

from torchsparsegradutils import sparse_bidir_logsumexp, sparse_logsumexp


def batched_input(layout, dtype, seed):
    D = random_dense((3, 6, 4), dtype, seed=seed)
    if layout in ("csr", "csc"):  # one pattern for every item
        D = D[0].expand(3, 6, 4) * torch.tensor([1.0, -2.0, 3.0], dtype=dtype)[:, None, None]
    return D


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("include_zeros", [True, False], ids=["zeros", "no_zeros"])
@pytest.mark.parametrize("shape", [(7, 5), (4, 9), "batched"], ids=str)
def test_matches_dense_and_two_calls(path, layout, dtype, include_zeros, shape):
    D = batched_input(layout, dtype, seed=0) if shape == "batched" else random_dense(shape, dtype, seed=0)
    A = to_layout(D, layout)
    col_lse, row_lse = sparse_bidir_logsumexp(A, include_zeros=include_zeros)
    torch.testing.assert_close(col_lse, dense_reference(D, -2, include_zeros), **TOL[dtype])
    torch.testing.assert_close(row_lse, dense_reference(D, -1, include_zeros), **TOL[dtype])
    assert torch.equal(col_lse, sparse_logsumexp(A, -2, include_zeros=include_zeros))
    assert torch.equal(row_lse, sparse_logsumexp(A, -1, include_zeros=include_zeros))


@pytest.mark.parametrize("shape", [(7, 5), (4, 9), (3, 6, 4), (2, 3, 8)], ids=str)
def test_output_layouts(path, shape):
    D = random_dense(shape, torch.float64, seed=1)
    A = to_layout(D, "coo")
    col_lse, row_lse = sparse_bidir_logsumexp(A)
    n, m = shape[-2], shape[-1]
    padded = sparse_bidir_logsumexp(A, output_layout="padded")
    assert padded.shape == (2, *shape[:-2], max(n, m))
    assert torch.equal(padded[0, ..., :m], col_lse) and torch.equal(padded[1, ..., :n], row_lse)
    assert torch.isneginf(padded[0, ..., m:]).all() and torch.isneginf(padded[1, ..., n:]).all()
    parts = sparse_bidir_logsumexp(A, output_layout="nested").unbind()
    assert torch.equal(parts[0], col_lse) and torch.equal(parts[1], row_lse)
    ck, rk = sparse_bidir_logsumexp(A, keepdim=True)
    assert torch.equal(ck, col_lse.unsqueeze(-2)) and torch.equal(rk, row_lse.unsqueeze(-1))


@pytest.mark.parametrize("layout", ["coo", "coo_uncoalesced", "csr"])
@pytest.mark.parametrize("include_zeros", [True, False], ids=["zeros", "no_zeros"])
@pytest.mark.parametrize("shape", [(6, 5), (3, 5, 4)], ids=str)
def test_gradient_matches_dense(path, layout, include_zeros, shape):
    D = random_dense(shape, torch.float64, seed=2)
    if len(shape) == 3 and layout == "csr":
        D = D[0].expand(shape) * 1.5
    make, vals = leaf_sparse(D, layout)
    A = make()
    gen = torch.Generator().manual_seed(3)
    wc = torch.randn(dense_reference(D, -2, True).shape, generator=gen, dtype=D.dtype)
    wr = torch.randn(dense_reference(D, -1, True).shape, generator=gen, dtype=D.dtype)
    col_lse, row_lse = sparse_bidir_logsumexp(A, include_zeros=include_zeros)
    ((col_lse * wc).sum() + (row_lse * wr).sum()).backward()
    expected = dense_grad_at_entries(D, A.detach(), lambda X: (dense_reference(X, -2, include_zeros) * wc).sum()
                                     + (dense_reference(X, -1, include_zeros) * wr).sum())
    torch.testing.assert_close(vals.grad if layout == "coo_uncoalesced" else vals.grad.reshape(-1), expected)


def test_gradcheck(path):
    A = to_layout(random_dense((3, 5, 4), torch.float64, seed=4), "coo")
    vals = A._values().clone().requires_grad_()

    def fn(v):
        padded = sparse_bidir_logsumexp(torch.sparse_coo_tensor(A._indices(), v, A.shape), include_zeros=False,
                                        output_layout="padded")
        return torch.nan_to_num(padded, neginf=0.0)   # -inf padding and empty groups are constant

    assert torch.autograd.gradcheck(fn, (vals,))


def test_same_bits_for_any_thread_count():
    gen = torch.Generator().manual_seed(5)
    n, m, nnz = 3000, 2500, 400000
    idx = torch.stack([torch.randint(0, n, (nnz,), generator=gen), torch.randint(0, m, (nnz,), generator=gen)])
    A = torch.sparse_coo_tensor(idx, torch.randn(nnz, generator=gen), (n, m)).coalesce()
    results = []
    old = torch.get_num_threads()
    try:
        for nt in (1, 2, 5):
            torch.set_num_threads(nt)
            vals = A.values().clone().requires_grad_()
            col_lse, row_lse = sparse_bidir_logsumexp(torch.sparse_coo_tensor(A.indices(), vals, A.shape,
                                                                              is_coalesced=True))
            (col_lse.sum() + 2 * row_lse.sum()).backward()
            results.append((col_lse, row_lse, vals.grad))
    finally:
        torch.set_num_threads(old)
    for other in results[1:]:
        for x, y in zip(results[0], other):
            assert torch.equal(x, y)


def test_inplace_edit_detected():
    make, vals = leaf_sparse(random_dense((5, 4), torch.float64, seed=6), "coo")
    col_lse, _ = sparse_bidir_logsumexp(make())
    with torch.no_grad():
        vals.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        col_lse.sum().backward()


def test_errors():
    A = random_dense((4, 3), torch.float64, seed=7).to_sparse()
    with pytest.raises(ValueError, match="unknown output_layout"):
        sparse_bidir_logsumexp(A, output_layout="list")
    with pytest.raises(ValueError, match="keepdim is only supported"):
        sparse_bidir_logsumexp(A, keepdim=True, output_layout="padded")
    with pytest.raises(NotImplementedError, match="layout"):
        sparse_bidir_logsumexp(A.to_dense())
    with pytest.raises(NotImplementedError, match="2-D or batched 3-D"):
        sparse_bidir_logsumexp(torch.zeros(2, 2, 2, 2).to_sparse())
    with pytest.raises(ValueError, match="dense dimensions"):
        sparse_bidir_logsumexp(A.to_dense().to_sparse(1))
    with pytest.raises(TypeError, match="float32 and float64"):
        sparse_bidir_logsumexp(A.half())


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_cuda_matches_cpu():
    A = to_layout(random_dense((3, 6, 4), torch.float64, seed=8), "coo")
    for got, want in zip(sparse_bidir_logsumexp(A.cuda()), sparse_bidir_logsumexp(A)):
        torch.testing.assert_close(got.cpu(), want)
