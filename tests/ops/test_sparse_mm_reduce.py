"""Tests of sparse_mm(A, B, reduce) with reduce "mean", "amax" and "amin".

References: torch.sparse.mm(A_csr, B, reduce) itself where PyTorch has it (2D CSR on the
CPU: results and gradients, bit for bit for amax/amin), and elsewhere (batched, COO,
SparseCSR, 16-bit, the torch-ops route) the scatter formulation in float64 with
PyTorch's autograd (index_select of B's rows, scatter_reduce by row), or PyTorch's
own CSR reduce on the block-diagonal 2D form of a batch.  Also gradcheck, PyTorch's
tie and NaN rule, empty rows, thread counts, the no-grad path, torch.compile of a
SparseCSR model, the custom operators (opcheck, second derivatives) and the errors;
the hygiene sweep and property tests take the op from the registry (support/registry.py)
("sparse_mm_reduce").
"""
import warnings

import pytest
import torch
from support.checks import num_threads
from support.children import child_outcomes
from support.operands import HALF_DTYPES, entry_indices, random_dense, seeded, to_sparse

from torchsparsegradutils import SparseCSR, _ops, sparse_coo_tensor, sparse_csr_tensor, sparse_mm
from torchsparsegradutils._core.intake import as_csr
from torchsparsegradutils._core.view import op_args

REDUCE = ["mean", "amax", "amin"]
HAS_CUDA = torch.cuda.is_available()
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float64: dict(rtol=1e-12, atol=1e-12),
       torch.float16: dict(rtol=4e-3, atol=4e-3), torch.bfloat16: dict(rtol=3e-2, atol=3e-2)}


def _quiet(fn, *args):
    """fn(*args) without PyTorch's beta warnings about sparse CSR tensors."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args)


# ---------------------------------------------------------------- inputs and references
def make_case(layout, batched, n, m, p, nnz, dtype, itype=torch.int64, seed=0, empty_rows=True):
    """A (layout, from a random dense matrix with one empty row), B, G."""
    gen = seeded("reduce", layout, batched, n, m, p, nnz, str(dtype), seed)
    D = random_dense((3, n, m) if batched else (n, m), dtype, gen, nnz=nnz, empty_rows=empty_rows)
    A = to_sparse(D, layout, itype, gen)
    B = torch.randn(*D.shape[:-2], m, p, generator=gen, dtype=dtype)
    G = torch.randn(*D.shape[:-2], n, p, generator=gen, dtype=dtype)
    return A, B, G


def coalesced_entries(A):
    """((batch?, row, col) index tensors, values) of A's stored entries, duplicates summed,
    in row-major order: the order of A.grad's values."""
    if A.layout == torch.sparse_coo:
        A = A.detach().coalesce()
        return tuple(A.indices()), A.values()
    return entry_indices(A), A.values().detach().reshape(-1)


def scatter_reference(A, B, G, reduce):
    """(C, grad of A's coalesced values, grad_B) in float64 by the scatter formulation with
    PyTorch's autograd: products of the entries with B's rows (index_select), reduced by
    row with scatter_reduce (include_self=False: a row without entries stays 0)."""
    idx, vals = coalesced_entries(A)
    shape, p = A.shape, B.shape[-1]
    b, n, m = (shape[0] if len(shape) == 3 else 1), shape[-2], shape[-1]
    rows = idx[0] * n + idx[1] if len(shape) == 3 else idx[0]
    cols = idx[0] * m + idx[2] if len(shape) == 3 else idx[1]
    v = vals.double().requires_grad_()
    Bd = B.detach().double().requires_grad_()
    P = v.unsqueeze(1) * Bd.reshape(b * m, p).index_select(0, cols)
    C = torch.zeros(b * n, p, dtype=torch.float64).scatter_reduce(0, rows.unsqueeze(1).expand(-1, p), P, reduce,
                                                                 include_self=False)
    C = C.reshape(*shape[:-1], p)
    gv, gB = torch.autograd.grad(C, (v, Bd), G.double())
    return C.detach(), gv, gB


def grad_values(A, grad):
    """A.grad (COO or CSR, on A's coalesced pattern) as values in row-major order."""
    if grad.layout == torch.sparse_coo:
        assert torch.equal(grad._indices(), A.detach().coalesce().indices())
        return grad._values()
    assert torch.equal(grad.crow_indices(), A.crow_indices()) and torch.equal(grad.col_indices(), A.col_indices())
    return grad.values().reshape(-1)


def ours(A, B, G, reduce):
    """(C, grad of A's values, grad_B) of sparse_mm with A and B leaves."""
    A = A.detach().requires_grad_()
    B = B.detach().clone().requires_grad_()
    C = sparse_mm(A, B, reduce)
    C.backward(G)
    return C.detach(), grad_values(A, A.grad), B.grad


def check_close(got, want, dtype):
    for g, w in zip(got, want):
        torch.testing.assert_close(g.double(), w.double(), **TOL[dtype], equal_nan=True)


# ---------------------------------------------------------------- against torch.sparse.mm (2D CSR)
def torch_csr(A, B, G, reduce):
    """torch.sparse.mm(A, B, reduce) on a 2D CSR leaf: (C, A.grad values, B.grad)."""
    A = A.detach().requires_grad_()
    B = B.detach().clone().requires_grad_()
    C = _quiet(torch.sparse.mm, A, B, reduce)
    C.backward(G)
    return C.detach(), A.grad.values(), B.grad


SHAPES = [(7, 5, 3, 12), (30, 40, 17, 200), (12, 9, 16, 40), (10, 8, 64, 30), (9, 7, 130, 25), (6, 4, 1, 0)]


@pytest.mark.parametrize("reduce", ["sum"] + REDUCE)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("itype", [torch.int32, torch.int64])
@pytest.mark.parametrize("n,m,p,nnz", SHAPES)
def test_matches_torch_csr_reduce(path, reduce, dtype, itype, n, m, p, nnz):
    """Results and gradients of PyTorch's CSR reduce; for amax/amin on the C kernels the
    same bits (the same products compared, the same entry taken, the gradients summed
    in PyTorch's order)."""
    A, B, G = make_case("csr", False, n, m, p, nnz, dtype, itype)
    got, want = ours(A, B, G, reduce), torch_csr(A, B, G, reduce)
    if reduce in ("amax", "amin") and path == "c_kernels":
        assert all(torch.equal(g, w) for g, w in zip(got, want))
    else:
        check_close(got, want, dtype)


@pytest.mark.parametrize("reduce", REDUCE)
@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_16_bit_matches_torch_csr_reduce(path, reduce, dtype):
    """16-bit values: products and sums in float32, rounded once.  amax/amin take the same
    entries as PyTorch (which compares in float32 too); mean within the dtype's rounding
    (PyTorch rounds the sum, then the quotient)."""
    A, B, G = make_case("csr", False, 40, 30, 20, 300, dtype)
    got, want = ours(A, B, G, reduce), torch_csr(A, B, G, reduce)
    if reduce != "mean" and path == "c_kernels":
        assert torch.equal(got[0], want[0])
    check_close(got, want, dtype)


# ---------------------------------------------------------------- against the scatter formulation
GRID = [("coo", False), ("coo_uncoalesced", False), ("coo_sliced", False), ("csr", False), ("csr_strided", False),
        ("coo", True), ("coo_uncoalesced", True), ("csr", True)]


@pytest.mark.parametrize("reduce", REDUCE)
@pytest.mark.parametrize("layout,batched", GRID)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64] + list(HALF_DTYPES))
@pytest.mark.parametrize("n,m,p,nnz", [(7, 5, 3, 12), (20, 15, 16, 60), (9, 7, 70, 25)])
def test_matches_scatter_reference(path, reduce, layout, batched, dtype, n, m, p, nnz):
    """Every layout, batched or not, every dtype: the scatter formulation in float64 (random
    values: no ties, so scatter_reduce's even split of tied gradients never applies)."""
    A, B, G = make_case(layout, batched, n, m, p, nnz, dtype)
    check_close(ours(A, B, G, reduce), scatter_reference(A, B, G, reduce), dtype)


@pytest.mark.parametrize("reduce", REDUCE)
@pytest.mark.parametrize("kind", ["csr", "batched_csr", "stacked"])
def test_sparse_csr_operand(path, reduce, kind):
    """A SparseCSR (2D, batched CSR, and the stacked-rows layout a batched COO becomes):
    gradients into its values."""
    A, B, G = make_case("csr" if kind != "stacked" else "coo", kind != "csr", 10, 8, 5, 30, torch.float64)
    S = SparseCSR.from_torch(A)
    w = S.values.clone().requires_grad_()
    Bl = B.clone().requires_grad_()
    C = sparse_mm(S._replace(values=w), Bl, reduce)
    C.backward(G)
    check_close((C.detach(), w.grad.reshape(-1), Bl.grad), scatter_reference(A, B, G, reduce), torch.float64)
    assert torch.equal(sparse_mm(S, B, reduce), C.detach())            # the no-grad path


@pytest.mark.parametrize("reduce", REDUCE)
@pytest.mark.parametrize("make", [sparse_csr_tensor, sparse_coo_tensor, torch.sparse_coo_tensor])
def test_values_gradient_through_constructors(reduce, make):
    """Learnable values given to our constructors or torch's COO one get their gradient."""
    A, B, G = make_case("csr", False, 12, 9, 4, 40, torch.float64)
    w = A.values().clone().requires_grad_()
    if make is sparse_csr_tensor:
        M = make(A.crow_indices(), A.col_indices(), w, A.shape)
    else:
        M = make(torch.stack(entry_indices(A)), w, A.shape)
    C = sparse_mm(M, B, reduce)
    C.backward(G)
    _, gv, _ = scatter_reference(A, B, G, reduce)
    torch.testing.assert_close(w.grad, gv)


@pytest.mark.parametrize("reduce", REDUCE)
def test_hypersparse_coo(path, reduce):
    """Far more rows than entries: only the non-empty rows are kept; the others give 0."""
    A = torch.sparse_coo_tensor([[0, 99, 99, 57], [1, 2, 0, 2]], [1.0, 2.0, -1.0, 3.0], (100, 3),
                                dtype=torch.float64)
    B = torch.randn(3, 4, dtype=torch.float64, generator=seeded("hyper"))
    G = torch.randn(100, 4, dtype=torch.float64, generator=seeded("hyper G"))
    assert as_csr(A.coalesce(), compress_rows=True).rows is not None
    check_close(ours(A, B, G, reduce), scatter_reference(A, B, G, reduce), torch.float64)
    Ab = torch.sparse_coo_tensor([[0, 1, 1], [0, 40, 99], [1, 2, 0]], [1.0, 2.0, -1.0], (2, 100, 3),
                                 dtype=torch.float64)
    Bb, Gb = torch.stack([B, -B]), torch.stack([G, G.flip(0)])
    check_close(ours(Ab, Bb, Gb, reduce), scatter_reference(Ab, Bb, Gb, reduce), torch.float64)


# ---------------------------------------------------------------- gradcheck and second derivatives
@pytest.mark.parametrize("reduce", REDUCE)
@pytest.mark.parametrize("layout", ["coo", "coo_uncoalesced", "csr"])
@pytest.mark.parametrize("batched", [False, True])
def test_gradcheck(path, reduce, layout, batched):
    """float64 gradcheck through the values and B; amax/amin away from ties (random values:
    the products of a row differ by far more than gradcheck's step)."""
    A, B, _ = make_case(layout, batched, 6, 5, 3, 14, torch.float64, seed=1)
    B = B.requires_grad_()
    if layout == "csr":
        crow, col = A.crow_indices(), A.col_indices()
        values = A.values().clone().requires_grad_()

        def f(v, B):
            return sparse_mm(sparse_csr_tensor(crow, col, v, A.shape), B, reduce)
    else:
        idx = A._indices()
        values = A._values().clone().requires_grad_()

        def f(v, B):
            return sparse_mm(torch.sparse_coo_tensor(idx, v, A.shape), B, reduce)
    assert torch.autograd.gradcheck(f, (values, B))


@pytest.mark.parametrize("reduce", REDUCE)
@pytest.mark.parametrize("batched", [False, True])
def test_gradgradcheck(reduce, batched):
    """Second derivatives (backward with create_graph=True) through the custom operators."""
    A, B, _ = make_case("csr", batched, 6, 5, 3, 14, torch.float64, seed=2)
    crow, col = A.crow_indices(), A.col_indices()
    values = A.values().clone().requires_grad_()
    B = B.requires_grad_()
    assert torch.autograd.gradgradcheck(lambda v, B: sparse_mm(sparse_csr_tensor(crow, col, v, A.shape), B, reduce),
                                        (values, B))
    S = SparseCSR(crow, col, values, tuple(A.shape))
    assert torch.autograd.gradgradcheck(lambda v, B: sparse_mm(S._replace(values=v), B, reduce), (values, B))


# ---------------------------------------------------------------- ties, NaN, infinities
def _one_row(vals, Brows, layout="csr"):
    """A 1 x len(vals) matrix storing every entry, and B with the given rows (float64)."""
    k = len(vals)
    D = torch.tensor([vals], dtype=torch.float64)
    A = torch.sparse_csr_tensor(torch.tensor([0, k]), torch.arange(k), D[0], (1, k)) if layout == "csr" else \
        torch.sparse_coo_tensor(torch.stack([torch.zeros(k, dtype=torch.long), torch.arange(k)]), D[0], (1, k))
    return A, torch.tensor(Brows, dtype=torch.float64)


INF, NAN = float("inf"), float("nan")
SPECIAL = {   # row values, B's rows (one per entry)
    "all_tied": ([1.0, 1.0, 1.0], [[2.0, 5.0], [2.0, 5.0], [2.0, 5.0]]),
    "tie_after_a_smaller": ([1.0, 2.0, 1.0], [[1.0, 0.0], [1.0, 0.0], [2.0, 0.0]]),
    "scaled_ties": ([2.0, 1.0, 4.0], [[1.0, -1.0], [2.0, -2.0], [0.5, -0.5]]),
    "nan_first": ([1.0, 1.0, 1.0], [[NAN, 1.0], [2.0, NAN], [3.0, NAN]]),
    "nan_last": ([1.0, 1.0, 1.0], [[2.0, 1.0], [3.0, 2.0], [NAN, 3.0]]),
    "zero_times_inf": ([0.0, 1.0], [[INF, -INF], [1.0, 2.0]]),
    "all_minus_inf": ([1.0, 1.0], [[-INF, INF], [-INF, INF]]),
    "infinities": ([1.0, -1.0], [[INF, -INF], [INF, 1.0]]),
    "signed_zeros": ([1.0, -1.0], [[0.0, -0.0], [0.0, 0.0]]),
}


@pytest.mark.parametrize("reduce", ["amax", "amin"])
@pytest.mark.parametrize("name", sorted(SPECIAL))
def test_ties_nan_and_infinities_follow_pytorch(path, reduce, name):
    """PyTorch's rule: the first entry of a tie; a NaN product always taken (so the last
    NaN); a row whose products never beat the start value (-inf for amax) keeps it, and
    its gradient goes nowhere.  Values and gradients as torch.sparse.mm's (NaN where it
    has NaN)."""
    A, B = _one_row(*SPECIAL[name])
    G = torch.tensor([[1.0, 10.0]], dtype=torch.float64)
    got, want = ours(A, B, G, reduce), torch_csr(A, B, G, reduce)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, equal_nan=True, rtol=0, atol=0)


@pytest.mark.parametrize("reduce", ["amax", "amin"])
@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_ties_in_a_batch(path, reduce, layout):
    """Ties in batched COO and CSR: the entries PyTorch's CSR reduce takes on the same rows
    (its 2D kernel on the block-diagonal form of the batch), items on their own columns."""
    gen = seeded("batched ties", layout)
    mask = torch.rand(2, 6, 5, generator=gen) < 0.6
    mask[:, :, 0] = True
    mask = mask & mask.all(0, keepdim=True) if layout == "csr" else mask   # batched CSR: one nnz per item
    D = (torch.randint(1, 3, (2, 6, 5), generator=gen).double()) * mask   # values 1 or 2: many ties
    B = torch.randint(-1, 2, (2, 5, 3), generator=gen).double()
    G = torch.randn(2, 6, 3, generator=gen, dtype=torch.float64)
    A = D.to_sparse_csr() if layout == "csr" else D.to_sparse()
    C, gv, gB = ours(A, B, G, reduce)
    block = torch.block_diag(D[0], D[1]).to_sparse_csr()
    Cr, gvr, gBr = torch_csr(block, B.reshape(10, 3), G.reshape(12, 3), reduce)
    assert torch.equal(C.reshape(12, 3), Cr) and torch.equal(gv, gvr) and torch.equal(gB.reshape(10, 3), gBr)


@pytest.mark.parametrize("reduce", ["amax", "amin"])
def test_tied_gradient_goes_to_the_first_entry(path, reduce):
    """Stated by hand: three equal products; each output's whole gradient goes to entry 0."""
    A, B = _one_row([1.0, 1.0, 1.0], [[2.0, 5.0], [2.0, 5.0], [2.0, 5.0]], "coo")
    G = torch.tensor([[3.0, 7.0]], dtype=torch.float64)
    C, gv, gB = ours(A, B, G, reduce)
    assert torch.equal(C, torch.tensor([[2.0, 5.0]], dtype=torch.float64))
    assert torch.equal(gv, torch.tensor([3.0 * 2.0 + 7.0 * 5.0, 0.0, 0.0], dtype=torch.float64))
    assert torch.equal(gB, torch.tensor([[3.0, 7.0], [0.0, 0.0], [0.0, 0.0]], dtype=torch.float64))


# ---------------------------------------------------------------- empty cases
@pytest.mark.parametrize("reduce", REDUCE)
def test_empty_rows_and_sizes(path, reduce):
    """A row without entries gives 0 and no gradient; nnz = 0, n = 0, m = 0, p = 0 work."""
    A = torch.tensor([[0.0, 0.0], [3.0, -1.0]], dtype=torch.float64).to_sparse_csr()
    B = torch.tensor([[1.0, -2.0], [4.0, 1.0]], dtype=torch.float64)
    C, gv, gB = ours(A, B, torch.ones(2, 2, dtype=torch.float64), reduce)
    assert torch.equal(C[0], torch.zeros(2, dtype=torch.float64))
    check_close((C, gv, gB), scatter_reference(A, B, torch.ones(2, 2, dtype=torch.float64), reduce), torch.float64)
    for n, m, p in [(0, 4, 3), (4, 0, 3), (4, 3, 0), (0, 0, 0), (3, 3, 2)]:        # (3, 3, 2): nnz = 0
        for Z in (torch.zeros(n, m).to_sparse(), torch.zeros(n, m).to_sparse_csr(), torch.zeros(2, n, m).to_sparse()):
            Bz = torch.randn(*Z.shape[:-2], m, p)
            Zl, Bl = Z.requires_grad_(), Bz.requires_grad_()
            Cz = sparse_mm(Zl, Bl, reduce)
            assert Cz.shape == (*Z.shape[:-1], p) and not Cz.any()
            Cz.sum().backward()
            assert not Bl.grad.any() and Bl.grad.shape == Bz.shape


# ---------------------------------------------------------------- threads and the no-grad path
def large_batched_csr(b, n, m, per_row, p, dtype, gen):
    """A batched CSR (b, n, m) with per_row entries in every row (int32 indices), B and G."""
    cols = (torch.randint(0, m, (b, n, 1), generator=gen) + torch.arange(per_row) * (m // per_row)) % m
    cols = cols.sort(-1).values.reshape(b, -1).int()
    crow = (torch.arange(n + 1, dtype=torch.int32) * per_row).expand(b, -1).contiguous()
    A = torch.sparse_csr_tensor(crow, cols, torch.randn(b, n * per_row, generator=gen).to(dtype), (b, n, m))
    return A, torch.randn(b, m, p, generator=gen).to(dtype), torch.randn(b, n, p, generator=gen).to(dtype)


@pytest.mark.parametrize("reduce", REDUCE)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("p", [16, 130])
def test_same_bits_for_any_thread_count(reduce, dtype, p):
    """Batched (3 items), large enough that every kernel splits over 5 threads: at p = 130
    grad_B's owners are column blocks, at p = 16 row ranges that fall inside an item;
    same bits on 1, 2 and 5 threads."""
    A, B, G = large_batched_csr(3, 30000 if p == 16 else 4000, 2000, 4, p, dtype, seeded("threads", p))
    results = []
    for t in (1, 2, 5):
        with num_threads(t):
            results.append(ours(A, B, G, reduce))
    for other in results[1:]:
        assert all(torch.equal(x, y) for x, y in zip(results[0], other))


@pytest.mark.parametrize("reduce", REDUCE)
@pytest.mark.parametrize("layout", ["coo", "coo_uncoalesced", "csr"])
@pytest.mark.parametrize("batched", [False, True])
def test_no_grad_path_gives_the_same_bits(path, reduce, layout, batched):
    """Without a graph to record, sparse_mm skips the Function (and amax/amin the arg):
    the same bits as the recorded forward."""
    A, B, _ = make_case(layout, batched, 20, 15, 5, 60, torch.float32)
    recorded = sparse_mm(A, B.clone().requires_grad_(), reduce)
    plain = sparse_mm(A, B, reduce)
    assert recorded.grad_fn is not None and plain.grad_fn is None
    assert torch.equal(plain, recorded.detach())


def test_inputs_unchanged_and_inplace_edits_detected():
    """(Also swept for every layout in test_hygiene.py.)  The inputs keep their values; an
    edit of B or of A's values between forward and backward raises autograd's error."""
    A, B, G = make_case("csr", False, 10, 8, 4, 30, torch.float64)
    for reduce in REDUCE:
        w = A.values().clone().requires_grad_()
        Bl = B.clone().requires_grad_()
        before = (w.detach().clone(), Bl.detach().clone(), A.crow_indices().clone(), A.col_indices().clone())
        C = sparse_mm(sparse_csr_tensor(A.crow_indices(), A.col_indices(), w, A.shape), Bl, reduce)
        assert all(torch.equal(x, y) for x, y in zip(before, (w, Bl, A.crow_indices(), A.col_indices())))
        for edited in (w, Bl):
            C = sparse_mm(sparse_csr_tensor(A.crow_indices(), A.col_indices(), w, A.shape), Bl, reduce)
            with torch.no_grad():
                edited.mul_(2)
            with pytest.raises(RuntimeError, match="modified by an inplace operation"):
                C.backward(G)


# ---------------------------------------------------------------- torch.compile and the custom ops
class _MaxPoolGNN(torch.nn.Module):
    """Two message-passing layers over a SparseCSR: max, then mean aggregation."""

    def __init__(self, f, h, c, reduce):
        super().__init__()
        self.l1, self.l2, self.reduce = torch.nn.Linear(f, h), torch.nn.Linear(h, c), reduce

    def forward(self, A, X):
        H = torch.relu(self.l1(sparse_mm(A, X, self.reduce)))
        return self.l2(sparse_mm(A, H, "mean"))


COMPILE_CASES = [("aot_eager", r, b) for r in REDUCE for b in (False, True)] + [("inductor", "amax", False)]


@pytest.mark.parametrize("backend,reduce,batched", COMPILE_CASES)
def test_fullgraph_compile_of_a_sparse_csr_model(backend, reduce, batched):
    """fullgraph=True (no graph break) on a SparseCSR; outputs and gradients (into the
    values, X and the layers) as eager on the torch sparse tensor."""
    torch._dynamo.reset()
    gen = seeded("compile", reduce, batched)
    n, b = 60, (2,) if batched else ()
    D = torch.rand(*b, n, n, generator=gen) * (torch.rand(*b, n, n, generator=gen) < 0.1)
    A = D.to_sparse()
    S = SparseCSR.from_torch(A)
    w = S.values.clone().requires_grad_()
    X = torch.randn(*b, n, 6, generator=gen).requires_grad_()
    model = _MaxPoolGNN(6, 5, 3, reduce)
    try:
        compiled = torch.compile(model, fullgraph=True, backend=backend)
        out_c = compiled(S._replace(values=w), X)
        grads_c = torch.autograd.grad(out_c.square().sum(), [w, X, *model.parameters()])
    finally:
        torch._dynamo.reset()
    Al = A.detach().requires_grad_()
    out_e = model(Al, X)
    grads_e = torch.autograd.grad(out_e.square().sum(), [Al, X, *model.parameters()])
    torch.testing.assert_close(out_c, out_e, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grads_c[0], grads_e[0].coalesce().values(), rtol=1e-5, atol=1e-5)
    for gc, ge in zip(grads_c[1:], grads_e[1:]):
        torch.testing.assert_close(gc, ge, rtol=1e-5, atol=1e-5)


def _op_operands(kind):
    A, B, G = make_case("csr" if kind == "csr" else "coo", kind == "batched", 8, 6, 3, 20, torch.float64, seed=5)
    if kind == "hypersparse":
        A = torch.sparse_coo_tensor([[3, 31, 31], [1, 2, 4]], [2.0, -1.0, 0.5], (40, 6), dtype=torch.float64)
        G = torch.randn(40, 3, dtype=torch.float64, generator=seeded("op G"))
    view = as_csr(A.coalesce() if A.layout == torch.sparse_coo else A, compress_rows=True)
    return view, view.values.clone().requires_grad_(), B.requires_grad_(), G.requires_grad_()


@pytest.mark.parametrize("kind", ["csr", "coo", "batched", "hypersparse"])
def test_opcheck(kind):
    """torch.library.opcheck of the reduce operators: schema, fake tensors, autograd
    registration and AOT dispatch with dynamic shapes."""
    view, a, X, G = _op_operands(kind)
    pattern = op_args(view)
    _, arg = _ops.spmm_arg(view, a.detach(), X.detach(), False)
    checks = [(torch.ops.tsgu.spmm.default, (*pattern, a, X, True)),
              (torch.ops.tsgu.spmm_t.default, (*pattern, a, G, True)),
              (torch.ops.tsgu.sddmm.default, (*pattern, G, X, True)),
              (torch.ops.tsgu.spmm_arg.default, (*pattern, a, X, False)),
              (torch.ops.tsgu.spmm_arg.default, (*pattern, a, X, True)),
              (torch.ops.tsgu.spmm_t_arg.default, (*pattern, a, arg, G)),
              (torch.ops.tsgu.sddmm_arg.default, (*pattern, arg, G, X)),
              (torch.ops.tsgu.gather_arg.default, (*pattern, a, arg, X))]
    for op, args in checks:
        torch.library.opcheck(op, args)


@pytest.mark.parametrize("kind", ["csr", "coo", "batched", "hypersparse"])
def test_arg_ops_gradgradcheck(kind):
    """The arg operators are each other's derivatives, to any order."""
    view, a, X, G = _op_operands(kind)
    _, arg = _ops.spmm_arg(view, a.detach(), X.detach(), True)
    assert torch.autograd.gradgradcheck(lambda a, X: _ops.spmm_arg(view, a, X, True)[0], (a, X))
    assert torch.autograd.gradgradcheck(lambda a, G: _ops.spmm_t_arg(view, a, arg, G), (a, G))
    assert torch.autograd.gradgradcheck(lambda G, X: _ops.sddmm_arg(view, arg, G, X), (G, X))


# ---------------------------------------------------------------- errors
@pytest.mark.parametrize("reduce", ["prod", "Mean", "", None, 1])
def test_unknown_reduce_is_a_value_error(reduce):
    """Ours: a ValueError naming the values allowed; PyTorch's (2-D CSR) an error too."""
    A, B = torch.eye(3).to_sparse_csr(), torch.randn(3, 2)
    with pytest.raises((RuntimeError, TypeError)):
        _quiet(torch.sparse.mm, A, B, reduce)
    with pytest.raises(ValueError, match="reduce must be one of 'sum', 'mean', 'amax' .or 'max'. or 'amin'"):
        sparse_mm(A, B, reduce)
    with pytest.raises(ValueError, match="reduce must be one of"):
        sparse_mm(SparseCSR.from_torch(A), B, reduce)


@pytest.mark.parametrize("layout", ["coo", "csr", "sparse_csr"])
@pytest.mark.parametrize("alias", ["max", "min"])
def test_max_and_min_are_amax_and_amin(alias, layout):
    """torch.sparse.mm's aliases: "max" and "min" give "amax" and "amin"'s values and
    gradients (and PyTorch's product, on a 2-D CSR)."""
    gen = seeded("reduce_alias", alias, layout)
    D = torch.randn(6, 5, generator=gen, dtype=torch.float64) * (torch.rand(6, 5, generator=gen) < 0.5)
    S = D.to_sparse_csr()
    B = torch.randn(5, 3, generator=gen, dtype=torch.float64)
    results = []
    for reduce in (alias, "a" + alias):
        v, X = S.values().clone().requires_grad_(), B.clone().requires_grad_()
        if layout == "coo":
            A = sparse_coo_tensor(D.to_sparse().indices(), v, D.shape)
        elif layout == "csr":
            A = sparse_csr_tensor(S.crow_indices(), S.col_indices(), v, D.shape)
        else:
            A = SparseCSR(S.crow_indices(), S.col_indices(), v, tuple(D.shape))
        out = sparse_mm(A, X, reduce)
        out.sum().backward()
        results.append((out.detach(), v.grad, X.grad))
    for a, b in zip(*results):
        assert torch.equal(a, b)
    torch.testing.assert_close(results[0][0], _quiet(torch.sparse.mm, S, B, alias))


@pytest.mark.parametrize("reduce", REDUCE)
@pytest.mark.parametrize("to_sparse_B", [torch.Tensor.to_sparse, torch.Tensor.to_sparse_csr])
def test_reduce_with_a_sparse_B_is_a_value_error(reduce, to_sparse_B):
    """The check the sparse @ sparse branch shares: reduce other than "sum" needs a dense B.
    (PyTorch: an error too, whether A is COO or CSR.)"""
    B = to_sparse_B(torch.randn(3, 2))
    for A in (torch.eye(3).to_sparse(), torch.eye(3).to_sparse_csr()):
        with pytest.raises((RuntimeError, NotImplementedError)):
            _quiet(torch.sparse.mm, A, B, reduce)
        with pytest.raises(ValueError, match="needs a dense B: with a sparse B, sparse_mm takes reduce='sum' only"):
            sparse_mm(A, B, reduce)


def test_reduce_keeps_the_error_contract():
    """The errors of sparse_mm's contract come first, whatever reduce is."""
    A = torch.eye(3).to_sparse()
    for reduce in REDUCE:
        with pytest.raises(ValueError, match="Incompatible inner dimensions"):
            sparse_mm(A, torch.randn(4, 2), reduce)
        with pytest.raises(TypeError, match="same dtype"):
            sparse_mm(A, torch.randn(3, 2, dtype=torch.float64), reduce)
        with pytest.raises(ValueError, match="COO or CSR"):
            sparse_mm(A.to_sparse_csc(), torch.randn(3, 2), reduce)
        if reduce != "sum":                        # a dense A is torch.sparse.mm's, without reduce
            with pytest.raises(ValueError, match="needs a sparse A"):
                sparse_mm(A.to_dense(), torch.randn(3, 2), reduce)


def test_malformed_arg_is_a_value_error():
    """The backward kernels check every arg against its row before reading through it (a
    direct call of the C entry points and of the torch-ops route, in a child process)."""
    setup = ("from torchsparsegradutils._core.native import _C\n"
             "from torchsparsegradutils._backends import torch_ops\n"
             "from torchsparsegradutils._core.intake import as_csr\n"
             "crow, col, val = torch.tensor([0, 2, 3]), torch.tensor([0, 2, 1]), torch.ones(3)\n"
             "G, B = torch.ones(2, 2), torch.ones(3, 2)\n"
             "arg = torch.tensor({arg}, dtype=torch.int32)\n"
             "inputs = [crow, col, val, G, B, arg]\n")
    calls = {"spmm_t_arg": "call = lambda: _C.spmm_t_arg(crow, col, val, 1, 2, 3, arg, G, torch.empty(3, 2), 1)",
             "sddmm_arg": "call = lambda: _C.sddmm_arg(crow, col, 1, 2, 3, arg, G, B, torch.empty(3), 1)",
             "torch_ops": "call = lambda: torch_ops.sddmm_arg(as_csr(torch.sparse_csr_tensor(crow, col, val, "
                          "(2, 3))), arg, G, B)"}
    args = {"beyond_row": [[0, 2], [0, -1]], "negative": [[0, -2], [0, 0]], "huge": [[0, 2**31 - 1], [0, 0]]}
    cases = {f"{c}/{a}": setup.format(arg=v) + src for c, src in calls.items() for a, v in args.items()}
    outcomes = child_outcomes(cases)
    bad = {k: o for k, o in outcomes.items() if o[0] != "ValueError" or "malformed arg" not in o[1]}
    assert not bad, bad


# ----------------------------------------- what torch.sparse.mm takes (the table of docs/sparse_mm.md)
def _table_operand(layout, batched):
    gen = seeded("table", layout, batched)
    D = torch.randn(*((2,) if batched else ()), 5, 4, generator=gen) * (torch.rand(5, 4, generator=gen) < 0.5)
    D[..., 0] = 1.0
    A = D.to_sparse_csr() if layout == "csr" else D.to_sparse()
    return A, torch.randn(*((2,) if batched else ()), 4, 3, generator=gen)


# (A's layout, batched, reduce) -> what torch.sparse.mm does on the CPU (None: works)
TORCH_CPU = {
    ("coo", False, None): None, ("csr", False, None): None,
    ("coo", True, None): RuntimeError, ("csr", True, None): RuntimeError,
    ("coo", False, "sum"): NotImplementedError, ("coo", True, "sum"): NotImplementedError,
    ("csr", False, "sum"): None, ("csr", True, "sum"): RuntimeError,
    **{(lay, b, r): (None if (lay, b) == ("csr", False) else NotImplementedError if lay == "coo" else RuntimeError)
       for lay in ("coo", "csr") for b in (False, True) for r in REDUCE},
}


@pytest.mark.parametrize("layout,batched,reduce", sorted(TORCH_CPU, key=str))
def test_readme_table_rows(layout, batched, reduce):
    """Each dense-B row of docs/sparse_mm.md's table of what torch.sparse.mm takes: PyTorch's
    behaviour on the CPU as the table states it, and ours working against the scatter
    reference (the plain product for reduce None) with gradients."""
    A, B = _table_operand(layout, batched)
    args = (A, B) if reduce is None else (A, B, reduce)
    outcome = TORCH_CPU[(layout, batched, reduce)]
    if outcome is None:
        _quiet(torch.sparse.mm, *args)
    else:
        with pytest.raises(outcome):
            _quiet(torch.sparse.mm, *args)
    G = torch.randn(*A.shape[:-1], B.shape[-1], generator=seeded("table G"))
    if reduce is None:
        Dd, Bd = A.to_dense().requires_grad_(), B.clone().requires_grad_()
        (Dd @ Bd).backward(G)
        want = (A.to_dense() @ B, Dd.grad[tuple(coalesced_entries(A)[0])], Bd.grad)
        A = A.detach().requires_grad_()
        Bl = B.clone().requires_grad_()
        C = sparse_mm(A, Bl)
        C.backward(G)
        got = (C.detach(), grad_values(A, A.grad), Bl.grad)
    else:
        got, want = ours(A, B, G, reduce), scatter_reference(A, B, G, reduce)
    check_close(got, want, torch.float32)


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("reduce", [None] + REDUCE)
@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_readme_table_cuda_rows(reduce, layout):
    """CUDA, 2-D: PyTorch's product works and its reduce (a CPU kernel only) does not; ours
    runs both (our CUDA kernels; PyTorch's ops for reduce)."""
    A, B = _table_operand(layout, False)
    G = torch.randn(5, 3, generator=seeded("table G"))
    if reduce is None:
        torch.testing.assert_close(_quiet(torch.sparse.mm, A.cuda(), B.cuda()).cpu(), A.to_dense() @ B)
        torch.testing.assert_close(sparse_mm(A.cuda(), B.cuda()).cpu(), A.to_dense() @ B)
        return
    with pytest.raises((NotImplementedError, RuntimeError)):
        _quiet(torch.sparse.mm, A.cuda(), B.cuda(), reduce)
    got = ours(A.cuda(), B.cuda(), G.cuda(), reduce)
    check_close([t.cpu() for t in got], scatter_reference(A, B, G, reduce), torch.float32)
