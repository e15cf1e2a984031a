"""Tests of sparse_softmax and sparse_log_softmax: against the masked dense softmax with
autograd (absent entries -inf, float64), against torch.sparse.softmax / log_softmax on
COO, gradcheck, empty rows and nnz = 0, batched, 16-bit values, a leaf sparse A, second
derivatives, errors, the same bits for any thread count, and torch.compile(fullgraph=True)
of a SparseCSR.  Every test of results runs on both routes: the C kernels and the
PyTorch-ops one that CUDA takes (forced on CPU here)."""
import pytest
import torch
from support.checks import num_threads
from support.children import SANITIZED, run_child
from support.operands import random_dense, to_layout

from torchsparsegradutils import (SparseCSR, _backends, sparse_coo_tensor, sparse_csr_tensor, sparse_log_softmax,
                                  sparse_mm, sparse_softmax)

HAS_CUDA = torch.cuda.is_available()
FNS = {"softmax": sparse_softmax, "log_softmax": sparse_log_softmax}
TORCH_FNS = {"softmax": torch.sparse.softmax, "log_softmax": torch.sparse.log_softmax}
TOL = {torch.float32: dict(atol=2e-6, rtol=2e-5), torch.float64: dict(atol=1e-12, rtol=1e-12)}


def masked_reference(D, dim, kind):
    """The masked dense softmax (absent entries -inf), 0 where nothing is stored."""
    X = D.masked_fill(D == 0, float("-inf"))
    Y = (torch.log_softmax if kind == "log_softmax" else torch.softmax)(X, dim)
    return torch.where(D != 0, Y, torch.zeros_like(Y))


def dense_of(Y):
    """A result as a dense tensor (torch cannot densify a batched CSR or CSC tensor)."""
    if isinstance(Y, SparseCSR):
        Y = Y.to_torch()
    if Y.layout in (torch.sparse_csr, torch.sparse_csc) and Y.dim() == 3:
        return torch.stack([y.to_dense() for y in Y.unbind(0)])
    return Y.to_dense()


DIMS_2D, DIMS_3D = [-1, -2, 0, 1], [-1, -2, 1, 2]


@pytest.mark.parametrize("kind", FNS)
@pytest.mark.parametrize("layout", ["coo", "coo_uncoalesced", "csr", "csc"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_matches_masked_dense_2d(path, kind, layout, dtype):
    D = random_dense((7, 5), dtype, scale=2)
    for itype in (torch.int32, torch.int64) if layout == "csr" else (torch.int64,):
        A = to_layout(D, layout, itype)
        for dim in DIMS_2D:
            Y = FNS[kind](A, dim)
            assert Y.layout == A.layout and Y.shape == A.shape
            torch.testing.assert_close(dense_of(Y), masked_reference(D, dim, kind), **TOL[dtype])


@pytest.mark.parametrize("kind", FNS)
@pytest.mark.parametrize("layout", ["coo", "coo_uncoalesced", "csr"])
def test_matches_masked_dense_batched(path, kind, layout):
    D = random_dense((3, 6, 4), same_pattern=layout == "csr", seed=1, scale=2)
    A = to_layout(D, layout)
    for dim in DIMS_3D:
        Y = FNS[kind](A, dim)
        assert Y.layout == A.layout and Y.shape == A.shape
        torch.testing.assert_close(dense_of(Y), masked_reference(D, dim, kind), **TOL[torch.float64])


@pytest.mark.parametrize("kind", FNS)
@pytest.mark.parametrize("coalesced", [True, False], ids=["coalesced", "uncoalesced"])
@pytest.mark.parametrize("shape,dims", [((8, 6), [0, 1, -1, -2]), ((3, 5, 4), [1, 2, -1, -2])], ids=["2d", "3d"])
def test_matches_torch_sparse_softmax(path, kind, coalesced, shape, dims):
    """Values, pattern and the gradient of a leaf COO A, as PyTorch's own (COO) ops: an
    uncoalesced A is coalesced first (its duplicates summed), as PyTorch does."""
    D = random_dense(shape, seed=2, scale=2)
    A = to_layout(D, "coo" if coalesced else "coo_uncoalesced")
    for dim in dims:
        want = TORCH_FNS[kind](A, dim)
        got = FNS[kind](A, dim)
        assert got.is_coalesced() and torch.equal(got.indices(), want.indices())
        torch.testing.assert_close(got.values(), want.values(), **TOL[torch.float64])
        w = torch.linspace(-1, 2, want._nnz(), dtype=torch.float64)
        grads = []
        # PyTorch's backward is wrong for a negative dim (2.13: its forward is right):
        # compared with its non-negative form (test_negative_dim_gradient checks ours)
        for fn, d in ((FNS[kind], dim), (TORCH_FNS[kind], dim % len(shape))):
            leaf = A.coalesce().detach().requires_grad_()
            (fn(leaf, d).values() * w).sum().backward()
            grads.append(leaf.grad.coalesce())
        assert torch.equal(grads[0].indices(), grads[1].indices())
        torch.testing.assert_close(grads[0].values(), grads[1].values(), **TOL[torch.float64])


@pytest.mark.parametrize("kind", FNS)
def test_negative_dim_gradient(path, kind):
    """dim=-1 / -2 give the gradients of dim=1 / 0 and of the dense autograd (PyTorch
    2.13's torch.sparse.softmax does not: its backward mistakes a negative dim)."""
    D = random_dense((8, 6), seed=2, scale=2)
    W = torch.randn(D.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(3)) * (D != 0)
    for dim in (-1, -2):
        leaf = D.to_sparse().requires_grad_()
        (FNS[kind](leaf, dim).values() * W[D != 0]).sum().backward()
        Dl = D.clone().requires_grad_()
        (masked_reference(Dl, dim, kind) * W).sum().backward()
        torch.testing.assert_close(leaf.grad.to_dense(), Dl.grad * (D != 0), **TOL[torch.float64])


@pytest.mark.parametrize("kind", FNS)
@pytest.mark.parametrize("layout", ["coo", "coo_uncoalesced", "csr", "batched_csr", "batched_coo"])
def test_values_gradient_matches_dense_autograd(path, kind, layout):
    """A built from a leaf values tensor (torch.sparse_coo_tensor, our sparse_csr_tensor):
    values.grad is the dense autograd gradient at the stored positions (duplicates each
    get their position's gradient: the matrix entry is their sum)."""
    batched = layout.startswith("batched")
    D = random_dense((2, 6, 5) if batched else (6, 5), seed=3, same_pattern=True, scale=2)
    A = to_layout(D, layout.replace("batched_", ""))
    for dim in (-1, -2):
        if A.layout == torch.sparse_coo:
            vals = A._values().clone().requires_grad_()
            build = lambda v: torch.sparse_coo_tensor(A._indices(), v, A.shape)  # noqa: E731
            pos = tuple(A._indices())
        else:
            vals = A.values().clone().requires_grad_()
            build = lambda v: sparse_csr_tensor(A.crow_indices(), A.col_indices(), v, A.shape)  # noqa: E731
            pos = tuple(A.to_sparse_coo().indices()) if not batched else tuple(D.nonzero().t())
        Y = FNS[kind](build(vals), dim)
        W = torch.randn(D.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
        (Y.values() * W[tuple((D != 0).nonzero().t())].reshape(Y.values().shape)).sum().backward()
        Dl = D.clone().requires_grad_()
        (masked_reference(Dl, dim, kind) * W * (D != 0)).sum().backward()
        torch.testing.assert_close(vals.grad.reshape(-1), Dl.grad[pos].reshape(-1), **TOL[torch.float64])


@pytest.mark.parametrize("kind", FNS)
@pytest.mark.parametrize("layout", ["coo", "csr", "batched_csr", "batched_coo"])
def test_leaf_sparse_gradient_on_its_pattern(path, kind, layout):
    """(Not CSC: PyTorch's autograd cannot accumulate a CSC leaf's gradient at all.)"""
    batched = layout.startswith("batched")
    D = random_dense((2, 6, 5) if batched else (6, 5), seed=5, same_pattern=True, scale=2)
    A = to_layout(D, layout.replace("batched_", "")).detach().requires_grad_()
    W = torch.randn(D.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    nz = tuple((D != 0).nonzero().t())
    Y = FNS[kind](A, -1)
    (Y.values() * W[nz].reshape(Y.values().shape)).sum().backward()
    assert A.grad.layout == A.layout
    Dl = D.clone().requires_grad_()
    (masked_reference(Dl, -1, kind) * W * (D != 0)).sum().backward()
    torch.testing.assert_close(dense_of(A.grad), Dl.grad * (D != 0), **TOL[torch.float64])


@pytest.mark.parametrize("layout", ["coo", "batched_coo", "coo_unflagged"])
def test_leaf_coo_gradient_is_flagged_coalesced(path, layout):
    """A COO leaf's gradient comes back flagged coalesced, so A.grad.values() works (PyTorch
    drops the flag as it stores a gradient: _core.saved.flag_coalesced_grads restores it);
    on every route, by rows and columns, also after a second backward adds to it."""
    batched = layout.startswith("batched")
    D = random_dense((2, 6, 5) if batched else (6, 5), seed=8, scale=2)
    A = D.to_sparse().coalesce()
    if layout == "coo_unflagged":        # sorted and unique, not flagged: still A's own pattern
        A = torch.sparse_coo_tensor(A.indices(), A.values(), A.shape)
    for kind in FNS:
        for dim in (-1, -2):
            leaf = A.detach().requires_grad_()
            for _ in range(2):
                FNS[kind](leaf, dim).values().sum().backward()
                assert leaf.grad.is_coalesced() and torch.equal(leaf.grad.indices(), A._indices()), (kind, dim)
    leaf = A.detach().requires_grad_()
    sparse_mm(leaf, torch.ones(*D.shape[:-2], 5, 2, dtype=D.dtype)).sum().backward()
    assert leaf.grad.is_coalesced()
    torch.testing.assert_close(leaf.grad.values(), torch.full_like(A._values(), 2.0))


@pytest.mark.parametrize("kind", FNS)
def test_gradcheck(path, kind):
    D = random_dense((6, 5), seed=7, scale=2)
    A = D.to_sparse()
    for dim in (-1, -2):
        vals = A._values().clone().requires_grad_()
        assert torch.autograd.gradcheck(lambda v: FNS[kind](sparse_coo_tensor(A._indices(), v, A.shape), dim).values(),
                                        (vals,))
        C = D.to_sparse_csr()
        vals = C.values().clone().requires_grad_()
        assert torch.autograd.gradcheck(
            lambda v: FNS[kind](sparse_csr_tensor(C.crow_indices(), C.col_indices(), v, C.shape), dim).values(), (vals,))
        S = SparseCSR.from_torch(C)
        assert torch.autograd.gradcheck(lambda v: FNS[kind](S._replace(values=v), dim).values, (vals,))


@pytest.mark.parametrize("kind", FNS)
@pytest.mark.parametrize("batched", [False, True], ids=["2d", "batched"])
def test_second_derivatives_of_a_sparse_csr(path, kind, batched):
    D = random_dense((2, 6, 5) if batched else (6, 5), seed=8, same_pattern=True, scale=2)
    S = SparseCSR.from_torch(D.to_sparse_csr())
    vals = S.values.clone().requires_grad_()
    for dim in (-1, -2):
        assert torch.autograd.gradgradcheck(lambda v: FNS[kind](S._replace(values=v), dim).values, (vals,))


def test_second_derivatives_of_a_torch_sparse_tensor_raise():
    A = random_dense((5, 4), seed=9, scale=2).to_sparse().requires_grad_()
    Y = sparse_softmax(A)
    with pytest.raises(RuntimeError, match="differentiable once; for second derivatives .* pass a SparseCSR"):
        torch.autograd.grad((Y.values() ** 2).sum(), A, create_graph=True)


@pytest.mark.parametrize("kind", FNS)
@pytest.mark.parametrize("shape", [(0, 3), (3, 0), (4, 3), (2, 0, 3), (2, 3, 4)])
@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_nnz_zero_and_empty(path, kind, shape, layout):
    A = to_layout(torch.zeros(shape, dtype=torch.float64), layout).requires_grad_()
    for dim in (-1, -2):
        Y = FNS[kind](A, dim)
        assert Y.shape == A.shape and Y.layout == A.layout and Y.values().numel() == 0
        Y.values().sum().backward()
        assert A.grad.shape == A.shape and A.grad.values().numel() == 0
        A.grad = None


def test_empty_rows_stay_empty(path):
    D = torch.tensor([[0.0, 0.0, 0.0], [1.0, 0.0, 3.0], [0.0, 0.0, 0.0], [0.0, -2.0, 0.0]], dtype=torch.float64)
    Y = sparse_softmax(D.to_sparse_csr())
    assert torch.equal(Y.crow_indices(), torch.tensor([0, 0, 2, 2, 3]))
    torch.testing.assert_close(Y.to_dense(), masked_reference(D, -1, "softmax"))


def test_large_values_and_infinities(path):
    """Shifted by the group's max (no overflow at 1e4); a -inf entry takes no share; an
    all -inf group or a +inf entry gives NaN, as the dense softmax does."""
    i = torch.tensor([[0, 0, 1, 1, 2, 2, 3], [0, 1, 0, 2, 1, 2, 0]])
    v = torch.tensor([1e4, 1e4 - 1, 3.0, float("-inf"), float("-inf"), float("-inf"), float("inf")],
                     dtype=torch.float64)
    A = torch.sparse_coo_tensor(i, v, (4, 3)).coalesce()
    for kind in FNS:
        got, want = FNS[kind](A, -1), TORCH_FNS[kind](A, -1)
        torch.testing.assert_close(got.values(), want.values(), equal_nan=True)


def _on_every_entry(layout, D, vals):
    """An op's input storing every entry of the (n, m) D, with values `vals` in row-major
    order ((n*m,) or (n*m, H)): a COO, a CSR or a SparseCSR."""
    if layout == "coo":
        return sparse_coo_tensor(D.to_sparse().indices(), vals, D.shape)
    C = D.to_sparse_csr()
    make = sparse_csr_tensor if layout == "csr" else SparseCSR
    return make(C.crow_indices(), C.col_indices(), vals, D.shape)


def _values(Y):
    return Y.values if isinstance(Y, SparseCSR) else Y.values()


ENTRY_LAYOUTS = {"coo": 1, "csr": 1, "SparseCSR": 1, "SparseCSR_2_heads": 2}    # layout -> heads


@pytest.mark.parametrize("kind", FNS)
@pytest.mark.parametrize("dim", [-1, -2])
@pytest.mark.parametrize("layout", ENTRY_LAYOUTS)
def test_float32_precision_kept_at_large_magnitude(path, kind, dim, layout):
    """Values near +-1e7 in float32 (exact there, 1 ulp apart): each result is
    (v - max) - log(sum), not v - (max + log(sum)), whose bracket rounded to float32
    gives -2, -1, 0 for -2.41, -1.41, -0.41.  As torch.sparse's ops, and the float64
    masked softmax within float32's precision, forward and the values' gradient."""
    big = torch.tensor([[-1e7, -1e7 + 1, -1e7 + 2], [1e7, 1e7 - 1, 1e7 - 3]])
    D = big if dim == -1 else big.t().contiguous()
    H = ENTRY_LAYOUTS[layout]
    V = torch.stack([D, -D], -1)[..., :H]                           # head 1: the values negated (exact)
    vals = V.reshape(D.numel(), H).squeeze(-1) if H == 1 else V.reshape(D.numel(), H)
    vals.requires_grad_()
    y = _values(FNS[kind](_on_every_entry(layout, D, vals), dim))
    torch.testing.assert_close(y.detach().reshape(D.numel(), H)[:, 0],
                               TORCH_FNS[kind](D.to_sparse(), dim).values(), atol=1e-6, rtol=1e-6)
    Vl = V.double().requires_grad_()
    ref = torch.stack([masked_reference(Vl[..., h], dim, kind) for h in range(H)], -1)
    torch.testing.assert_close(y.detach().reshape(ref.shape), ref.float(), atol=1e-6, rtol=1e-6)
    W = torch.linspace(-1, 2, ref.numel(), dtype=torch.float64).reshape(ref.shape)
    (ref * W).sum().backward()
    (y * W.float().reshape(y.shape)).sum().backward()
    torch.testing.assert_close(vals.grad.reshape(ref.shape), Vl.grad.float(), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("kind", FNS)
@pytest.mark.parametrize("dim", [-1, -2])
@pytest.mark.parametrize("layout", ENTRY_LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_group_holding_inf_is_nan_throughout(path, kind, dim, layout, dtype):
    """A row (column) holding +inf or NaN, or only -inf, is NaN throughout; a -inf beside
    finite values takes no share (0; log: -inf): as torch.softmax / log_softmax (every
    entry is stored here) and torch.sparse's ops."""
    inf, nan = float("inf"), float("nan")
    R = torch.tensor([[inf, 1, 2], [-inf, 1, 2], [-inf, -inf, -inf], [inf, inf, 1], [inf, -inf, 1],
                      [nan, 1, 2], [1, 2, 3]], dtype=dtype)
    D = R if dim == -1 else R.t().contiguous()
    H = ENTRY_LAYOUTS[layout]
    V = torch.stack([D, -D], -1)[..., :H]                           # head 1: +inf and -inf swapped
    vals = V.reshape(D.numel(), H).squeeze(-1) if H == 1 else V.reshape(D.numel(), H)
    y = _values(FNS[kind](_on_every_entry(layout, D, vals), dim))
    dense = torch.log_softmax if kind == "log_softmax" else torch.softmax
    want = torch.stack([dense(V[..., h], dim) for h in range(H)], -1)
    torch.testing.assert_close(y.reshape(want.shape), want, equal_nan=True)
    torch.testing.assert_close(want[..., 0], TORCH_FNS[kind](D.to_sparse(), dim).to_dense(), equal_nan=True)


@pytest.mark.parametrize("kind", FNS)
@pytest.mark.parametrize("layout", ["coo", "csr"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_every_row_length_with_special_values(path, kind, layout, dtype):
    """Rows of 1 to 40 stored entries (rows of up to 16 are taken in blocks of a fixed
    width, those of up to 8 two at a time: csrc/tsgu_softmax.h), finite, with a -inf
    among them, or with a +inf or a NaN, side by side in every order: torch.softmax's
    values on the dense rows (absent entries -inf), NaN where it has NaN."""
    g = torch.Generator().manual_seed(5)
    special = {1: float("-inf"), 2: float("inf"), 3: float("nan")}
    rows = [(n, s) for n in range(1, 41) for s in (0, 1, 0, 0, 2, 3, 0)]   # finite rows pair with any kind
    D = torch.full((len(rows), 40), float("-inf"), dtype=dtype)
    for r, (n, s) in enumerate(rows):
        D[r, :n] = torch.randn(n, generator=g, dtype=dtype) * 3
        if s:
            D[r, (r * 7) % n] = special[s]
    idx = torch.stack(torch.meshgrid(torch.arange(len(rows)), torch.arange(40), indexing="ij")).reshape(2, -1)
    stored = torch.tensor([c < n for n, _ in rows for c in range(40)])
    idx = idx[:, stored]
    A = torch.sparse_coo_tensor(idx, D[idx[0], idx[1]], D.shape, is_coalesced=True)
    y = _values(FNS[kind](A if layout == "coo" else A.to_sparse_csr(), -1))
    want = (torch.log_softmax if kind == "log_softmax" else torch.softmax)(D, -1)[idx[0], idx[1]]
    torch.testing.assert_close(y, want, equal_nan=True, **TOL[dtype])


@pytest.mark.parametrize("kind", FNS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_16_bit_values_computed_in_float32(path, kind, dtype, layout):
    """The result is the float32 result rounded once (to the nearest 16-bit value; the
    two may differ in the last place where the float32 value is nearly a tie)."""
    D = random_dense((2, 7, 6), dtype, seed=10, same_pattern=True, scale=2)
    A = to_layout(D, layout)
    for dim in (-1, -2):
        got = FNS[kind](A, dim)
        assert got.dtype == dtype
        want = FNS[kind](to_layout(D.float(), layout), dim)
        torch.testing.assert_close(got.values().float(), want.values().to(dtype).float(), atol=0, rtol=0.01)
        leaf = A.detach().requires_grad_()
        FNS[kind](leaf, dim).values().float().sum().backward()
        assert leaf.grad.dtype == dtype


@pytest.mark.parametrize("dim", [-1, -2])
@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_same_bits_for_any_thread_count(dim, layout):
    D = random_dense((2, 400, 300), torch.float32, seed=11, density=0.3, same_pattern=True, scale=2)
    results = []
    for t in (1, 2, 5):
        with num_threads(t):
            A = to_layout(D, layout).requires_grad_()
            for kind in FNS:
                Y = FNS[kind](A, dim)
                (Y.values() * torch.linspace(-1, 1, Y.values().numel()).reshape(Y.values().shape)).sum().backward()
            results.append((Y.values().detach(), dense_of(A.grad)))
    for r in results[1:]:
        assert all(torch.equal(x, y) for x, y in zip(results[0], r))


def _coo_pattern(batched, seed=21):
    """Sorted and unique COO indices of more than 2 * 2**15 entries (softmax_coo.c gives
    threads chunks of at least 2**15): rows of 0 to 60 entries, the first and last rows
    empty, a hub row of about 20000 entries; (indices, sizes)."""
    g = torch.Generator().manual_seed(seed)
    b, n, m = (2, 1500, 40000) if batched else (1, 3000, 40000)
    counts = torch.randint(0, 61, (b * n,), generator=g)
    counts[0] = counts[-1] = 0
    counts[n // 2] = 30000                                       # a hub row, in item 0
    rows = torch.repeat_interleave(torch.arange(b * n), counts)
    key = torch.unique(rows * m + torch.randint(0, m, rows.shape, generator=g))   # sorted, repeats dropped
    rows, cols = key // m, key % m
    idx = [rows // n, rows % n, cols] if batched else [rows, cols]
    return torch.stack(idx), ((b, n, m) if batched else (n, m))


@pytest.mark.parametrize("batched", [False, True], ids=["2d", "batched"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16], ids=str)
def test_coo_rows_in_one_pass_are_the_csr_routes_bits(batched, dtype, monkeypatch):
    """A CPU COO tensor's rows go through softmax_coo.c (its indices checked, its row
    pointers built and the softmax taken in one pass): the bits of the route through its
    CSR view (as_csr, softmax_rows.c) it replaces, for any thread count, forward and
    backward, empty rows and a hub row included; and torch.sparse.softmax's values."""
    from torchsparsegradutils._backends import cpu
    idx, sizes = _coo_pattern(batched)
    vals = (torch.randn(idx.shape[1], generator=torch.Generator().manual_seed(22)) * 3).to(dtype)
    w = torch.linspace(-1, 1, idx.shape[1], dtype=dtype)
    fused, calls = cpu.softmax_coo, []
    for kind in FNS:
        results = []
        for one_pass, t in ((False, 1), (True, 1), (True, 2), (True, 3)):
            monkeypatch.setattr(cpu, "softmax_coo", lambda *a: calls.append(1) or fused(*a) if one_pass else None)
            with num_threads(t):
                v = vals.clone().requires_grad_()
                Y = FNS[kind](sparse_coo_tensor(idx, v, sizes, is_coalesced=True), -1)
                (Y.values() * w).sum().backward()
                results.append((Y.values().detach(), v.grad))
        assert all(torch.equal(x, y) for r in results[1:] for x, y in zip(results[0], r))
        want = TORCH_FNS[kind](torch.sparse_coo_tensor(idx, vals.double(), sizes), -1).values()
        torch.testing.assert_close(results[1][0].double(), want, **TOL.get(dtype, dict(atol=1e-3, rtol=0.01)))
    assert len(calls) == 2 * 3


@pytest.mark.parametrize("threads", [1, 2])
def test_malformed_coo_rows_raise_the_intakes_errors(threads):
    """Unsorted rows, a repeated or unsorted column, an index out of range: softmax_coo.c's
    errors are the ValueErrors (messages and all) of the intake it replaces (as_csr), for
    the first entry in error, wherever the chunks of the threads fall; a COO not flagged
    coalesced is coalesced instead (its softmax is torch.sparse.softmax's)."""
    from torchsparsegradutils._core.intake import as_csr
    idx, sizes = _coo_pattern(False)
    nnz, late = idx.shape[1], idx.shape[1] - 5                   # late: in the second chunk
    vals = torch.randn(nnz, dtype=torch.float64)
    cases = {}
    for name, at in (("early", 3), ("late", late)):
        rows = idx.clone()                                       # a row before the one before it
        rows[0, at] = rows[0, at - 1] - 1 if rows[0, at - 1] > 0 else 0
        rows[0, at - 1] = max(int(rows[0, at - 1]), 1)
        repeat = idx.clone()                                     # the column of the entry before, in its row
        repeat[:, at] = repeat[:, at - 1]
        out = idx.clone()
        out[1, at] = sizes[1] + at
        both = rows.clone()                                      # an order error before a range error
        both[1, late + 2] = -1
        ahead = idx.clone()                                      # the last row, with every later chunk's rows after it
        ahead[0, at] = sizes[0] - 1
        cases.update({f"rows {name}": rows, f"repeat {name}": repeat, f"range {name}": out, f"both {name}": both,
                      f"ahead {name}": ahead})
    for name, bad in cases.items():
        with pytest.raises(ValueError) as want:
            as_csr(torch.sparse_coo_tensor(bad, vals, sizes, is_coalesced=True, check_invariants=False))
        for fn in FNS.values():
            with num_threads(threads), pytest.raises(ValueError) as got:
                fn(torch.sparse_coo_tensor(bad, vals, sizes, is_coalesced=True, check_invariants=False), -1)
            assert str(got.value) == str(want.value), name
            assert str(got.value).startswith("malformed sparse matrix"), name
        A = torch.sparse_coo_tensor(bad, vals, sizes, check_invariants=False)  # not flagged: coalesced instead
        if "range" in name or "both" in name:
            with num_threads(threads), pytest.raises(ValueError, match="out of range"):
                sparse_softmax(A, -1)
            continue
        with num_threads(threads):
            torch.testing.assert_close(sparse_softmax(A, -1).values(), torch.sparse.softmax(A, -1).values())


def test_inputs_unchanged_and_edits_after_forward_harmless():
    """The backward reads the output alone: an edit of A's values after the forward
    changes no gradient (nothing to detect)."""
    D = random_dense((6, 5), seed=12, scale=2)
    A = D.to_sparse()
    idx, v0 = A._indices().clone(), A._values().clone()
    grads = []
    for edit in (False, True):
        vals = v0.clone().requires_grad_()
        x = vals * 1
        Y = sparse_softmax(torch.sparse_coo_tensor(idx, x, A.shape))
        if edit:
            with torch.no_grad():
                x.mul_(3)
        (Y.values() * torch.arange(Y._nnz(), dtype=torch.float64)).sum().backward()
        grads.append(vals.grad)
    torch.testing.assert_close(grads[0], grads[1])
    assert torch.equal(A._indices(), idx) and torch.equal(A._values(), v0)


def test_errors():
    A = random_dense((4, 3), seed=13, scale=2).to_sparse()
    with pytest.raises(ValueError, match="sparse COO, CSR or CSC.*use torch.softmax"):
        sparse_softmax(A.to_dense())
    with pytest.raises(ValueError, match="takes a sparse tensor or a SparseCSR"):
        sparse_softmax([1.0, 2.0])
    with pytest.raises(ValueError, match="2-D .* or batched 3-D"):
        sparse_softmax(torch.ones(2, 2, 2, 2).to_sparse())
    with pytest.raises(ValueError, match="2-D .* or batched 3-D"):
        sparse_log_softmax(torch.ones(3).to_sparse())
    with pytest.raises(ValueError, match="no dense dimensions"):
        sparse_softmax(torch.ones(3, 2, 2).to_sparse(2))
    with pytest.raises(TypeError, match="float16, bfloat16, float32 and float64"):
        sparse_softmax(torch.ones(3, 2, dtype=torch.int64).to_sparse())
    for bad in (2, -3, 5):
        with pytest.raises(IndexError, match="Dimension out of range"):
            sparse_softmax(A, bad)
        with pytest.raises(ValueError, match="Dimension out of range"):
            sparse_log_softmax(A.to_sparse_csr(), bad)
    with pytest.raises(ValueError, match="batch dimension"):
        sparse_softmax(torch.ones(2, 3, 3).to_sparse(), 0)
    with pytest.raises(ValueError, match="batch dimension"):
        sparse_softmax(torch.ones(2, 3, 3).to_sparse(), -3)
    with pytest.raises(TypeError, match="dim must be an int"):
        sparse_softmax(A, 1.0)
    S = SparseCSR.from_torch(A.to_sparse_csr())
    for values in (S.values[:, None, None].expand(-1, 2, 2), S.values[1:], S.values[1:, None]):
        with pytest.raises(ValueError, match=r"shape of col_indices .* or that shape \+ \(heads,\)"):
            sparse_softmax(S._replace(values=values))


@pytest.mark.parametrize("route", [False, True], ids=["C", "torch_ops"])
def test_malformed_structure_is_a_value_error(route, monkeypatch):
    monkeypatch.setattr(_backends, "force_torch_ops", route)
    ptr, vals = torch.tensor([0, 1, 3]), torch.tensor([1.0, 2.0, 3.0])
    for col in (torch.tensor([0, 1, 3]), torch.tensor([0, 2, 1]), torch.tensor([0, -1, 1])):
        A = torch.sparse_csr_tensor(ptr, col, vals, (2, 3))
        for fn in FNS.values():
            for dim in (-1, -2):
                with pytest.raises(ValueError, match="malformed sparse matrix"):
                    fn(A, dim)
                with pytest.raises(ValueError, match="malformed sparse matrix"):
                    fn(SparseCSR(ptr, col, vals, (2, 3)), dim)
    with pytest.raises(ValueError, match="malformed sparse matrix"):
        sparse_softmax(torch.sparse_csr_tensor(torch.tensor([0, 2, 1]), torch.tensor([0]), vals[:1], (2, 3)))
    with pytest.raises(ValueError, match="malformed sparse matrix"):
        sparse_softmax(torch.sparse_coo_tensor(torch.tensor([[0, 2]]).t(), vals[:1], (2, 2)))


@pytest.mark.parametrize("dim", [-1, -2])
def test_coo_flagged_coalesced_with_a_repeated_index_raises(path, dim):
    """A COO built with is_coalesced=True that holds a position twice (or its columns out
    of order in a row) is the "malformed sparse matrix" ValueError that sparse_mm raises,
    not the softmax of its duplicates taken as separate entries."""
    for col in ([0, 2, 2], [0, 2, 1]):
        A = torch.sparse_coo_tensor(torch.tensor([[0, 1, 1], col]), torch.tensor([1.0, 2.0, 3.0]), (3, 3),
                                    is_coalesced=True)
        for fn in FNS.values():
            with pytest.raises(ValueError, match="malformed sparse matrix"):
                fn(A, dim)


def test_kernels_check_their_arrays():
    from torchsparsegradutils import _C
    A = random_dense((4, 3), seed=14, scale=2).to_sparse_csr()
    nnz = A.values().numel()
    args = (A.crow_indices(), A.col_indices(), A.values().reshape(nnz, 1), 1, 4, 3, 1, False, False)
    with pytest.raises(ValueError, match="shape"):
        _C.softmax_rows(*args, torch.empty(nnz + 1, 1, dtype=torch.float64), 1)
    with pytest.raises(ValueError, match="shape"):      # (nnz, 2) values for one head
        _C.softmax_rows(*args[:2], A.values()[:, None].expand(-1, 2).contiguous(), *args[3:],
                        torch.empty(nnz, 1, dtype=torch.float64), 1)
    with pytest.raises(TypeError, match="dtype"):
        _C.softmax_rows(*args, torch.empty(nnz, 1, dtype=torch.float32), 1)
    with pytest.raises(ValueError, match="heads must be at least 1"):
        _C.softmax_rows(*args[:6], 0, False, False, torch.empty(nnz, 1, dtype=torch.float64), 1)
    y = torch.empty(nnz, 1, dtype=torch.float64)
    pattern = (A.crow_indices(), A.col_indices(), 1, 4, 3, 1)
    with pytest.raises(TypeError, match="dtype"):
        _C.softmax_grad(*pattern, y, y.float(), False, y.clone(), 1)
    with pytest.raises(ValueError, match="shape"):
        _C.softmax_grad(*pattern, y, y[:-1], False, y.clone(), 1)
    with pytest.raises(ValueError, match="unit stride|contiguous"):
        _C.softmax_grad(*pattern[:-1], 2, y.expand(-1, 2), y.expand(-1, 2), False, torch.empty(nnz, 2).double(), 1)


@pytest.mark.parametrize("kind", ["csr", "batched_csr", "batched_coo", "multi_head"])
def test_compiled_sparse_csr_matches_eager(kind):
    """fullgraph=True on a SparseCSR (multi_head: (nnz, 4) values): outputs and values
    gradients as eager."""
    if kind == "multi_head":
        S, _ = multi_head("csr", heads=4, seed=15)
    else:
        D = random_dense((2, 6, 5) if kind.startswith("batched") else (6, 5), seed=15,
                         same_pattern=kind == "batched_csr", scale=2)
        S = SparseCSR.from_torch(D.to_sparse_csr() if kind.endswith("csr") else D.to_sparse())

    def model(w):
        T = S._replace(values=w)
        return sparse_softmax(T).values * 2 + sparse_log_softmax(T, -2).values

    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    outs = []
    for fn in (compiled, model):
        w = S.values.clone().requires_grad_()
        y = fn(w)
        (y * torch.linspace(-1, 1, y.numel(), dtype=y.dtype).reshape(y.shape)).sum().backward()
        outs.append((y.detach(), w.grad))
    torch.testing.assert_close(outs[0][0], outs[1][0])
    torch.testing.assert_close(outs[0][1], outs[1][1])


def test_custom_op_opcheck():
    D = random_dense((2, 6, 5), seed=16, same_pattern=True, scale=2)
    S = SparseCSR.from_torch(D.to_sparse_csr())
    a = S.values.clone().requires_grad_()
    for by_rows in (True, False):
        for log in (False, True):
            args = (S.crow_indices, S.col_indices, list(S.size))
            torch.library.opcheck(torch.ops.tsgu.softmax.default, (*args, a, by_rows, log))
            y = torch.ops.tsgu.softmax(*args, a, by_rows, log).detach().requires_grad_()
            g = torch.randn_like(y).requires_grad_()
            torch.library.opcheck(torch.ops.tsgu.softmax_grad.default, (*args, y, g, by_rows, log))
            torch.library.opcheck(torch.ops.tsgu.softmax_gsum.default, (*args, g, by_rows))


# ------------------------------------------------------------------ multi-head values (nnz, H)
def multi_head(kind, dtype=torch.float64, heads=3, seed=20):
    """A SparseCSR of `kind` ("csr", "batched_csr": (b, nnz, H) values, "batched_coo": the
    stacked rows) with (.., nnz, H) values, and the dense (.., n, m, H) tensor it holds."""
    shape = (2, 7, 5) if kind.startswith("batched") else (7, 5)
    D = random_dense(shape, seed=seed, same_pattern=kind == "batched_csr", scale=2)
    A = D.to_sparse() if kind == "batched_coo" else D.to_sparse_csr()
    S = SparseCSR.from_torch(A)
    gen = torch.Generator().manual_seed(seed + 1)
    values = (torch.randn((*S.col_indices.shape, heads), generator=gen, dtype=torch.float64) * 3).to(dtype)
    dense = torch.stack([dense_of(S._replace(values=values[..., h])) for h in range(heads)], -1)
    return S._replace(values=values), dense


@pytest.mark.parametrize("kind", FNS)
@pytest.mark.parametrize("layout", ["csr", "batched_csr", "batched_coo"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_multi_head_is_each_head_on_its_own(path, kind, layout, dtype):
    """Head h of an (nnz, H) SparseCSR: the single-head op on values[..., h] (its bits),
    and the masked dense softmax of that head; its gradient, dense autograd's."""
    S, dense = multi_head(layout, dtype)
    mask = dense_of(S._replace(values=torch.ones_like(S.values[..., 0]))) != 0
    for dim in (-1, -2):
        w = S.values.clone().requires_grad_()
        Y = FNS[kind](S._replace(values=w), dim).values
        for h in range(S.values.shape[-1]):
            one = FNS[kind](S._replace(values=S.values[..., h].contiguous()), dim).values
            assert torch.equal(Y[..., h].detach(), one)
        G = torch.randn(Y.shape, generator=torch.Generator().manual_seed(3), dtype=dtype)
        (Y * G).sum().backward()
        Dw = dense.double().masked_fill(~mask[..., None], 0.0).requires_grad_()
        ref = [masked_reference(Dw[..., h] * mask + 0 * Dw[..., h], dim, kind) for h in range(dense.shape[-1])]
        ref = torch.stack([r.masked_fill(~mask, 0.0) for r in ref], -1)
        got = torch.stack([dense_of(S._replace(values=Y[..., h].detach())) for h in range(Y.shape[-1])], -1)
        torch.testing.assert_close(got, ref.to(dtype), **TOL[dtype])
        (ref * torch.stack([dense_of(S._replace(values=G[..., h])) for h in range(G.shape[-1])], -1)).sum().backward()
        gw = torch.stack([dense_of(S._replace(values=w.grad[..., h])) for h in range(G.shape[-1])], -1)
        torch.testing.assert_close(gw, (Dw.grad * mask[..., None]).to(dtype), **TOL[dtype])


@pytest.mark.parametrize("kind", FNS)
def test_multi_head_gradcheck_and_second_derivatives(path, kind):
    S, _ = multi_head("batched_coo", heads=2, seed=21)
    vals = S.values.clone().requires_grad_()
    for dim in (-1, -2):
        fn = lambda v: FNS[kind](S._replace(values=v), dim).values  # noqa: E731
        assert torch.autograd.gradcheck(fn, (vals,))
        assert torch.autograd.gradgradcheck(fn, (vals,))


@pytest.mark.parametrize("heads", [1, 8, 20])
def test_multi_head_same_bits_for_any_thread_count(heads):
    """(nnz, H) values (20: more heads than the kernels do together) give the same bits
    for 1, 2 and 5 threads, and head 0 the bits of the single-head op."""
    D = random_dense((300, 200), torch.float32, seed=22, density=0.3, scale=2)
    S = SparseCSR.from_torch(D.to_sparse_csr())
    values = torch.randn(S.values.shape[0], heads, generator=torch.Generator().manual_seed(0))
    results = []
    for t in (1, 2, 5):
        with num_threads(t):
            w = values.clone().requires_grad_()
            Y = sparse_softmax(S._replace(values=w)).values
            (Y * torch.linspace(-1, 1, Y.numel()).reshape(Y.shape)).sum().backward()
            results.append((Y.detach(), w.grad))
    for r in results[1:]:
        assert all(torch.equal(x, y) for x, y in zip(results[0], r))
    assert torch.equal(results[0][0][:, 0], sparse_softmax(S._replace(values=values[:, 0].contiguous())).values)


def test_multi_head_custom_op_opcheck():
    S, _ = multi_head("batched_csr", heads=3, seed=24)
    a = S.values.clone().requires_grad_()
    args = (S.crow_indices, S.col_indices, list(S.size))
    for by_rows in (True, False):
        torch.library.opcheck(torch.ops.tsgu.softmax.default, (*args, a, by_rows, False))
        y = torch.ops.tsgu.softmax(*args, a, by_rows, True).detach().requires_grad_()
        torch.library.opcheck(torch.ops.tsgu.softmax_grad.default, (*args, y, torch.randn_like(y), by_rows, True))


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_cuda_matches_cpu(layout):
    D = random_dense((3, 6, 4), seed=17, same_pattern=True, scale=2)
    A = to_layout(D, layout)
    for kind in FNS:
        for dim in (-1, -2):
            leaf = A.cuda().requires_grad_()
            Y = FNS[kind](leaf, dim)
            Y.values().sum().backward()
            cpu = A.clone().requires_grad_()
            Yc = FNS[kind](cpu, dim)
            Yc.values().sum().backward()
            torch.testing.assert_close(Y.values().cpu(), Yc.values())
            torch.testing.assert_close(leaf.grad.values().cpu(), cpu.grad.values())


@pytest.mark.skipif(SANITIZED, reason="RLIMIT_AS cannot be combined with ASan's shadow memory")
def test_softmax_hypersparse_coo_memory_is_o_nnz():
    """Issue 26, defect 4: the softmax of a COO of 2**31 + 5 rows allocated its row
    pointers (17 GB).  Now rows and columns, softmax and log, forward and backward run
    through its non-empty rows under a 4 GB address-space limit, the result (on A's
    pattern, A's shape) torch.softmax's of the compacted 2-row matrix, its absent
    entries -inf."""
    r = run_child("""
        n = 2**31 + 5
        idx, v = torch.tensor([[0, 0, n - 1], [0, 2, 1]]), torch.tensor([1.0, 3.0, 5.0], dtype=torch.float64)
        g = torch.tensor([1.0, -2.0, 3.0], dtype=torch.float64)
        at = (torch.tensor([0, 0, 1]), torch.tensor([0, 2, 1]))       # the compacted rows
        for fn, ref in ((sparse_softmax, torch.softmax), (sparse_log_softmax, torch.log_softmax)):
            for dim in (-1, -2):
                A = torch.sparse_coo_tensor(idx, v, (n, 3), is_coalesced=True).requires_grad_()
                y = fn(A, dim)
                assert y.shape == (n, 3) and torch.equal(y._indices(), idx), y
                y.backward(torch.sparse_coo_tensor(idx, g, (n, 3)))
                w = v.clone().requires_grad_()
                D = torch.full((2, 3), float("-inf"), dtype=torch.float64).index_put(at, w)
                z = ref(D, dim)[at]
                z.backward(g)
                torch.testing.assert_close(y._values(), z.detach())
                torch.testing.assert_close(A.grad._values(), w.grad)
        print("OK")
    """, timeout=300, memory_limit=4 << 30)
    assert r.returncode == 0 and r.stdout.strip() == "OK", r.stdout + r.stderr[-3000:]


# ------------------------------------------- columns: each thread owns a range of them
def _column_skewed(dtype, heads, batched, seed=30):
    """A SparseCSR of more than 2 * 2**16 entries (softmax_cols.c takes a second thread
    from 2**17 on), every row holding column 0 and up to 60 columns drawn towards the
    first ones (column j with density ~ 1/sqrt(j)): the columns' entries far from even,
    so an even split of the columns would give one thread most of them; (nnz,) values
    (heads 0) or (nnz, heads)."""
    g = torch.Generator().manual_seed(seed)
    b, n, m = (2, 1800, 400) if batched else (1, 3600, 400)
    rows = torch.arange(b * n).repeat_interleave(61)
    cols = (torch.rand(rows.shape, generator=g) ** 2 * m).long()
    cols[::61] = 0
    key = torch.unique(rows * m + cols)
    rows, cols = key // m, key % m
    idx = torch.stack([rows // n, rows % n, cols]) if batched else torch.stack([rows, cols])
    A = torch.sparse_coo_tensor(idx, torch.ones(key.numel()), (b, n, m) if batched else (n, m)).coalesce()
    S = SparseCSR.from_torch(A)
    values = torch.randn((key.numel(), heads) if heads else (key.numel(),), generator=g, dtype=torch.float64) * 3
    values[7] = float("-inf")                                   # a -inf beside finite values
    return S._replace(values=values.to(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("heads", [0, 3])
@pytest.mark.parametrize("batched", [False, True], ids=["2d", "batched"])
def test_columns_same_bits_for_any_thread_count_on_a_skewed_matrix(dtype, heads, batched):
    """Softmax and log-softmax over columns (softmax_cols.c, softmax_cols_grad.c: a range
    of columns per thread, cut by a sample of the entries) give the same bits, forward
    and backward, for 1 and 2 threads on a matrix whose columns hold very different
    counts; and head h of several the bits of the single-head op on values[..., h]."""
    S = _column_skewed(dtype, heads, batched)
    assert S.values.shape[0] >= 2 * 2**16
    W = torch.linspace(-1, 1, S.values.numel(), dtype=torch.float64).reshape(S.values.shape).to(dtype)
    results = []
    for t in (1, 2):
        with num_threads(t):
            for fn in FNS.values():
                w = S.values.clone().requires_grad_()
                Y = fn(S._replace(values=w), -2).values
                (Y * W).sum().backward()
                results.append((Y.detach(), w.grad))
                if heads and t == 2:
                    one = fn(S._replace(values=S.values[:, 1].contiguous()), -2).values
                    assert torch.equal(Y[:, 1].detach(), one)
    for one, two in zip(results[:2], results[2:]):
        assert all(torch.equal(x, y) for x, y in zip(one, two))


@pytest.mark.parametrize("kind", FNS)
def test_columns_of_a_large_matrix_match_the_masked_dense_softmax(kind):
    """The column route on 2 threads against the masked dense softmax (float64, dense
    autograd for the gradient) on the column-skewed matrix: the thread split changes
    nothing."""
    S = _column_skewed(torch.float64, 0, batched=True)
    w = S.values.clone().requires_grad_()
    with num_threads(2):
        Y = FNS[kind](S._replace(values=w), -2).values
    G = torch.randn(Y.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    with num_threads(2):
        (Y * G).sum().backward()
    mask = dense_of(S._replace(values=torch.ones_like(S.values))) != 0
    D = dense_of(S._replace(values=S.values.clone())).requires_grad_()
    X = D.masked_fill(~mask, float("-inf"))
    ref = (torch.log_softmax if kind == "log_softmax" else torch.softmax)(X, -2)
    torch.testing.assert_close(Y.detach(), ref[mask], **TOL[torch.float64])
    (ref[mask] * G).sum().backward()
    torch.testing.assert_close(w.grad, D.grad[mask], **TOL[torch.float64])


@pytest.mark.parametrize("threads", [1, 2])
def test_columns_malformed_indices_raise_for_any_thread_count(threads):
    """A column out of range, negative or out of order late in a large SparseCSR is the
    same "malformed sparse matrix" ValueError over columns as over rows, for 1 and 2
    threads, forward and backward kernels alike."""
    from torchsparsegradutils import _C
    S = _column_skewed(torch.float64, 0, batched=False)
    ptr, col = S.crow_indices, S.col_indices
    row = int(torch.searchsorted(ptr, ptr[-1] - 100, right=True)) - 1    # a row near the end
    e = int(ptr[row]) + 1
    nnz, (n, m) = col.numel(), S.size
    for bad in (m, -1, int(col[e - 1])):
        c = col.clone()
        c[e] = bad
        messages = []
        with num_threads(threads):
            for fn in FNS.values():
                for dim in (-1, -2):
                    with pytest.raises(ValueError, match="malformed sparse matrix") as got:
                        fn(SparseCSR(ptr, c, S.values, S.size), dim)
                    messages.append(str(got.value))
            y = torch.empty(nnz, 1, dtype=torch.float64)
            for call in (lambda: _C.softmax_cols(ptr, c, y, 1, n, m, 1, False, y.clone(), threads),
                         lambda: _C.softmax_cols_grad(ptr, c, 1, n, m, 1, y, y, True, y.clone(), threads),
                         lambda: _C.softmax_rows(ptr, c, y, 1, n, m, 1, False, False, y.clone(), threads)):
                with pytest.raises(ValueError, match="malformed sparse matrix") as got:
                    call()
                messages.append(str(got.value))
        assert len(set(messages)) == 1, messages
