"""The C extension's glue: tensor intake (DLPack exchange table and capsules, the registered
exporter), the private entry points' own argument checks, reference counts, the structure
helpers (row pointers, transpose pattern) for any thread count, and the 16-bit conversions
against PyTorch's on every bit pattern."""
import os

import pytest
import torch
from support.checks import num_threads
from support.children import run_child
from support.operands import seeded
from support.mm import HALF, make_case

import torchsparsegradutils as tsgu
from torchsparsegradutils import _backends, sparse_mm


def test_private_kernels_check_their_arguments():
    """The C entry points validate shapes, dtypes and devices themselves."""
    from torchsparsegradutils import _C
    ptr, col, val = torch.tensor([0, 1, 2]), torch.tensor([0, 1]), torch.ones(2)
    B, C = torch.ones(3, 2), torch.empty(2, 2)
    _C.spmm(ptr, col, val, 1, 2, 3, B, C, 1)
    torch.testing.assert_close(C, torch.ones(2, 2))
    out = torch.empty(3, 2)
    _C.spmm_t(ptr, col, val, 1, 2, 3, C, out, 1)
    torch.testing.assert_close(out, torch.tensor([[1.0, 1.0], [1.0, 1.0], [0.0, 0.0]]))
    with pytest.raises(TypeError, match="int32 or int64"):
        _C.spmm(ptr.float(), col, val, 1, 2, 3, B, C, 1)
    with pytest.raises(TypeError, match="same dtype"):
        _C.spmm(ptr, col.int(), val, 1, 2, 3, B, C, 1)
    with pytest.raises(ValueError, match="one value per stored entry"):
        _C.spmm(ptr, col, torch.ones(3), 1, 2, 3, B, C, 1)
    with pytest.raises(ValueError, match="shape"):
        _C.spmm(ptr, col, val, 1, 2, 3, torch.ones(4, 2), C, 1)
    with pytest.raises(ValueError, match="grad must have shape"):
        _C.spmm_t(ptr, col, val, 1, 2, 3, torch.ones(3, 2), out, 1)
    with pytest.raises(TypeError, match="dtype of the sparse values"):
        _C.spmm(ptr, col, val, 1, 2, 3, B.double(), C, 1)
    with pytest.raises(TypeError, match="dtype of the sparse values"):
        _C.sddmm(ptr, col, 1, 2, 3, C.half(), B.to(torch.bfloat16), torch.empty(2, dtype=torch.bfloat16), 1)
    with pytest.raises(TypeError, match="values must be float16, bfloat16, float32 or float64"):
        _C.spmm(ptr, col, val.to(torch.int16), 1, 2, 3, B, C, 1)
    with pytest.raises(TypeError, match="values must be float32 or float64"):    # 16-bit only for sparse_mm
        _C.trisolve(ptr, col, val.half(), 1, 2, torch.ones(2, 2).half(), False, False, False, 1)
    with pytest.raises(ValueError, match="unit stride"):
        _C.spmm(ptr, col, val, 1, 2, 3, B, torch.empty(2, 4)[:, ::2], 1)
    with pytest.raises(ValueError, match="out must be contiguous"):
        _C.spmm(ptr, col, val, 1, 2, 3, B, torch.empty(4, 2)[::2], 1)
    with pytest.raises(ValueError, match="must have shape"):
        _C.spmm(ptr, col, val, 2, 2, 3, B, C, 1)
    with pytest.raises(ValueError, match="malformed sparse matrix: a column index"):
        _C.spmm_t(ptr, torch.tensor([0, 3]), val, 1, 2, 3, C, out, 1)
    with pytest.raises(ValueError, match="contiguous"):
        _C.sddmm(torch.tensor([0, 2, 4])[::1], torch.tensor([0, 1, 2, 3])[::2], 1, 2, 3, C, B, torch.empty(2), 1)
    with pytest.raises(ValueError, match="indices must be int64"):
        _C.coo_row_ptr(torch.zeros(3, 2, dtype=torch.int64), (2, 2), None, 1)
    with pytest.raises(ValueError, match="sizes"):
        _C.coo_row_ptr(torch.zeros(2, 2, dtype=torch.int64), (2,), None, 1)


def test_spmm_coo_entry_point():
    """_C.spmm_coo: the product of COO arrays in one call, False (out untouched) where
    the caller must take the view instead, errors for malformed input."""
    from torchsparsegradutils import _C
    D = torch.tensor([[1.0, 0.0, 2.0], [0.0, 0.0, 0.0], [0.0, 3.0, 4.0]])
    A = D.to_sparse().coalesce()
    idx, val, B = A.indices(), A.values(), torch.randn(3, 2)

    def run(idx, val, sizes=(3, 3), rows_per_entry=8, out=None):
        out = torch.full((sizes[0], 2), 7.0) if out is None else out
        return _C.spmm_coo(idx, val, sizes, B, out, rows_per_entry, 1), out

    done, C = run(idx, val)
    assert done is True
    torch.testing.assert_close(C, D @ B)
    for args, kwargs in [((idx[:, [2, 3, 0, 1]], val), {}),          # rows out of order
                         ((idx[:, [1, 0, 2, 3]], val), {}),          # columns out of order in a row
                         ((idx[:, [0, 0, 1, 2, 3]], val.repeat(2)[:5]), {}),   # a repeated entry
                         ((idx.t().contiguous().t(), val), {}),      # index rows not unit-stride
                         ((idx, val), dict(rows_per_entry=1, sizes=(30, 3)))]:   # hypersparse
        done, C = run(*args, **kwargs)
        assert done is False and bool((C == 7.0).all())
    for args, kwargs, exc, match in [
            ((idx.clamp(max=3) + (idx == 2), val), {}, ValueError, "negative or not less"),
            ((idx, val[:3]), {}, ValueError, "one value per entry"),
            ((idx.int(), val), {}, ValueError, "int64 of shape"),
            ((idx, val.long()), {}, TypeError, "values must be"),
            ((idx, val), dict(sizes=(3,)), ValueError, "tuple of 2 or 3"),
            ((idx, val), dict(sizes=(3, -1)), ValueError, "non-negative"),
            ((idx, val), dict(rows_per_entry=0), ValueError, "rows_per_entry"),
            ((idx, val), dict(out=torch.empty(3, 4)[:, ::2]), ValueError, "unit stride"),
            ((idx, val[::1].repeat(2)[::2]), {}, ValueError, "contiguous")]:
        with pytest.raises(exc, match=match):
            run(*args, **kwargs)


@pytest.mark.parametrize("use_table", [True, False])
def test_no_grad_calls_keep_reference_counts(use_table):
    """The no-grad paths (COO, CSR, SparseCSR; borrowed or capsule intake) hold no
    reference to any input after the call."""
    import gc
    import sys
    from torchsparsegradutils import _C
    A, B, _, _ = make_case("coo", False, 6, 5, 3, 12, torch.float32, torch.int64)
    csr = A.to_sparse_csr()
    S = tsgu.SparseCSR(csr.crow_indices(), csr.col_indices(), csr.values(), tuple(csr.shape))
    watched = [A, csr, B, *S[:3]]
    try:
        _C.use_exchange_api(torch.Tensor if use_table else None)
        for _ in range(3):
            for X in (A, csr, S):
                sparse_mm(X, B)
        gc.collect()
        refs = [sys.getrefcount(t) for t in watched]
        for _ in range(200):
            for X in (A, csr, S):
                sparse_mm(X, B)
        gc.collect()
        assert [sys.getrefcount(t) for t in watched] == refs
    finally:
        _C.use_exchange_api(torch.Tensor)


def test_tensor_intake_through_the_exchange_table_or_capsules():
    """The C entry points borrow tensors through PyTorch's DLPack C exchange table where
    it has one, else take DLPack capsules: both give the same results and errors."""
    from torchsparsegradutils import _C
    has_table = hasattr(torch.Tensor, "__dlpack_c_exchange_api__")
    A, B, G, D = make_case("coo", False, 6, 5, 3, 12, torch.float64, torch.int64)
    expected = D @ B
    try:
        for use_table in (True, False):
            assert _C.use_exchange_api(torch.Tensor if use_table else None) is (use_table and has_table)
            torch.testing.assert_close(sparse_mm(A, B), expected)
            torch.testing.assert_close(sparse_mm(A.to_sparse_csr(), B), expected)
            with pytest.raises(ValueError, match="must have shape"):
                _C.spmm(*(torch.tensor(x) for x in ([0, 1, 2], [0, 1], [1.0, 1.0])), 2, 2, 3,
                        torch.ones(3, 2), torch.empty(2, 2), 1)
            with pytest.raises((TypeError, RuntimeError, AttributeError)):   # not a tensor
                _C.spmm([0, 1, 2], torch.tensor([0, 1]), torch.ones(2), 1, 2, 3, torch.ones(3, 2),
                        torch.empty(2, 2), 1)
        assert _C.use_exchange_api(int) is False            # a type without the table: capsules
        torch.testing.assert_close(sparse_mm(A, B), expected)
        with pytest.raises(TypeError, match="a type or None"):
            _C.use_exchange_api(torch.ones(1))
    finally:
        _C.use_exchange_api(torch.Tensor)


def test_kept_empty_entry_point():
    """_C.kept_empty hands out an uninitialised tensor of the shape and DLPack type asked
    for, on a block kept for reuse: bad shapes and types are refused with a ValueError; a
    capsule dropped before a consumer takes it gives its block back (release_kept then
    frees it), as the tensor's deleter does; a block too large to keep is freed at once."""
    from torchsparsegradutils import _C
    for shape, code, bits in [((), 2, 32), ((1, 2, 3), 2, 32), ((-1,), 2, 32), ((2**62,), 2, 64), ((4,), 1, 32),
                              ((4,), 2, 8), ((4,), 3, 32)]:
        with pytest.raises(ValueError):
            _C.kept_empty(shape, code, bits)
    with pytest.raises(TypeError):
        _C.kept_empty((2.5,), 2, 32)
    _C.release_kept()
    for shape, code, bits, dtype in [((3, 5), 0, 64, torch.int64), ((7,), 0, 32, torch.int32),
                                     ((0,), 2, 16, torch.float16), ((4, 2), 4, 16, torch.bfloat16)]:
        t = torch.utils.dlpack.from_dlpack(_C.kept_empty(shape, code, bits))
        assert t.shape == shape and t.dtype == dtype and t.is_contiguous()
        t.fill_(1)
        del t
    assert _C.release_kept() == 4 * (2 << 20)                  # each block 2 MiB, kept once freed
    capsule = _C.kept_empty((1 << 20,), 2, 64)                 # 8 MiB, never consumed
    del capsule
    assert _C.release_kept() == 8 << 20 and _C.release_kept() == 0
    t = torch.utils.dlpack.from_dlpack(_C.kept_empty((40 << 20,), 2, 64))   # 320 MiB: past what is kept
    t[-1] = 1.0
    del t
    assert _C.release_kept() == 0


_THREADED_PRODUCTS = """
import hashlib
gen = torch.Generator().manual_seed(5)
n = 60_000
A = torch.sparse_coo_tensor(torch.stack([torch.arange(n).repeat_interleave(6), torch.randint(0, n, (6 * n,), generator=gen)]),
                            torch.randn(6 * n, generator=gen), (n, n)).coalesce().to_sparse_csr()
B = torch.randn(n, 32, generator=gen)

def digest():
    # a product, a mean and a sparse @ sparse product, each on several threads; hashed
    # from NumPy's view of the bits (no PyTorch op: a forked child cannot run one)
    torch.set_num_threads(3)
    S = tsgu.sparse_mm(A, A)
    arrays = [tsgu.sparse_mm(A, B), tsgu.sparse_mm(A, B, reduce="mean"), S.col_indices(), S.values()]
    return hashlib.sha256(b"".join(a.numpy().tobytes() for a in arrays)).hexdigest()
"""


@pytest.mark.skipif("OpenMP" not in torch.__config__.parallel_info(), reason="PyTorch built without OpenMP")
def test_kernels_run_on_the_openmp_team_on_threads_of_their_own_and_after_fork():
    """The kernels' threads are PyTorch's OpenMP team (_C.threads() == "openmp"), or with
    TSGU_OPENMP=0 threads of their own ("own"), and in a child forked after the module
    loaded also their own (GNU OpenMP's team is the parent's: a team there never starts):
    the same bits all three ways, on three threads."""
    ns = {"torch": torch, "tsgu": tsgu}
    exec(_THREADED_PRODUCTS, ns)
    with num_threads(3):
        want = ns["digest"]()
        assert tsgu._C.threads() == "openmp"
        r = run_child(_THREADED_PRODUCTS + "print(tsgu._C.threads(), digest())", env={"TSGU_OPENMP": "0"})
        assert r.returncode == 0 and r.stdout.split() == ["own", want], r.stdout + r.stderr[-2000:]
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:                                  # the child: its answer (or error) down the pipe, then out
            code = 1
            try:
                import signal
                signal.alarm(120)                     # a hang ends the child (SIGALRM), not the suite
                os.write(write, f"{tsgu._C.threads()} {ns['digest']()}".encode())
                code = 0
            except BaseException as e:
                os.write(write, f"error: {e!r}".encode())
            finally:
                os._exit(code)
        os.close(write)
        with os.fdopen(read) as pipe:
            got = pipe.read().split()
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0 and got == ["own", want], got


def test_version_and_exports():
    assert tsgu.__version__
    assert set(tsgu.__all__) >= {"sparse_mm", "sparse_csr_tensor"}
    assert os.path.basename(tsgu._C.__file__).startswith("_C")


@pytest.mark.parametrize("itype", [torch.int32, torch.int64])
@pytest.mark.parametrize("batched", [False, True])
def test_transpose_pattern_matches_stable_sort_for_any_thread_count(itype, batched):
    """The grad_B transpose (parallel counting sort) equals a stable sort by column."""
    from torchsparsegradutils._core.intake import as_csr
    # large enough that two threads each take a chunk (cost > 2 * 2**18)
    A, _, _, D = make_case("csr", batched, 800, 700, 1, 540000, torch.float32, itype, seed=9)
    view = as_csr(A)
    b, n, m = view.batch, view.nrows, view.ncols
    rows = torch.repeat_interleave(torch.arange(b * n), (lambda c: c[..., 1:] - c[..., :-1])(
        view.ptr).reshape(-1))
    key = (rows // n) * m + view.col.reshape(-1).long()
    order = torch.sort(key, stable=True).indices
    expect_ptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.bincount(key, minlength=b * m).cumsum(0)])
    old = torch.get_num_threads()
    try:
        for t in (1, 2):
            torch.set_num_threads(t)
            tptr, trow, tperm = _backends.cpu.transpose_pattern(view)
            assert tptr.dtype == trow.dtype == tperm.dtype == itype
            assert torch.equal(tptr.long(), expect_ptr)
            assert torch.equal(tperm.long(), order)
            assert torch.equal(trow.long(), rows[order] % n)
    finally:
        torch.set_num_threads(old)


def test_softmax_coo_entry_point():
    """_C.softmax_coo: the row pointers and the softmax of COO arrays in one call; False
    where the caller must take the view instead (entries not sorted and unique, not
    flagged coalesced), the intake's errors where they are flagged; errors for
    malformed input."""
    from torchsparsegradutils import _C
    D = torch.tensor([[1.0, 0.0, 2.0], [0.0, 0.0, 0.0], [0.0, 3.0, 4.0]], dtype=torch.float64)
    A = D.to_sparse().coalesce()
    idx, val = A.indices(), A.values()[:, None]

    def run(idx, val, coalesced=True, sizes=(3, 3), log=False, ptr=None, out=None):
        ptr = torch.empty(sizes[0] + 1, dtype=torch.int64) if ptr is None else ptr
        out = torch.empty(idx.shape[1], 1, dtype=torch.float64) if out is None else out
        return _C.softmax_coo(idx, val, sizes, coalesced, log, ptr, out, 1), ptr, out

    for log in (False, True):
        done, ptr, y = run(idx, val, log=log)
        assert done is True and torch.equal(ptr, torch.tensor([0, 2, 2, 4]))
        want = torch.sparse.log_softmax(A, 1) if log else torch.sparse.softmax(A, 1)
        torch.testing.assert_close(y[:, 0], want.values())
    for bad in (idx[:, [2, 3, 0, 1]], idx[:, [1, 0, 2, 3]], idx[:, [0, 0, 1, 2]]):   # rows, columns, a repeat
        assert run(bad, val, coalesced=False)[0] is False
        with pytest.raises(ValueError, match="malformed sparse matrix"):
            run(bad, val)
    for args, kwargs, exc, match in [
            ((idx.clamp(max=3) + (idx == 2), val), {}, ValueError, "column index 3 at entry 1 is out of range"),
            ((idx, val[:3]), {}, ValueError, "shape"),
            ((idx.int(), val), {}, ValueError, "int64 of shape"),
            ((idx.t().contiguous().t(), val), {}, ValueError, "unit-stride rows"),
            ((idx, val.long()), {}, TypeError, "values must be"),
            ((idx, val), dict(out=torch.empty(4, 1)), TypeError, "out must have the dtype"),
            ((idx, val), dict(sizes=(3,)), ValueError, "tuple of 2 or 3"),
            ((idx, val), dict(ptr=torch.empty(3, dtype=torch.int64)), ValueError, "row_ptr must be int64 with 4"),
            ((idx, val), dict(out=torch.empty(4, 2, dtype=torch.float64)[:, :1]), ValueError, "contiguous")]:
        with pytest.raises(exc, match=match):
            run(*args, **kwargs)


@pytest.mark.parametrize("batched", [False, True])
def test_coo_row_pointers_for_any_thread_count(batched):
    """The parallel COO -> row pointer pass equals a bincount, with empty first/last rows."""
    from torchsparsegradutils import _C
    g = torch.Generator().manual_seed(11)
    sizes = (3, 4000, 500) if batched else (12000, 500)
    nnz = 700_000                                   # > 2 * 2**18 (after repeats dropped): two threads take a chunk each
    b, n, m = (sizes if batched else (1,) + sizes)
    rows = torch.randint(1, n - 1, (nnz,), generator=g)          # rows 0 and n-1 stay empty
    items = torch.randint(0, b, (nnz,), generator=g)
    cols = torch.randint(0, m, (nnz,), generator=g)
    entry = torch.unique((items * n + rows) * m + cols)            # sorted by (row, col), no repeats
    nnz, key = entry.numel(), entry // m                           # (the pass requires a coalesced order)
    idx = [key // n, key % n] if batched else [key]
    idx = torch.stack(idx + [entry % m]).contiguous()
    expect = torch.cat([torch.zeros(1, dtype=torch.long), torch.bincount(key, minlength=b * n).cumsum(0)])
    strided = torch.cat([idx, idx], 1)[:, :nnz]      # rows further apart than nnz, as after coalesce()
    assert not strided.is_contiguous()
    for t in (1, 2):
        for ix in (idx, strided):
            ptr = torch.full((b * n + 1,), -7, dtype=torch.long)
            _C.coo_row_ptr(ix, sizes, ptr, t)
            assert torch.equal(ptr, expect)
    bad = idx.clone()
    bad[-2, nnz // 2 + 1] = bad[-2, nnz // 2] - 1 if bad[-2, nnz // 2] > 0 else n   # unsorted or out of range
    with pytest.raises(ValueError, match="malformed sparse matrix"):
        _C.coo_row_ptr(bad, sizes, torch.empty(b * n + 1, dtype=torch.long), 2)


def _same_as_torch(got, want):
    """Equal bits, except that NaN only has to be NaN and zero only zero (the
    kernels' sums start at +0, so -0 + -0 comes out +0)."""
    nan = torch.isnan(want.float())
    assert torch.equal(torch.isnan(got.float()), nan)
    zero = want.float() == 0
    assert torch.equal(got.float() == 0, zero)
    keep = ~(nan | zero)
    assert torch.equal(got.view(torch.int16)[keep], want.view(torch.int16)[keep])


def _all_patterns(dtype):
    return torch.arange(-2 ** 15, 2 ** 15, dtype=torch.int32).to(torch.int16).view(dtype)


@pytest.mark.parametrize("dtype", HALF)
def test_half_conversions_of_every_bit_pattern(dtype):
    """Every one of the 65536 values x, widened and summed with y in float32, then
    rounded back, as torch does it: y = 0 (x itself), and y = -x's unit in the last
    place times 1/2 (a tie: rounds to even), 1/4 and 3/4 (to nearest), so a wrong
    widening or rounding of any pattern shows.  Through sparse_mm: A = [[1, 1]]
    and B = [x; y], so C = round(float(x) + float(y)) (exact in float32)."""
    x = _all_patterns(dtype)
    nxt = (x.view(torch.int16).to(torch.int32) + 1).to(torch.int16).view(dtype)   # next away from 0
    ulp = (nxt.float() - x.float()).abs()
    ones = torch.ones(2, dtype=dtype)
    A = torch.sparse_csr_tensor(torch.tensor([0, 2]), torch.tensor([0, 1]), ones, (1, 2))
    for frac in (0.0, 0.5, 0.25, 0.75):
        y = torch.nan_to_num(-ulp * frac, nan=0.0).to(dtype)
        got = sparse_mm(A, torch.stack([x, y]))[0]
        _same_as_torch(got, (x.float() + y.float()).to(dtype))


@pytest.mark.parametrize("dtype", HALF)
def test_half_rounding_of_products_matches_torch(dtype):
    """C = round(a_i * b_ij) (exact in float32) for a diagonal A of random bit
    patterns and B of random and edge-case values: overflow to infinity, underflow
    into the subnormals and to zero, NaN and infinity inputs, ties; the kernels'
    rounding against torch's float32 -> 16-bit conversion."""
    g = seeded("half rounding", str(dtype))
    n, p = 512, 200
    a = torch.randint(-2 ** 15, 2 ** 15, (n,), generator=g, dtype=torch.int32).to(torch.int16).view(dtype)
    b = torch.randint(-2 ** 15, 2 ** 15, (n, p), generator=g, dtype=torch.int32).to(torch.int16).view(dtype)
    info = torch.finfo(dtype)
    edge = torch.tensor([0.0, -0.0, 1.0, 1.5, 3.0, info.max, -info.max, info.tiny, info.tiny / 2, info.eps,
                         float("inf"), float("-inf"), float("nan"), 2 ** -24, 2 ** -25, 65520.0, 65519.0, 2 ** -14,
                         1 + 2 ** -10, 1 + 2 ** -9, 0.333, -7.5e-5]).to(dtype)
    b[: edge.numel(), : edge.numel()] = edge[None, :] * torch.ones(edge.numel(), 1, dtype=dtype)
    a[: edge.numel()] = edge
    A = torch.sparse_csr_tensor(torch.arange(n + 1), torch.arange(n), a, (n, n))
    got = sparse_mm(A, b)
    _same_as_torch(got, (a.float()[:, None] * b.float()).to(dtype))


@pytest.mark.parametrize("batched", [False, True])
def test_coo_row_pointer_probe_for_any_thread_count(batched):
    """The probe answers 'sorted and unique' (and fills the pointers then), for any
    thread count and wherever the first repeat or inversion lies, and checks every
    range either way."""
    from torchsparsegradutils import _C
    g = seeded(f"probe{batched}")
    sizes = (3, 4000, 500) if batched else (12000, 500)
    nnz = 700_000
    b, n, m = (sizes if batched else (1,) + sizes)
    key = torch.unique(torch.randint(0, b * n * m, (nnz + nnz // 10,), generator=g))[:nnz]
    r, j = key // m, key % m
    idx = torch.stack([r // n, r % n, j] if batched else [r, j]).contiguous()
    expect = torch.cat([torch.zeros(1, dtype=torch.long), torch.bincount(r, minlength=b * n).cumsum(0)])
    for t in (1, 2):
        ptr = torch.full((b * n + 1,), -7, dtype=torch.long)
        assert _C.coo_row_ptr(idx, sizes, ptr, t, True) is True
        assert torch.equal(ptr, expect)
        for at in (1, nnz // 2, nnz // 2 + 1, nnz - 1):     # a repeat, then an inversion, at chunk edges too
            rep = idx.clone()
            rep[:, at] = rep[:, at - 1]
            inv = idx.clone()
            inv[:, [at - 1, at]] = inv[:, [at, at - 1]]
            for bad in (rep, inv):
                assert _C.coo_row_ptr(bad, sizes, torch.empty(b * n + 1, dtype=torch.long), t, True) is False
        oob = inv.clone()
        oob[-1, -1] = m                                      # out of range after the inversion
        with pytest.raises(ValueError, match="malformed sparse matrix"):
            _C.coo_row_ptr(oob, sizes, torch.empty(b * n + 1, dtype=torch.long), t, True)
    with pytest.raises(ValueError, match="probe needs row_ptr"):
        _C.coo_row_ptr(idx, sizes, None, 1, True)


def _coo_out_of_range(idx, sizes):
    """Which entries of COO indices hold an index out of range, by torch ops."""
    bad = torch.zeros(idx.shape[1], dtype=torch.bool)
    for d, size in enumerate(sizes):
        bad |= (idx[d] < 0) | (idx[d] >= size)
    return bad


def _first_coo_error(idx, sizes):
    """The first entry of COO indices in error and its status, by torch ops: an index
    out of range ("range"), else a (batch, row) below the entry before's (EIDX_ORDER) or
    a column not above it in the same row (ECOL_ORDER); None where there is none."""
    bad_range = _coo_out_of_range(idx, sizes)
    rows, cols = idx[-2] + (idx[0] * sizes[1] if len(sizes) == 3 else 0), idx[-1]
    down = torch.zeros_like(bad_range)
    down[1:] = rows[1:] < rows[:-1]
    repeat = torch.zeros_like(bad_range)
    repeat[1:] = (rows[1:] == rows[:-1]) & (cols[1:] <= cols[:-1])
    at = torch.nonzero(bad_range | down | repeat)
    if not at.numel():
        return None
    e = int(at[0])
    return e, "range" if bad_range[e] else "EIDX_ORDER" if down[e] else "ECOL_ORDER"


@pytest.mark.parametrize("batched", [False, True])
def test_coo_scans_name_the_first_entry_in_error(batched):
    """coo_row_ptr.c (order required, probed, or ranges only) and softmax_coo.c report
    the first entry in error, as an independent scan by torch ops finds it, for one
    thread and for several (entries enough for chunks on both threads), wherever one or
    two faults of each kind fall: a batch, row or column index out of range (negative or
    too large), a row below the one before, a column repeated or decreasing in its row.
    Without a fault, the row pointers are a bincount's."""
    from torchsparsegradutils import _C
    from torchsparsegradutils._core.native import STATUS
    g = seeded(f"coo scans {batched}")
    sizes = (3, 3000, 400) if batched else (9000, 400)
    b, n, m = sizes if batched else (1,) + sizes
    key = torch.unique(torch.randint(0, b * n * m, (660_000,), generator=g))   # > 2 * 2**18 entries
    r, j = key // m, key % m
    good = torch.stack([r // n, r % n, j] if batched else [r, j])
    nnz, R = good.shape[1], b * n
    expect = torch.cat([torch.zeros(1, dtype=torch.long), torch.bincount(r, minlength=R).cumsum(0)])

    def fault(idx, e, kind):
        d = {"batch": 0, "row": -2, "col": -1}
        if kind in ("batch", "row", "col"):
            idx[d[kind], e] = -1 if e % 2 else sizes[d[kind]]
        elif kind == "down":                         # a (batch, row) below the entry before's
            idx[:, e] = idx[:, e - 1]
            if idx[-2, e] == 0:                      # (the entry before moved to row 1)
                idx[-2, e - 1] = idx[-2, e] = 1
            idx[-2, e] -= 1
        else:                                        # a column repeated ("repeat") or decreasing in its row
            idx[:, e] = idx[:, e - 1]
            idx[-1, e] -= int(kind == "decrease")

    kinds = ["row", "col", "down", "repeat", "decrease"] + (["batch"] if batched else [])
    cases = [good]
    for k, kind in enumerate(kinds):
        for e in (1, 2 ** 15 + k, nnz // 2 + k, nnz - 1 - k):      # near the chunks' edges too
            idx = good.clone()
            fault(idx, e, kind)
            cases.append(idx)
            both = idx.clone()
            fault(both, min(e + 1000, nnz - 1), kinds[(k + 1) % len(kinds)])
            cases.append(both)
    val = torch.randn(nnz, 1, dtype=torch.float64)
    for idx in cases:
        first = _first_coo_error(idx, sizes)
        bad_range = _coo_out_of_range(idx, sizes)
        any_range = int(torch.nonzero(bad_range)[0]) if bad_range.any() else None
        for t in (1, 2):
            ptr = torch.full((R + 1,), -7, dtype=torch.long)
            calls = {"ordered": lambda: _C.coo_row_ptr(idx, sizes, ptr, t),
                     "softmax": lambda: _C.softmax_coo(idx, val, sizes, True, False, ptr,
                                                       torch.empty(nnz, 1, dtype=torch.float64), t)}
            for name, call in calls.items():
                if first is None:
                    call()
                    assert torch.equal(ptr, expect), name
                    continue
                with pytest.raises(ValueError) as got:
                    call()
                if first[1] == "range":
                    assert f" at entry {first[0]} is out of range" in str(got.value), (name, t)
                else:
                    assert str(got.value) == STATUS[first[1]], (name, t, first)
            # ranges alone, and the probe: every range checked, the order only asked about
            for call in (lambda: _C.coo_row_ptr(idx, sizes, None, t),
                         lambda: _C.coo_row_ptr(idx, sizes, ptr, t, True)):
                if any_range is None:
                    call()
                    continue
                with pytest.raises(ValueError, match=f" at entry {any_range} is out of range"):
                    call()
            if any_range is None:
                assert _C.coo_row_ptr(idx, sizes, ptr, t, True) is (first is None)
                out = torch.empty(nnz, 1, dtype=torch.float64)
                assert _C.softmax_coo(idx, val, sizes, False, False, ptr, out, t) is (first is None)


def test_kernels_take_the_registered_exporter():
    """Tensors reach C through torch.utils.dlpack.to_dlpack; plain() guarantees what
    that export does not check (no gradient, no negation bit)."""
    from torchsparsegradutils._core.view import plain
    x = torch.randn(3, requires_grad=True)
    assert not plain(x).requires_grad
    neg = torch._neg_view(torch.tensor([1.0, -2.0]))
    assert neg.is_neg() and not plain(neg).is_neg() and torch.equal(plain(neg), torch.tensor([-1.0, 2.0]))
    with pytest.raises(TypeError, match="callable"):
        tsgu._C.set_exporter(3)
