"""Tests of sparse_logsumexp against torch.logsumexp on the dense tensor, with autograd.

Reference: the dense tensor (absent entries 0, or -inf with include_zeros=False)
through torch.logsumexp; gradients of the stored values compared with the dense
gradient at their positions.  The helpers here serve test_sparse_bidir_logsumexp too.
"""
import json

import pytest
import torch
from support.children import SANITIZED, run_child
from support.lse import DTYPES, HAS_CUDA, LAYOUTS, TOL, dense_grad_at_entries, dense_reference, leaf_sparse
from support.operands import random_dense, to_layout

from torchsparsegradutils import _C, _backends, sparse_csr_tensor, sparse_logsumexp

CASES_2D = [0, 1, -1, [0, 1], (-2, -1)]
CASES_3D = [1, 2, -1, [1, 2], [2, 1]]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("include_zeros", [True, False], ids=["zeros", "no_zeros"])
@pytest.mark.parametrize("keepdim", [False, True], ids=["", "keepdim"])
def test_matches_dense_2d(path, layout, dtype, include_zeros, keepdim):
    D = random_dense((7, 5), dtype, seed=0)
    for itype in (torch.int32, torch.int64) if layout in ("csr", "csc") else (torch.int64,):
        A = to_layout(D, layout, itype)
        for dim in CASES_2D:
            out = sparse_logsumexp(A, dim, keepdim=keepdim, include_zeros=include_zeros)
            torch.testing.assert_close(out, dense_reference(D, dim, include_zeros, keepdim), **TOL[dtype])


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("include_zeros", [True, False], ids=["zeros", "no_zeros"])
def test_matches_dense_batched(path, layout, dtype, include_zeros):
    D = random_dense((3, 6, 4), dtype, seed=1)
    if layout in ("csr", "csc"):
        D = D[0].expand(3, 6, 4) * torch.tensor([1.0, -2.0, 3.0], dtype=dtype)[:, None, None]  # one pattern
    else:
        D[2] = 0.0  # a whole empty item
    A = to_layout(D, layout)
    for dim in CASES_3D:
        for keepdim in (False, True):
            out = sparse_logsumexp(A, dim, keepdim=keepdim, include_zeros=include_zeros)
            torch.testing.assert_close(out, dense_reference(D, dim, include_zeros, keepdim), **TOL[dtype])


@pytest.mark.parametrize("shape", [(0, 4), (4, 0), (0, 0), (3, 5), (2, 0, 3), (2, 3, 0), (0, 3, 3)], ids=str)
def test_empty(path, shape):
    D = torch.zeros(shape, dtype=torch.float64)
    A = to_layout(D, "coo")
    dims = CASES_2D if len(shape) == 2 else CASES_3D
    for dim in dims:
        for include_zeros in (True, False):
            out = sparse_logsumexp(A, dim, include_zeros=include_zeros)
            torch.testing.assert_close(out, dense_reference(D, dim, include_zeros))


def test_large_values_and_infinities(path):
    D = torch.tensor([[-1000.0, 1000.0, 0.0, 0.0], [-1000.0, -999.0, 0.0, 0.0],
                      [float("inf"), 1.0, 0.0, 0.0], [float("-inf"), 0.0, 0.0, 0.0]], dtype=torch.float64)
    for layout in LAYOUTS:
        A = to_layout(D, layout) if layout != "coo_uncoalesced" else to_layout(D.masked_fill(D.isinf(), 5), layout)
        Dref = A.to_dense()
        for dim in CASES_2D:
            for include_zeros in (True, False):
                out = sparse_logsumexp(A, dim, include_zeros=include_zeros)
                ref = dense_reference(Dref, dim, include_zeros)
                if include_zeros is False:   # stored -inf is a value, not an absent entry
                    ref = torch.logsumexp(Dref.masked_fill((Dref == 0) & ~Dref.isinf(), float("-inf")), dim=dim)
                torch.testing.assert_close(out, ref)


def test_float32_large_values(path):
    D = random_dense((20, 30), torch.float32, seed=2, scale=300.0)
    A = to_layout(D, "csr")
    for dim in CASES_2D:
        torch.testing.assert_close(sparse_logsumexp(A, dim), dense_reference(D, dim, True), atol=1e-3, rtol=1e-6)


@pytest.mark.parametrize("layout", ["coo", "coo_uncoalesced", "csr"])
@pytest.mark.parametrize("include_zeros", [True, False], ids=["zeros", "no_zeros"])
@pytest.mark.parametrize("shape", [(6, 5), (3, 5, 4)], ids=str)
def test_gradient_matches_dense(path, layout, include_zeros, shape):
    D = random_dense(shape, torch.float64, seed=3)
    if len(shape) == 3 and layout == "csr":
        D = D[0].expand(shape) * 1.5
    make, vals = leaf_sparse(D, layout)
    dims = CASES_2D if len(shape) == 2 else CASES_3D
    for dim in dims:
        vals.grad = None
        A = make()
        weight = torch.randn(dense_reference(D, dim, include_zeros).shape, dtype=D.dtype,
                             generator=torch.Generator().manual_seed(4))
        (sparse_logsumexp(A, dim, include_zeros=include_zeros) * weight).sum().backward()
        # with include_zeros=False the reference's absent entries are -inf: its gradient at
        # the stored positions is the same softmax
        expected = dense_grad_at_entries(D, A.detach(),
                                         lambda X: (dense_reference(X, dim, include_zeros) * weight).sum())
        if layout == "coo_uncoalesced":
            torch.testing.assert_close(vals.grad, expected)  # every duplicate gets the entry's gradient
        else:
            torch.testing.assert_close(vals.grad.reshape(-1), expected)


@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_gradcheck(path, layout):
    D = random_dense((3, 5, 4), torch.float64, seed=5)
    if layout == "csr":
        D = D[0].expand(3, 5, 4) * torch.tensor([1.0, 2.0, -1.0], dtype=torch.float64)[:, None, None]
    A = to_layout(D, layout)
    vals = (A.values() if layout == "csr" else A._values()).clone().requires_grad_()

    def build(v):
        return (sparse_csr_tensor(A.crow_indices(), A.col_indices(), v, A.shape) if layout == "csr"
                else torch.sparse_coo_tensor(A._indices(), v, A.shape))

    def fn(v):
        # empty groups are -inf without zeros: constant, so 0 for the finite differences
        return tuple(torch.nan_to_num(sparse_logsumexp(build(v), dim, include_zeros=z), neginf=0.0)
                     for dim in CASES_3D for z in (True, False))

    assert torch.autograd.gradcheck(fn, (vals,))


@pytest.mark.parametrize("include_zeros", [True, False], ids=["zeros", "no_zeros"])
def test_column_chunks_match_reference(include_zeros, monkeypatch):
    """Large enough for the column kernel's two row chunks, the boundary inside item 1 of 3;
    values with +-1000, +inf and -inf and a row of a few entries; checked, values and
    gradient, against the PyTorch-ops path (scatter_reduce / scatter_add)."""
    gen = torch.Generator().manual_seed(9)
    b, n, m, per_item = 3, 1000, 300, 100_000
    idx = torch.cat([torch.arange(b).repeat_interleave(per_item)[None],
                     torch.randint(0, n, (2, b * per_item), generator=gen) % torch.tensor([[n], [m]])])
    vals = torch.randn(b * per_item, generator=gen, dtype=torch.float64)
    vals[:50] = 1000.0
    vals[50:100] = -1000.0
    vals[100], vals[101] = float("inf"), float("-inf")
    A = torch.sparse_coo_tensor(idx, vals, (b, n, m)).coalesce()
    results = []
    for force in (False, True):
        monkeypatch.setattr(_backends, "force_torch_ops", force)
        v = A.values().clone().requires_grad_()
        out = sparse_logsumexp(torch.sparse_coo_tensor(A.indices(), v, A.shape, is_coalesced=True), 1,
                               include_zeros=include_zeros)
        (g,) = torch.autograd.grad(out, v, torch.randn(out.shape, generator=torch.Generator().manual_seed(1),
                                                        dtype=out.dtype))
        results.append((out, g))
    (out, g), (ref, gref) = results
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(g, gref, rtol=1e-12, atol=1e-12, equal_nan=True)


@pytest.mark.parametrize("n, m", [(3000, 2500), (200_000, 100_000)], ids=["row_chunks", "one_chunk"])
def test_same_bits_for_any_thread_count(n, m):
    """Above the threading thresholds of every kernel.  The column kernel cuts the rows
    into chunks when there are >= 8 entries per column ("row_chunks": 2 chunks, and with
    5 threads 2 threads per chunk), else keeps one chunk that all threads share."""
    gen = torch.Generator().manual_seed(6)
    nnz = 400000
    idx = torch.stack([torch.randint(0, n, (nnz,), generator=gen), torch.randint(0, m, (nnz,), generator=gen)])
    A = torch.sparse_coo_tensor(idx, torch.randn(nnz, generator=gen), (n, m)).coalesce()
    results = []
    old = torch.get_num_threads()
    try:
        for nt in (1, 2, 5):
            torch.set_num_threads(nt)
            vals = A.values().clone().requires_grad_()
            S = torch.sparse_coo_tensor(A.indices(), vals, A.shape, is_coalesced=True)
            outs = [sparse_logsumexp(S, dim, include_zeros=z) for dim in (0, 1, [0, 1]) for z in (True, False)]
            sum(o.sum() for o in outs).backward()
            results.append(outs + [vals.grad])
    finally:
        torch.set_num_threads(old)
    for other in results[1:]:
        for x, y in zip(results[0], other):
            assert torch.equal(x, y)


@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_inplace_edit_detected(layout):
    D = random_dense((5, 4), torch.float64, seed=7)
    make, vals = leaf_sparse(D, layout)
    out = sparse_logsumexp(make(), 1)
    with torch.no_grad():
        vals.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


def test_inputs_unchanged():
    D = random_dense((6, 5), torch.float32, seed=8)
    for layout in LAYOUTS:
        A = to_layout(D, layout)
        before = A.to_dense().clone()
        sparse_logsumexp(A, 0)
        sparse_logsumexp(A, [0, 1])
        assert torch.equal(A.to_dense(), before)


def test_errors():
    A = random_dense((4, 3), torch.float64, seed=9).to_sparse()
    with pytest.raises(NotImplementedError, match="2-D or batched 3-D"):
        sparse_logsumexp(torch.zeros(2, 2, 2, 2).to_sparse(), 1)
    with pytest.raises(NotImplementedError, match="layout"):
        sparse_logsumexp(A.to_dense(), 1)
    with pytest.raises(NotImplementedError, match="batch dimension"):
        sparse_logsumexp(torch.stack([A, A]), [0, 1])
    with pytest.raises(ValueError, match="dense dimensions"):
        sparse_logsumexp(A.to_dense().to_sparse(1), 1)
    with pytest.raises(TypeError, match="float32 and float64"):
        sparse_logsumexp(A.half(), 1)
    with pytest.raises(IndexError, match="Dimension out of range"):
        sparse_logsumexp(A, 2)
    with pytest.raises(RuntimeError, match="empty"):
        sparse_logsumexp(A, [])
    with pytest.raises(RuntimeError, match="repeated"):
        sparse_logsumexp(A, [1, -1])


def test_malformed_structure_is_a_value_error():
    ptr, vals = torch.tensor([0, 1, 3]), torch.tensor([1.0, 2.0, 3.0])
    for col in (torch.tensor([0, 1, 3]), torch.tensor([0, 2, 1]), torch.tensor([0, -1, 1])):
        A = torch.sparse_csr_tensor(ptr, col, vals, (2, 3))
        for dim in (0, 1, [0, 1]):
            with pytest.raises(ValueError, match="malformed sparse matrix"):
                sparse_logsumexp(A, dim)
    with pytest.raises(ValueError, match="malformed sparse matrix"):
        sparse_logsumexp(torch.sparse_csr_tensor(torch.tensor([0, 2, 1]), torch.tensor([0]), vals[:1], (2, 3)), 0)
    with pytest.raises(ValueError, match="malformed sparse matrix"):
        sparse_logsumexp(torch.sparse_coo_tensor(torch.tensor([[0, 2]]).t(), vals[:1], (2, 2)), 1)


def test_kernels_check_their_outputs():
    A = to_layout(random_dense((4, 3), torch.float64, seed=10), "csr")
    args = (A.crow_indices(), A.col_indices(), A.values(), 1, 4, 3, True)
    with pytest.raises(ValueError, match="at least 4 columns"):
        _C.lse_rows(*args, torch.empty(1, 3, dtype=torch.float64), None, 1)
    with pytest.raises(TypeError, match="dtype"):
        _C.lse_cols(*args, torch.empty(1, 3, dtype=torch.float32), 1)
    with pytest.raises(ValueError, match="shape"):
        _C.lse_grad(*args[:6], None, None, None, None, torch.empty(1, A._nnz() + 1, dtype=torch.float64), 1)
    with pytest.raises(ValueError, match="pairs"):
        _C.lse_grad(*args[:6], torch.zeros(1, 4, dtype=torch.float64), None, None, None,
                    torch.empty(1, A._nnz(), dtype=torch.float64), 1)


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_cuda_matches_cpu():
    D = random_dense((3, 6, 4), torch.float64, seed=11)
    A = to_layout(D, "coo")
    for dim in CASES_3D:
        for include_zeros in (True, False):
            torch.testing.assert_close(sparse_logsumexp(A.cuda(), dim, include_zeros=include_zeros).cpu(),
                                       sparse_logsumexp(A, dim, include_zeros=include_zeros))


def _tall_hypersparse(batch, layout):
    """(dense D, sparse A): 300 x 3 items with 4 entries in all, so A has more than 8
    rows per entry and more rows than columns."""
    D = torch.zeros(*batch, 300, 3, dtype=torch.float64)
    D.view(-1, 3)[[7, 120, 299, -1], [0, 2, 2, 1]] = torch.tensor([0.5, -1.0, 2.0, 1.5], dtype=torch.float64)
    return D, to_layout(D, layout)


@pytest.mark.parametrize("layout", ["coo", "coo_uncoalesced"])
@pytest.mark.parametrize("batch", [(), (2,)], ids=["2d", "batched"])
@pytest.mark.parametrize("include_zeros", [True, False], ids=["zeros", "no_zeros"])
def test_tall_hypersparse_coo_matches_dense(layout, batch, include_zeros):
    """Such an A is reduced over its columns, or whole, through its transpose (whose row
    pointers are few): values and values gradient as the dense reference."""
    D, A = _tall_hypersparse(batch, layout)
    first = len(batch)
    for dim in (first, [first, first + 1]):
        A = A.detach().requires_grad_()
        out = sparse_logsumexp(A, dim, include_zeros=include_zeros)
        ref = dense_reference(D, dim, include_zeros)
        torch.testing.assert_close(out, ref, **TOL[torch.float64])
        G = torch.linspace(-1, 1, out.numel(), dtype=torch.float64).reshape(out.shape)
        out.backward(G)
        assert A.grad.layout == torch.sparse_coo
        want = dense_grad_at_entries(D, A.detach().coalesce(),
                                     lambda X: (dense_reference(X, dim, include_zeros) * G).sum())
        torch.testing.assert_close(A.grad.to_dense()[D != 0], want, **TOL[torch.float64])


@pytest.mark.parametrize("idx", [[[7, 120, 120], [0, 2, 2]], [[7, 120, 120], [0, 2, 1]], [[120, 7], [0, 0]]],
                         ids=["repeated", "cols_unsorted", "rows_unsorted"])
def test_tall_hypersparse_coo_flagged_coalesced_out_of_order_raises(idx):
    """Reduced through its transpose (which is not flagged coalesced, so would be sorted
    and its duplicates summed), a COO built with is_coalesced=True whose entries are not
    strictly increasing is still the "malformed sparse matrix" ValueError of as_csr."""
    A = torch.sparse_coo_tensor(torch.tensor(idx), torch.ones(len(idx[0]), dtype=torch.float64), (300, 3),
                                is_coalesced=True)
    for dim in (0, [0, 1]):
        with pytest.raises(ValueError, match="malformed sparse matrix"):
            sparse_logsumexp(A, dim)


@pytest.mark.skipif(SANITIZED, reason="peak memory is not ours to measure under ASan")
def test_tall_hypersparse_coo_reductions_take_memory_of_its_entries_not_its_rows():
    """2^26 rows, 3 entries: reduced over the columns or whole, once 512 MB of row
    pointers (and 256 MB of row results for the whole matrix)."""
    r = run_child("""
        import json, resource
        n = 2 ** 26
        A = torch.sparse_coo_tensor(torch.tensor([[5, 100, n - 1], [0, 1, 3]]), torch.tensor([1.0, 2.0, 3.0]),
                                    (n, 4)).coalesce().requires_grad_()
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        cols = sparse_logsumexp(A, 0, include_zeros=False)
        whole = sparse_logsumexp(A, (0, 1), include_zeros=False)
        (cols.masked_fill(cols.isinf(), 0).sum() + whole).backward()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(json.dumps({"delta_mb": (peak - base) / 1024, "cols": cols.tolist(), "whole": whole.item()}))
    """)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["cols"] == [1.0, 2.0, float("-inf"), 3.0]
    assert abs(out["whole"] - torch.logsumexp(torch.tensor([1.0, 2.0, 3.0]), 0).item()) < 1e-6
    assert out["delta_mb"] < 64, out
