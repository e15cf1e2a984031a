"""sparse_mm on CUDA tensors, beyond the correctness grid of test_sparse_mm.py (which runs
on the device too): our CUDA kernels (csrc/cuda/), our Triton kernels (_backends/triton/)
and the torch-ops fallback that builds without nvcc or triton take, with strided
operands, float64 gradcheck, malformed structures, memory, streams, and same bits
across runs.  Every test skips without a CUDA device.

The references are test_sparse_mm's, moved to the device."""
import importlib

import pytest
import torch
from support.mm import TOL, check_against_dense, grads_of, make_case

from torchsparsegradutils import SparseCSR, _backends, _C, sparse_csr_tensor, sparse_mm
from torchsparsegradutils._core import native, structures

spgemm_ops = importlib.import_module("torchsparsegradutils._backends.torch_ops.spgemm")   # the module, not the function

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

DEV = "cuda"


@pytest.fixture(params=["cuda_kernels", "triton", "torch_ops"])
def path(request, monkeypatch):
    """Each test through our CUDA kernels, our Triton kernels (where triton imports) and
    the torch-ops fallback (our CUDA and Triton kernels both off)."""
    if request.param == "cuda_kernels" and not _C.cuda:
        pytest.skip("built without nvcc: no CUDA kernels")
    if request.param == "triton":
        pytest.importorskip("triton")
    monkeypatch.setattr(native, "cuda_enabled", request.param == "cuda_kernels")
    monkeypatch.setattr(_backends, "triton_enabled", request.param == "triton")
    return request.param


def on_device(*tensors):
    return [t.to(DEV) for t in tensors]


@pytest.mark.parametrize("layout", ["coo", "csr"])
@pytest.mark.parametrize("batched", [False, True])
def test_noncontiguous_and_expanded_operands(path, layout, batched):
    A, B, G, D = on_device(*make_case(layout, batched, 8, 6, 8, 20, torch.float64, torch.int64))
    Bt = B.transpose(-1, -2).contiguous().transpose(-1, -2)          # column-major
    check_against_dense(A, Bt, G, D, TOL[torch.float64])
    Bwide = torch.cat([B, B], -1)[..., 1: B.shape[-1] + 1]            # row stride > p, unaligned
    torch.testing.assert_close(sparse_mm(A, Bwide), D @ Bwide)
    A2 = A.detach().requires_grad_()
    sparse_mm(A2, B).sum().backward()                                # expanded (stride 0) gradient
    torch.testing.assert_close(A2.grad.to_dense(), (torch.ones_like(D @ B) @ B.transpose(-1, -2)) * (D != 0))


def long_rows_case(dtype, itype, batched):
    """A with rows and columns far longer than _core.structures.LONG_ROW (the plan's pieces, in
    sparse_mm and in A^T @ G) beside short and empty ones."""
    gen = torch.Generator().manual_seed(7)
    b, n, m = (2 if batched else 1), 700, 900
    D = torch.zeros(b, n, m, dtype=dtype)
    D[:, 3, :] = torch.randn(b, m, generator=gen, dtype=dtype)           # a row of 900 entries
    D[:, :, 5] = torch.randn(b, n, generator=gen, dtype=dtype)           # a column of 700
    D[:, 10:, :] += torch.randn(b, n - 10, m, generator=gen, dtype=dtype) * \
        (torch.rand(n - 10, m, generator=gen) < 0.01)                # the same pattern in every item
    D[:, 4, :] = 0                                                       # an empty row
    D = D if batched else D[0]
    A = D.to_sparse_csr()
    A = torch.sparse_csr_tensor(A.crow_indices().to(itype), A.col_indices().to(itype), A.values(), D.shape)
    B = torch.randn(*D.shape[:-2], m, 33, generator=gen, dtype=dtype)
    G = torch.randn(*D.shape[:-2], n, 33, generator=gen, dtype=dtype)
    return on_device(A, B, G, D)


@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.parametrize("itype", [torch.int32, torch.int64])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_long_rows_and_columns(path, batched, itype, dtype):
    A, B, G, D = long_rows_case(dtype, itype, batched)
    check_against_dense(A, B, G, D, TOL[dtype])


def skewed_case(batched, itype, p):
    """A power-law-like A: hub rows and columns, one row past LONG_ROW, many short rows,
    about a third of the rows empty."""
    gen = torch.Generator().manual_seed(11)
    b, n, m, draws = (2 if batched else 1), 600, 500, 3000
    w = torch.rand(n, generator=gen).pow(4) + 1e-3
    w[torch.rand(n, generator=gen) < 0.3] = 0                           # empty rows
    rows = torch.multinomial(w, draws, replacement=True, generator=gen)
    cols = torch.multinomial(torch.rand(m, generator=gen).pow(4) + 1e-3, draws, replacement=True, generator=gen)
    D = torch.zeros(b, n, m)
    D[:, rows, cols] = torch.randn(b, draws, generator=gen)               # the same pattern in every item
    D[:, 7, :300] = torch.randn(b, 300, generator=gen)                 # 300 > LONG_ROW entries
    D = D if batched else D[0]
    A = D.to_sparse_csr()
    A = torch.sparse_csr_tensor(A.crow_indices().to(itype), A.col_indices().to(itype), A.values(), D.shape)
    B = torch.randn(*D.shape[:-2], m, p, generator=gen)
    G = torch.randn(*D.shape[:-2], n, p, generator=gen)
    return on_device(A, B, G, D)


@pytest.mark.parametrize("p", [1, 16, 64, 300])
@pytest.mark.parametrize("itype", [torch.int32, torch.int64])
@pytest.mark.parametrize("batched", [False, True])
def test_row_order_same_bits(batched, itype, p, monkeypatch):
    """The plan's row order (rows longest first, where lengths vary) changes only
    which group takes a row: the product and both gradients are bitwise those of the
    natural order, and match the dense reference."""
    if not _C.cuda:
        pytest.skip("built without nvcc: no CUDA kernels")
    monkeypatch.setattr(native, "cuda_enabled", True)
    monkeypatch.setattr(_backends, "triton_enabled", False)
    A, B, G, D = skewed_case(batched, itype, p)
    results = {}
    for cv in (0.0, float("inf")):
        monkeypatch.setattr(structures, "ROW_ORDER_CV", cv)
        Ak = torch.sparse_csr_tensor(A.crow_indices().clone(), A.col_indices().clone(), A.values(), A.shape)
        results[cv] = (Ak, grads_of(Ak, B, G))
        crow = A.crow_indices()
        if batched:                                                     # the global pointers the plan is made of
            crow = torch.cat([(crow[:, :-1] + crow[:, -1:] * torch.arange(2, device=DEV)[:, None]).reshape(-1),
                              2 * crow[0, -1:]])
        plan = structures._plan(crow)
        assert plan is not None and plan.long_rows.numel() == (2 if batched else 1)
        assert (plan.order is not None) == (cv == 0.0)
    ordered, natural = results[0.0][1], results[float("inf")][1]
    assert all(torch.equal(x, y) for x, y in zip(ordered, natural))
    check_against_dense(results[0.0][0], B, G, D, TOL[torch.float32])


@pytest.mark.parametrize("layout", ["coo", "coo_uncoalesced", "csr"])
def test_same_bits_across_runs(path, layout):
    """Forward, grad_A and grad_B are bitwise equal over repeated runs (no atomics),
    long rows included."""
    if path == "torch_ops":
        pytest.skip("PyTorch's sparse CUDA products sum with atomics: not reproducible bit for bit")
    if layout == "csr":
        A, B, G, _ = long_rows_case(torch.float32, torch.int64, False)
    else:
        A, B, G, _ = on_device(*make_case(layout, True, 300, 200, 64, 12000, torch.float32, torch.int64))
    first = grads_of(A, B, G)
    for _ in range(3):
        again = grads_of(A, B, G)
        assert all(torch.equal(x, y) for x, y in zip(first, again))


@pytest.mark.parametrize("layout", ["coo", "csr"])
@pytest.mark.parametrize("batched", [False, True])
def test_gradcheck_float64(path, layout, batched):
    A, B, _, _ = on_device(*make_case(layout, batched, 6, 5, 3, 12, torch.float64, torch.int64))
    if layout == "csr":
        vals = A.values().detach().clone().requires_grad_()
        crow, col = A.crow_indices(), A.col_indices()
        fn = lambda v, B: sparse_mm(sparse_csr_tensor(crow, col, v, A.shape), B)  # noqa: E731
    else:
        A = A.coalesce()
        vals = A.values().detach().clone().requires_grad_()
        idx = A.indices()
        fn = lambda v, B: sparse_mm(torch.sparse_coo_tensor(idx, v, A.shape), B)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (vals, B.detach().clone().requires_grad_()))


def test_sparse_csr_operand(path):
    """The compile-friendly operand (custom operators) on the device."""
    A, B, G, D = on_device(*make_case("csr", False, 30, 40, 17, 200, torch.float64, torch.int64))
    w = A.values().clone().requires_grad_()
    C = sparse_mm(SparseCSR(A.crow_indices(), A.col_indices(), w, tuple(A.shape)), B)
    C.backward(G)
    torch.testing.assert_close(C, D @ B)
    torch.testing.assert_close(w.grad, (G @ B.T)[D != 0])


def test_side_stream(path):
    """The kernels run on PyTorch's current stream."""
    A, B, _, D = on_device(*make_case("csr", True, 300, 200, 64, 12000, torch.float32, torch.int64))
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        C = sparse_mm(A, B)
    torch.cuda.current_stream().wait_stream(s)
    torch.testing.assert_close(C, D @ B, **TOL[torch.float32])


def test_empty_sizes(path):
    for n, m, p in [(0, 4, 3), (4, 0, 3), (4, 3, 0), (0, 0, 0), (3, 3, 2)]:
        for A in (torch.zeros(n, m).to_sparse(), torch.zeros(n, m).to_sparse_csr()):
            A = A.to(DEV).requires_grad_()
            B = torch.randn(m, p, device=DEV, requires_grad=True)
            C = sparse_mm(A, B)
            assert C.shape == (n, p) and not C.any()
            C.sum().backward()
            assert B.grad.shape == B.shape and not B.grad.any()
            assert A.grad.shape == A.shape


MALFORMED = [
    # crow, col, message
    ([0, 2, 3], [0, 5, 1], "column index"),          # column out of range
    ([0, 2, 3], [1, 0, 1], "sorted and unique"),     # unsorted columns in a row
    ([0, 3, 2], [0, 1, 1], "row pointers"),          # decreasing pointers
    ([0, 2, 4], [0, 1, 1], "row pointers"),          # last pointer past nnz
    ([1, 2, 3], [0, 1, 1], "row pointers"),          # first pointer not 0
]


@pytest.mark.parametrize("crow,col,message", MALFORMED)
def test_malformed_csr_raises(crow, col, message):
    if not _C.cuda:
        pytest.skip("the torch-ops fallback relies on torch's own checks")
    crow, col = torch.tensor(crow, device=DEV), torch.tensor(col, device=DEV)
    A = torch.sparse_csr_tensor(crow, col, torch.ones(col.numel(), device=DEV), (2, 3), check_invariants=False)
    with pytest.raises(ValueError, match=message):
        sparse_mm(A, torch.ones(3, 2, device=DEV))


def test_malformed_batched_csr_end_raises():
    if not _C.cuda:
        pytest.skip("the torch-ops fallback relies on torch's own checks")
    crow = torch.tensor([[0, 1, 2], [0, 1, 1]], device=DEV)       # item 1 ends at 1, not nnz = 2
    col = torch.tensor([[0, 1], [0, 1]], device=DEV)
    A = torch.sparse_csr_tensor(crow, col, torch.ones(2, 2, device=DEV), (2, 2, 3), check_invariants=False)
    with pytest.raises(ValueError, match="row pointers"):
        sparse_mm(A, torch.ones(2, 3, 2, device=DEV))


@pytest.mark.parametrize("coalesced", [False, True])
def test_malformed_coo_raises(path, coalesced):
    idx = torch.tensor([[0, 1, 5], [0, 2, 1]], device=DEV)         # row 5 of 2
    A = torch.sparse_coo_tensor(idx, torch.ones(3, device=DEV), (2, 3), is_coalesced=coalesced,
                                check_invariants=False)
    with pytest.raises(ValueError, match="malformed sparse matrix"):
        sparse_mm(A, torch.ones(3, 2, device=DEV))


def test_coo_flagged_coalesced_but_unsorted_raises():
    """On the device (our kernels, or the torch-ops checks without them), as on the CPU."""
    for idx, match in (([[1, 0], [0, 2]], "not sorted by row"),
                       ([[0, 0], [2, 2]], "sorted and unique within each row")):
        A = torch.sparse_coo_tensor(torch.tensor(idx, device=DEV), torch.ones(2, device=DEV), (2, 3),
                                    is_coalesced=True)
        for B in (torch.ones(3, 2, device=DEV), torch.ones(3, 2, device=DEV, requires_grad=True)):
            with pytest.raises(ValueError, match=match):
                sparse_mm(A, B)


def test_structure_checked_once_per_adjacency():
    """A training loop reuses its adjacency: the structure is checked (and the device
    waited for) once, not every step; a new index tensor is checked again."""
    if not _C.cuda:
        pytest.skip("no CUDA kernels")
    A, B, G, _ = on_device(*make_case("coo_unflagged", False, 50, 40, 8, 300, torch.float32, torch.int64))
    A.requires_grad_()
    grads_of(A, B, G)
    calls = []
    real = _C.cuda_coo_check
    try:
        _C.cuda_coo_check = lambda *a: calls.append(1) or real(*a)
        for _ in range(3):
            grads_of(A, B, G)
        assert calls == []
        A2 = torch.sparse_coo_tensor(A._indices().clone(), A._values(), A.shape)
        grads_of(A2, B, G)
        assert calls == [1]
    finally:
        _C.cuda_coo_check = real


def reference_transpose(ptr, col, b, n, m):
    """The transpose pattern (tptr, trow, tperm) of global CSR arrays, by a stable sort on
    the CPU (int64)."""
    ptr, col = ptr.cpu().long(), col.cpu().long()
    rows = torch.repeat_interleave(torch.arange(ptr.numel() - 1), ptr.diff())
    item = rows // n if n else rows
    key = item * m + col
    tperm = torch.argsort(key, stable=True)
    tptr = torch.cat([torch.zeros(1, dtype=torch.int64), torch.bincount(key, minlength=b * m).cumsum(0)])
    return tptr, (rows - item * n)[tperm], tperm, rows


def transpose_cases():
    """(ptr, col, b, n, m) on the device, global layout: long rows and columns, empty rows,
    batches, both index types, a power-law pattern, no entries, no rows."""
    for batched in (False, True):
        for itype in (torch.int32, torch.int64):
            A = long_rows_case(torch.float32, itype, batched)[0]
            b, n, m = (A.shape[0] if batched else 1), A.shape[-2], A.shape[-1]
            nnz = A.col_indices().shape[-1]
            offs = (torch.arange(b, device=DEV) * nnz).unsqueeze(1).to(itype)
            ptr = torch.cat([(A.crow_indices().reshape(b, -1)[:, :-1] + offs).reshape(-1),
                             torch.tensor([b * nnz], dtype=itype, device=DEV)])
            yield ptr, A.col_indices().reshape(-1), b, n, m
    gen = torch.Generator().manual_seed(3)
    w = torch.rand(5000, generator=gen).pow(4) + 1e-3
    idx = torch.stack([torch.multinomial(w, 40000, True, generator=gen), torch.multinomial(w, 40000, True, generator=gen)])
    A = torch.sparse_coo_tensor(idx, torch.ones(40000), (5000, 5000)).coalesce().to_sparse_csr().to(DEV)
    yield A.crow_indices(), A.col_indices(), 1, 5000, 5000
    yield torch.zeros(8, dtype=torch.int64, device=DEV), torch.zeros(0, dtype=torch.int64, device=DEV), 1, 7, 9
    yield torch.zeros(1, dtype=torch.int64, device=DEV), torch.zeros(0, dtype=torch.int64, device=DEV), 3, 0, 4


@pytest.mark.parametrize("int32_limit", [2 ** 31 - 1, 0])
def test_transpose_pattern_and_entry_rows(monkeypatch, int32_limit):
    """A structure's transpose pattern (csrc/cuda/transpose.cu; int64 by PyTorch's sort above
    the int32 limit, forced here by a limit of 0) and its entry rows (csrc/cuda/entry_rows.cu)
    equal a stable sort's on the CPU, element for element."""
    if not _C.cuda:
        pytest.skip("no CUDA kernels")
    monkeypatch.setattr(structures, "INT32_PATTERN_LIMIT", int32_limit)
    for ptr, col, b, n, m in transpose_cases():
        s = structures.CudaStructure(ptr, col, b, n, m)
        tptr, trow, tperm, t = s.transpose()
        assert tptr.dtype == trow.dtype == tperm.dtype == (torch.int32 if int32_limit else torch.int64)
        want = reference_transpose(ptr, col, b, n, m)
        for got, ref in zip((tptr, trow, tperm), want):
            assert torch.equal(got.cpu().long(), ref)
        assert (t.n, t.m, t.batch) == (m, n, b)
        assert s.rows().dtype == col.dtype and torch.equal(s.rows().cpu().long(), want[3])


def test_columns_increase_on_the_device(monkeypatch):
    """Whether a product's rows have increasing columns (the sort after PyTorch's CSR @ CSR):
    our device check and the torch-ops pass agree, a descent across two rows allowed."""
    ptr = torch.tensor([0, 2, 2, 5, 6], device=DEV)
    cases = {(0, 3, 1, 2, 4, 0): True, (3, 0, 1, 2, 4, 0): False, (0, 3, 1, 4, 2, 0): False,
             (0, 3, 1, 2, 2, 1): False, (4, 3, 0, 1, 2, 3): False}
    for enabled in ([True, False] if _C.cuda else [False]):
        monkeypatch.setattr(native, "cuda_enabled", enabled)
        for col, increase in cases.items():
            assert spgemm_ops._columns_increase(ptr, torch.tensor(col, device=DEV), 5) is increase, (enabled, col)


@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_no_densifying(path, layout):
    """n = m = 200k (dense A would take 160 GB): forward and backward allocate about
    the outputs and the pattern's own arrays, nothing of size n x m or nnz x p.
    Measured on the first step (structure derived) and on the next (reused)."""
    n, nnz, p = 200_000, 2_000_000, 64
    gen = torch.Generator(device=DEV).manual_seed(3)
    idx = torch.randint(0, n, (2, nnz), device=DEV, generator=gen)
    A = torch.sparse_coo_tensor(idx, torch.randn(nnz, device=DEV, generator=gen), (n, n)).coalesce()
    if layout == "csr":
        A = A.to_sparse_csr()
    A.requires_grad_()
    nnz = A._nnz()
    B = torch.randn(n, p, device=DEV, generator=gen, requires_grad=True)
    G = torch.randn(n, p, device=DEV, generator=gen)

    def step_extra():
        A.grad = B.grad = None
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        sparse_mm(A, B).backward(G)
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base

    first, again = step_extra(), step_extra()
    necessary = 2 * n * p * 4 + nnz * 4                       # C, grad_B, grad_A's values
    pattern = nnz * 8 * 4 + (n + 1) * 8 * 2                   # index arrays: transposed, rows, pointers
    assert first < necessary + pattern + nnz * p * 4 // 2, (first, necessary, pattern)
    if path == "cuda_kernels":
        # a CSR leaf also costs a private copy of its values (backward must not read
        # edited ones) and autograd's copy of the CSR gradient it stores in A.grad
        kept = nnz * 4 + (nnz * 12 + (n + 1) * 8 if layout == "csr" else 0)
        assert again <= 1.2 * (necessary + kept), (again, necessary, kept)


def test_compiled_sparse_csr_operand(path):
    """torch.compile(fullgraph=True) of sparse_mm on a SparseCSR on the device, with
    backward, gives the eager result."""
    A, B, G, D = on_device(*make_case("csr", True, 30, 40, 17, 200, torch.float32, torch.int64))
    # the shape read outside f: Dynamo takes no sparse tensor (A) into the compiled function
    crow, col, shape = A.crow_indices(), A.col_indices(), tuple(A.shape)

    def f(w, B):
        return sparse_mm(SparseCSR(crow, col, w, shape), B)

    results = []
    for fn in (f, torch.compile(f, fullgraph=True)):
        w, Bl = A.values().clone().requires_grad_(), B.clone().requires_grad_()
        C = fn(w, Bl)
        C.backward(G)
        results.append((C.detach(), w.grad, Bl.grad))
    for got, want in zip(*results):
        torch.testing.assert_close(got, want, **TOL[torch.float32])
    torch.testing.assert_close(results[0][0], D @ B, **TOL[torch.float32])
