"""Tests of sparse_mm(A, B) with a sparse B (sparse @ sparse).

References: torch.sparse.mm itself where PyTorch has it (2D COO @ COO and CSR @ CSR:
values, layout, coalesced flag, and for COO @ COO the gradients), and elsewhere the
dense product in float64 with PyTorch's autograd, compared at the operands' stored
entries; gradcheck through the values.  Also the layer of the issue this answers, the
layout of the result for every pair of layouts, a sparse upstream gradient of any
pattern and a dense one, the torch-ops route, thread counts, batches, empty cases,
torch.compile of a SparseCSR model and the errors.  The hygiene sweep and property tests
take the op from the registry (support/registry.py) ("sparse_mm_sparse").
"""
import pytest
import torch
from support.checks import num_threads
from support.children import SANITIZED, run_child
from support.operands import compressed_positions, seeded, shared_pattern_dense, to_sparse
from support.references import dense_product
from support.spgemm import operand, pattern_product

from torchsparsegradutils import SparseCSR, _backends, _C, sparse_coo_tensor, sparse_csr_tensor, sparse_mm
from torchsparsegradutils._core.native import STATUS

TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float64: dict(rtol=1e-12, atol=1e-12),
       torch.float16: dict(rtol=4e-3, atol=4e-3), torch.bfloat16: dict(rtol=3e-2, atol=3e-2)}
LAYOUTS = ["coo", "coo_uncoalesced", "csr", "SparseCSR"]


def stored(C):
    """(pattern as a dense bool, dense values) of a sparse product."""
    D = dense_product(C).detach()
    if isinstance(C, SparseCSR) or C.layout == torch.sparse_csr:
        ptr, col = (C.crow_indices, C.col_indices) if isinstance(C, SparseCSR) else (C.crow_indices(), C.col_indices())
        mask = dense_product(SparseCSR(ptr, col, torch.ones(col.shape, dtype=torch.float64), tuple(C.shape))) != 0
    else:
        mask = torch.sparse_coo_tensor(C._indices(), torch.ones(C._nnz()), C.shape).to_dense() != 0
    return mask, D


def pair(n=9, l=7, m=8, batch=None, dtype=torch.float64, density=0.3, key=0):
    gen = seeded("pair", n, l, m, batch, str(dtype), key)
    b = batch or 1
    DA = shared_pattern_dense(b, n, l, int(density * n * l), dtype, gen)
    DB = shared_pattern_dense(b, l, m, int(density * l * m), dtype, gen, empty_rows=False)
    return (DA, DB) if batch else (DA[0], DB[0])


# ------------------------------------------------------------------ forward
@pytest.mark.parametrize("la", LAYOUTS)
@pytest.mark.parametrize("lb", LAYOUTS)
@pytest.mark.parametrize("batched", [False, True])
def test_values_pattern_and_layout(la, lb, batched, path):
    DA, DB = pair(batch=2 if batched else None)
    A, _ = operand(DA, la)
    B, _ = operand(DB, lb)
    C = sparse_mm(A, B)
    if la == "SparseCSR" or lb == "SparseCSR":
        assert isinstance(C, SparseCSR)
    else:
        assert C.layout == A.layout
        if C.layout == torch.sparse_coo:
            assert C.is_coalesced()
    mask, D = stored(C)
    assert torch.equal(mask, pattern_product(DA, DB))
    torch.testing.assert_close(D, DA @ DB, **TOL[torch.float64])


@pytest.mark.parametrize("layout", ["coo", "csr"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_same_as_torch_sparse_mm(layout, dtype):
    """2D COO @ COO and CSR @ CSR, the calls PyTorch has: same layout, values, and entries
    (PyTorch's CSR product leaves a row's columns unsorted; ours are sorted)."""
    DA, DB = pair(40, 30, 35, dtype=dtype, density=0.1)
    A, B = (DA.to_sparse(), DB.to_sparse()) if layout == "coo" else (DA.to_sparse_csr(), DB.to_sparse_csr())
    ours, theirs = sparse_mm(A, B), torch.sparse.mm(A, B)
    assert ours.layout == theirs.layout
    torch.testing.assert_close(ours.to_dense(), theirs.to_dense(), **TOL[dtype])
    if layout == "coo":
        assert ours.is_coalesced() and torch.equal(ours.indices(), theirs.coalesce().indices())
    else:
        assert torch.equal(ours.crow_indices(), theirs.crow_indices())
        rows = ours.crow_indices()
        for i in range(DA.shape[0]):
            mine, its = ours.col_indices()[rows[i]:rows[i + 1]], theirs.col_indices()[rows[i]:rows[i + 1]]
            assert torch.equal(mine, its.sort().values) and bool((mine.diff() > 0).all())


@pytest.mark.parametrize("m", [300_000, 3_000_000, 2**27])
def test_wide_products_take_every_accumulator(m, monkeypatch):
    """B of m columns past each accumulator's reach: the sparse accumulator's deeper bitmap
    levels (3e5 columns: four), the hashed table (3e6 float64 sums: past 8 MiB; 2^27
    columns: a table of the row's size, not of its columns).  Against torch.sparse.mm
    (values) and the torch-ops route (gradients, itself checked against dense autograd)."""
    gen = seeded("wide", m)
    n, l = 40, 30
    a_idx = torch.stack([torch.randint(0, n, (150,), generator=gen), torch.randint(0, l, (150,), generator=gen)])
    cols = torch.cat([torch.randint(0, m, (150,), generator=gen), torch.randint(m - 70, m, (90,), generator=gen)])
    b_idx = torch.stack([torch.randint(0, l, (240,), generator=gen), cols])       # spread, and a crowded end
    A = torch.sparse_coo_tensor(a_idx, torch.randn(150, generator=gen, dtype=torch.float64), (n, l)).coalesce()
    B = torch.sparse_coo_tensor(b_idx, torch.randn(240, generator=gen, dtype=torch.float64), (l, m)).coalesce()
    theirs = torch.sparse.mm(A, B)
    out = {}
    for forced in (False, True):
        monkeypatch.setattr(_backends, "force_torch_ops", forced)
        Al, Bl = A.detach().requires_grad_(), B.detach().requires_grad_()
        C = sparse_mm(Al, Bl)
        torch.autograd.backward(C, torch.sparse_coo_tensor(C.indices(), torch.linspace(-1, 1, C._nnz(),
                                                                                       dtype=torch.float64), C.shape))
        out[forced] = C, Al.grad, Bl.grad
    assert torch.equal(out[False][0].indices(), theirs.coalesce().indices())
    torch.testing.assert_close(out[False][0].values(), theirs.coalesce().values(), **TOL[torch.float64])
    for x, y in zip(out[False], out[True]):
        x, y = x.coalesce(), y.coalesce()
        assert torch.equal(x.indices(), y.indices())
        torch.testing.assert_close(x.values(), y.values(), **TOL[torch.float64])


def test_a_cancelling_sum_is_still_an_entry():
    A = torch.sparse_coo_tensor(torch.tensor([[0, 0], [0, 1]]), torch.tensor([1.0, -1.0]), (1, 2))
    B = torch.sparse_coo_tensor(torch.tensor([[0, 1], [0, 0]]), torch.tensor([1.0, 1.0]), (2, 1))
    ours, theirs = sparse_mm(A, B), torch.sparse.mm(A, B)
    assert ours._nnz() == theirs._nnz() == 1 and ours.values().item() == 0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_16_bit_values_summed_in_float32(dtype, path):
    DA, DB = pair(dtype=torch.float64)
    C = sparse_mm(DA.to(dtype).to_sparse_csr(), DB.to(dtype).to_sparse_csr())
    assert C.dtype == dtype
    want = (DA.to(dtype).double() @ DB.to(dtype).double()).to(dtype)      # exact, rounded once
    torch.testing.assert_close(C.to_dense(), want, **TOL[dtype])


def test_int32_and_int64_indices_mixed(path):
    DA, DB = pair()
    A = to_sparse(DA, "csr", torch.int32)
    C = sparse_mm(A, DB.to_sparse())
    torch.testing.assert_close(C.to_dense(), DA @ DB, **TOL[torch.float64])


@pytest.mark.parametrize("shape", [(0, 4, 3), (4, 0, 3), (4, 5, 0), (3, 4, 2)])
def test_empty(shape, path):
    n, l, m = shape
    A = torch.zeros(n, l).to_sparse_csr()            # no entries at all
    B = torch.ones(l, m).to_sparse()
    C = sparse_mm(A, B)
    assert C.shape == (n, m) and C._nnz() == 0
    A = A.to_sparse().requires_grad_()
    sparse_mm(A, B.requires_grad_()).to_dense().sum().backward()
    assert A.grad._nnz() == 0 and B.grad.shape == B.shape


def test_batched_csr_items_of_unequal_counts_are_refused():
    """PyTorch's batched CSR holds one entry count per item: a product whose items differ
    is a ValueError naming the way out, and COO with three sparse dims holds it."""
    row0 = torch.zeros(3, 3)
    row0[0] = 1.0
    A = torch.stack([torch.eye(3), row0]).to_sparse_csr()          # 3 entries each
    B = torch.ones(2, 3, 3).to_sparse_csr()
    with pytest.raises(ValueError, match="different numbers of entries"):
        sparse_mm(A, B)                                              # 9 and 3 entries
    C = sparse_mm(A.to_sparse(), B)
    torch.testing.assert_close(C.to_dense(), A.to_dense() @ B.to_dense())


# ------------------------------------------------------------------ gradients
def _reference_grads(DA, DB, G):
    """grad_A, grad_B of sum(G * (A @ B)) at A's and B's stored entries (dense)."""
    A, B = DA.clone().requires_grad_(), DB.clone().requires_grad_()
    gA, gB = torch.autograd.grad((G * (A @ B)).sum(), (A, B))
    return gA * (DA != 0), gB * (DB != 0)


@pytest.mark.parametrize("la", LAYOUTS)
@pytest.mark.parametrize("lb", LAYOUTS)
@pytest.mark.parametrize("upstream", ["dense", "product_pattern", "other_pattern"])
def test_gradients_at_the_stored_entries(la, lb, upstream, path):
    DA, DB = pair(key=1)
    gen = seeded("G", la, lb, upstream)
    G = torch.randn(DA.shape[0], DB.shape[1], generator=gen, dtype=torch.float64)
    if upstream == "product_pattern":
        G = G * pattern_product(DA, DB)
    elif upstream == "other_pattern":                 # entries C does not store, and C's missing ones
        G = G * (torch.rand(G.shape, generator=gen) < 0.4)
    A, va = operand(DA, la)
    B, vb = operand(DB, lb)
    C = sparse_mm(A, B)
    if isinstance(C, SparseCSR):                       # its gradient is its values': G at C's entries
        (dense_product(C) * G).sum().backward()
        G = G * stored(C)[0]
    else:
        torch.autograd.backward(C, G if upstream == "dense" else G.to_sparse())
    want_a, want_b = _reference_grads(DA, DB, G)
    torch.testing.assert_close(va.grad, at_values(A, want_a), **TOL[torch.float64])
    torch.testing.assert_close(vb.grad, at_values(B, want_b), **TOL[torch.float64])


def at_values(X, D: torch.Tensor) -> torch.Tensor:
    """D at the position of each of X's stored values, in their order: the gradient of
    each value (a duplicate of an uncoalesced COO is one matrix entry with the others)."""
    if isinstance(X, SparseCSR) or X.layout == torch.sparse_csr:
        ptr, col = (X.crow_indices, X.col_indices) if isinstance(X, SparseCSR) else (X.crow_indices(), X.col_indices())
        rows, cols = compressed_positions(ptr, col)
        return D.reshape(-1, D.shape[-1])[rows, cols].reshape(col.shape)
    return D[tuple(X._indices())]


def test_gradients_of_batches(path):
    DA, DB = pair(6, 5, 4, batch=3, key=2)
    G = torch.randn(3, 6, 4, dtype=torch.float64, generator=seeded("G batched"))
    want_a, want_b = _reference_grads(DA, DB, G)
    for la, lb in [("coo", "coo"), ("csr", "csr"), ("coo", "csr"), ("SparseCSR", "coo")]:
        A, va = operand(DA, la)
        B, vb = operand(DB, lb)
        C = sparse_mm(A, B)
        (dense_product(C) * G).sum().backward()
        torch.testing.assert_close(va.grad, at_values(A, want_a), **TOL[torch.float64])
        torch.testing.assert_close(vb.grad, at_values(B, want_b), **TOL[torch.float64])


def test_same_gradients_as_torch_sparse_mm_coo():
    """PyTorch's COO @ COO backward (it multiplies out G B^T, then masks): the same values."""
    DA, DB = pair(12, 10, 11, key=3)
    grads = []
    for mm in (torch.sparse.mm, sparse_mm):
        A, B = DA.to_sparse().requires_grad_(), DB.to_sparse().requires_grad_()
        (mm(A, B).to_dense() * torch.arange(12 * 11.0).reshape(12, 11)).sum().backward()
        grads.append((A.grad.coalesce(), B.grad.coalesce()))
    for ours, theirs in zip(grads[1], grads[0]):
        torch.testing.assert_close(ours.to_dense(), theirs.to_dense(), **TOL[torch.float64])


@pytest.mark.parametrize("make", ["torch", "ours"])
def test_gradcheck_through_the_values(make, path):
    DA, DB = pair(5, 4, 6, key=4)
    A, B = DA.to_sparse(), DB.to_sparse_csr()
    coo = torch.sparse_coo_tensor if make == "torch" else sparse_coo_tensor
    csr = torch.sparse_csr_tensor if make == "torch" else sparse_csr_tensor

    def f(va, vb):
        C = sparse_mm(coo(A.indices(), va, A.shape), csr(B.crow_indices(), B.col_indices(), vb, B.shape))
        return C.to_dense()
    assert torch.autograd.gradcheck(f, (A.values().clone().requires_grad_(), B.values().clone().requires_grad_()))


def test_the_learnable_sparse_layer():
    """The layer of the PyTorch question this answers: a sparse weight times a sparse input,
    torch.sparse.mm swapped for sparse_mm; same output and weight gradient."""
    class SparseLinearLayer(torch.nn.Module):
        def __init__(self, in_features, out_features, mm):
            super().__init__()
            self.weight_indices = torch.tensor([[0, 1, 0], [0, 1, 2]])
            self.weight_values = torch.nn.Parameter(torch.tensor([0.5, -1.5, 2.0]))
            self.in_features, self.out_features, self.mm = in_features, out_features, mm

        def forward(self, x):
            weight = torch.sparse_coo_tensor(self.weight_indices, self.weight_values,
                                             size=(self.out_features, self.in_features))
            return self.mm(weight, x)

    x = torch.sparse_coo_tensor(torch.tensor([[0, 2], [0, 0]]), torch.tensor([1.5, -2.0]), (3, 1))
    out, grads = [], []
    for mm in (torch.sparse.mm, sparse_mm):
        layer = SparseLinearLayer(3, 2, mm)
        y = layer(x)
        y.to_dense().square().sum().backward()
        out.append(y)
        grads.append(layer.weight_values.grad)
    assert out[1].layout == out[0].layout and out[1].is_coalesced()
    torch.testing.assert_close(out[1].to_dense(), out[0].to_dense())
    torch.testing.assert_close(grads[1], grads[0])


def test_no_second_derivative_is_a_clear_error():
    """A backward with create_graph=True raises the documented error, rather than a
    gradient whose graph fails later (or silently records nothing)."""
    DA, DB = pair(key=5)
    A, B = DA.to_sparse().requires_grad_(), DB.to_sparse().requires_grad_()
    with pytest.raises(RuntimeError, match="differentiable once; it has no second derivative"):
        torch.autograd.grad(sparse_mm(A, B).to_dense().square().sum(), A, create_graph=True)


def test_inplace_edit_of_values_between_forward_and_backward_raises():
    DA, DB = pair(key=6)
    A, va = operand(DA, "csr")
    B, vb = operand(DB, "coo")
    C = sparse_mm(A, B)
    with torch.no_grad():
        vb.mul_(2)                                   # grad_A reads B's values
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        C.to_dense().sum().backward()


# ------------------------------------------------------------------ threads, routes
def test_same_bits_for_any_thread_count():
    DA, DB = pair(400, 300, 350, dtype=torch.float32, density=0.03, key=7)
    G = torch.randn(400, 350, generator=seeded("G threads"))
    results = []
    for t in (1, 2, 5):
        with num_threads(t):
            A, B = DA.to_sparse_csr().requires_grad_(), DB.to_sparse_csr().requires_grad_()
            C = sparse_mm(A, B)
            (C.to_dense() * G).sum().backward()
            results.append((C.values(), A.grad.values(), B.grad.values()))
    for other in results[1:]:
        assert all(torch.equal(x, y) for x, y in zip(results[0], other))


def test_torch_ops_route_agrees_with_the_kernels(monkeypatch):
    DA, DB = pair(30, 20, 25, batch=2, density=0.2, key=8)
    G = torch.randn(2, 30, 25, dtype=torch.float64, generator=seeded("G routes"))
    out = {}
    for forced in (False, True):
        monkeypatch.setattr(_backends, "force_torch_ops", forced)
        A, B = DA.to_sparse().requires_grad_(), DB.to_sparse().requires_grad_()
        C = sparse_mm(A, B)
        (C.to_dense() * G).sum().backward()
        out[forced] = (C, A.grad, B.grad)
    assert torch.equal(out[True][0].indices(), out[False][0].indices())
    for x, y in zip(out[True], out[False]):
        torch.testing.assert_close(x.to_dense(), y.to_dense(), **TOL[torch.float64])


# ------------------------------------------------------------------ compile
class _TwoHop(torch.nn.Module):
    """A learnable sparse weight W (SparseCSR) times a sparse input X, then a dense layer."""

    def __init__(self, W: SparseCSR, f: int, c: int):
        super().__init__()
        self.crow, self.col, self.size = W.crow_indices, W.col_indices, W.size
        self.w = torch.nn.Parameter(W.values.clone())
        self.lin = torch.nn.Linear(f, c)

    def forward(self, X: SparseCSR):
        C = sparse_mm(SparseCSR(self.crow, self.col, self.w, self.size), X)
        return self.lin(sparse_mm(C, torch.ones(C.size[-1], self.lin.in_features)))


def test_fullgraph_compile_of_a_sparse_csr_model():
    torch._dynamo.reset()
    DA, DB = pair(20, 15, 18, dtype=torch.float32, density=0.2, key=9)
    W, X = SparseCSR.from_torch(DA.to_sparse_csr()), SparseCSR.from_torch(DB.to_sparse_csr())
    model = _TwoHop(W, 6, 3)
    try:
        out_c = torch.compile(model, fullgraph=True, backend="aot_eager")(X)
        grads_c = torch.autograd.grad(out_c.square().sum(), list(model.parameters()))
    finally:
        torch._dynamo.reset()
    out_e = model(X)
    grads_e = torch.autograd.grad(out_e.square().sum(), list(model.parameters()))
    torch.testing.assert_close(out_c, out_e)
    for gc, ge in zip(grads_c, grads_e):
        torch.testing.assert_close(gc, ge)


@pytest.mark.parametrize("la,lb", [("csr", "csr"), ("SparseCSR", "SparseCSR"), ("csr", "SparseCSR"),
                                   ("coo", "coo"), ("csr", "coo")])
@pytest.mark.parametrize("ia,ib", [(torch.int32, torch.int32), (torch.int32, torch.int64)])
def test_product_index_dtype_follows_the_operands(la, lb, ia, ib):
    """int32 operands give an int32 product (pointers and columns), a smaller output; int64
    on either side, or a COO product (PyTorch's COO indices are int64), gives int64.  The
    values, pattern and gradients are the int64 product's."""
    DA, DB = pair(key=11)
    (A, va), (B, vb) = operand(DA, la, ia), operand(DB, lb, ib)
    if la == "SparseCSR":
        A = SparseCSR(A.crow_indices.to(ia), A.col_indices.to(ia), A.values, A.size)
    if lb == "SparseCSR":
        B = SparseCSR(B.crow_indices.to(ib), B.col_indices.to(ib), B.values, B.size)
    C = sparse_mm(A, B)
    int32 = (ia, ib) == (torch.int32, torch.int32) and "coo" not in (la, lb)     # a COO's view is int64
    want = torch.int32 if int32 else torch.int64
    if isinstance(C, SparseCSR):
        assert C.crow_indices.dtype == C.col_indices.dtype == want
    elif C.layout == torch.sparse_csr:
        assert C.crow_indices().dtype == C.col_indices().dtype == want
    else:
        assert C._indices().dtype == torch.int64
    (A64, wa), (B64, wb) = operand(DA, la), operand(DB, lb)
    C64 = sparse_mm(A64, B64)
    mask, D = stored(C)
    assert torch.equal(mask, stored(C64)[0])
    torch.testing.assert_close(D, stored(C64)[1], rtol=0, atol=0)
    dense_product(C).square().sum().backward()
    dense_product(C64).square().sum().backward()
    torch.testing.assert_close(va.grad, wa.grad, rtol=0, atol=0)
    torch.testing.assert_close(vb.grad, wb.grad, rtol=0, atol=0)


def test_compiled_int32_product_matches_eager():
    """The fake implementation of tsgu::spgemm gives the real one's index dtype."""
    torch._dynamo.reset()
    DA, DB = pair(12, 10, 9, dtype=torch.float32, density=0.3, key=12)
    A, B = (SparseCSR.from_torch(D.to_sparse_csr()) for D in (DA, DB))
    A, B = (S._replace(crow_indices=S.crow_indices.int(), col_indices=S.col_indices.int()) for S in (A, B))
    f = lambda A, B: sparse_mm(sparse_mm(A, B), torch.ones(9, 2))  # noqa: E731
    try:
        out_c = torch.compile(f, fullgraph=True, backend="aot_eager")(A, B)
    finally:
        torch._dynamo.reset()
    torch.testing.assert_close(out_c, f(A, B))
    assert sparse_mm(A, B).col_indices.dtype == torch.int32


# ---------------------------------------------------------- the table of docs/sparse_mm.md
TABLE_ROWS = ["coo-coo-2d", "csr-csr-2d", "coo-csr-2d", "csr-coo-2d", "coo-coo-batched", "csr-csr-batched"]


@pytest.mark.parametrize("row", TABLE_ROWS)
def test_readme_table_sparse_rows(row):
    """The sparse-B rows of docs/sparse_mm.md's table of what torch.sparse.mm takes: PyTorch's
    behaviour as the row states it, and ours (values and gradients) against dense autograd."""
    la, lb, dims = row.split("-")
    DA, DB = pair(6, 5, 4, batch=2 if dims == "batched" else None, key=10)
    make = {"coo": lambda D: D.to_sparse(), "csr": lambda D: D.to_sparse_csr()}
    A, B = make[la](DA).requires_grad_(), make[lb](DB).requires_grad_()
    if row == "coo-coo-2d":                                  # PyTorch: works, gradients too
        torch.sparse.mm(A, B).to_dense().sum().backward()
        assert A.grad is not None and B.grad is not None
        A.grad = B.grad = None
    elif row == "csr-csr-2d":                                # PyTorch: forward only
        C = torch.sparse.mm(A, B)
        torch.testing.assert_close(C.to_dense(), DA @ DB)
        with pytest.raises(RuntimeError, match="unsupported combination of layouts"):
            C.to_dense().sum().backward()
    else:                                                    # PyTorch: mixed layouts or batches refused
        with pytest.raises(RuntimeError):
            torch.sparse.mm(A, B)
    C = sparse_mm(A, B)
    G = torch.randn(C.shape, dtype=torch.float64, generator=seeded("table", row))
    (dense_product(C) * G).sum().backward()
    want_a, want_b = _reference_grads(DA, DB, G)
    torch.testing.assert_close(dense_product(C).detach(), DA @ DB, **TOL[torch.float64])
    torch.testing.assert_close(A.grad.to_dense(), want_a, **TOL[torch.float64])
    torch.testing.assert_close(B.grad.to_dense() if B.grad.dim() == 2 or B.grad.layout == torch.sparse_coo
                               else dense_product(B.grad), want_b, **TOL[torch.float64])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_readme_table_cuda_row():
    """CUDA: PyTorch's COO @ COO works; ours takes the torch-ops route (index pairs)."""
    DA, DB = pair(key=11)
    A, B = DA.cuda().to_sparse().requires_grad_(), DB.cuda().to_sparse().requires_grad_()
    C = sparse_mm(A, B)
    torch.testing.assert_close(C.to_dense().cpu(), torch.sparse.mm(A, B).to_dense().cpu(), **TOL[torch.float64])
    G = torch.randn(C.shape, dtype=torch.float64, device="cuda")
    (C.to_dense() * G).sum().backward()
    want_a, want_b = _reference_grads(DA, DB, G.cpu())
    torch.testing.assert_close(A.grad.to_dense().cpu(), want_a, **TOL[torch.float64])
    torch.testing.assert_close(B.grad.to_dense().cpu(), want_b, **TOL[torch.float64])


# ------------------------------------------------------------------ errors
def test_errors():
    A = torch.eye(3).to_sparse()
    with pytest.raises(ValueError, match="reduce='mean' needs a dense B"):
        sparse_mm(A, A, "mean")
    with pytest.raises(ValueError, match="Incompatible inner dimensions"):
        sparse_mm(A, torch.ones(4, 2).to_sparse())
    with pytest.raises(TypeError, match="same dtype"):
        sparse_mm(A, torch.eye(3, dtype=torch.float64).to_sparse())
    with pytest.raises(TypeError, match="supports"):
        sparse_mm(torch.eye(3, dtype=torch.int64).to_sparse(), torch.eye(3, dtype=torch.int64).to_sparse())
    with pytest.raises(ValueError, match="both be 2D or both be 3D"):
        sparse_mm(A, torch.ones(1, 3, 3).to_sparse())
    with pytest.raises(ValueError, match="same batch size"):
        sparse_mm(torch.ones(2, 3, 3).to_sparse(), torch.ones(3, 3, 3).to_sparse())
    with pytest.raises(ValueError, match="dense dimensions"):
        sparse_mm(A, torch.ones(3, 3, 2).to_sparse(1))
    with pytest.raises(ValueError, match="malformed sparse matrix"):
        bad = torch.sparse_csr_tensor(torch.tensor([0, 1, 2, 2]), torch.tensor([0, 5]), torch.ones(2), (3, 3))
        sparse_mm(A.to_sparse_csr(), bad)


def test_c_entry_takes_its_outputs_from_alloc():
    """_C.spgemm computes A @ B, then asks alloc(nnz) for (indices, values) and fills
    them: outputs of another size or dtype, or no pair, are refused; an exception of
    alloc's is passed on; the workspace is given back every time (the next call works)."""
    A = torch.tensor([[1.0, 2.0], [0.0, 3.0]]).to_sparse_csr()
    args = (A.crow_indices(), A.col_indices(), A.values()) * 2 + (1, 2, 2, 2)
    I64 = dict(dtype=torch.int64)

    def call(alloc):
        ptr = torch.empty(3, **I64)
        return (ptr,) + tuple(_C.spgemm(*args, ptr, alloc, 1))

    for alloc, error in [(lambda nnz: (torch.empty(nnz + 1, **I64), torch.empty(nnz)), ValueError),
                         (lambda nnz: (torch.empty(nnz, **I64), torch.empty(nnz, dtype=torch.float64)), ValueError),
                         (lambda nnz: torch.empty(nnz), TypeError),
                         (lambda nnz: 1 / 0, ZeroDivisionError)]:
        with pytest.raises(error):
            call(alloc)
    ptr, col, val = call(lambda nnz: (torch.empty(nnz, **I64), torch.empty(nnz)))
    assert ptr.tolist() == [0, 2, 3] and col.tolist() == [0, 1, 1] and val.tolist() == [1.0, 8.0, 9.0]


def test_concurrent_and_repeated_products():
    """The workspace kept between calls: products of other sizes, dtypes and index dtypes
    one after the other reuse it, and Python threads at once (one takes it, the others
    their own) each get the same bits as alone, on rows cut into several chunks."""
    import threading
    DA, DB = pair(1500, 1200, 1400, dtype=torch.float32, density=0.02, key=12)
    cases = [(DA.to_sparse_csr(), DB.to_sparse_csr()),
             (DA[:700].double().to_sparse_csr(), DB.double().to_sparse_csr()),
             (DA.half().to_sparse_csr(), DB.half().to_sparse_csr())]
    cases.append(tuple(torch.sparse_csr_tensor(X.crow_indices().int(), X.col_indices().int(), X.values(), X.shape)
                       for X in cases[0]))
    parts = lambda C: (C.crow_indices(), C.col_indices(), C.values())  # noqa: E731
    got = {}
    with num_threads(3):
        want = [parts(sparse_mm(A, B)) for A, B in cases]
        runs = [threading.Thread(target=lambda q: got.setdefault(q, [parts(sparse_mm(*cases[q % 4]))
                                                                      for _ in range(3)]), args=(q,))
                for q in range(8)]
        for r in runs:
            r.start()
        for r in runs:
            r.join()
    C = torch.sparse_csr_tensor(*want[0], cases[0][0].shape[:1] + cases[0][1].shape[1:])
    torch.testing.assert_close(C.to_dense(), torch.sparse.mm(*cases[0]).to_dense())     # (its columns unsorted)
    assert sorted(got) == list(range(8))
    for q, results in got.items():
        for result in results:
            assert all(torch.equal(x, y) for x, y in zip(result, want[q % 4]))


def _large_operand(n=30_000, per_row=4, key=0):
    """An n x n COO matrix of about per_row float64 entries a row: A @ A has about
    per_row**2 a row, 480k entries at the defaults (3.7 MiB of values, as of columns)."""
    gen = seeded("large", n, per_row, key)
    idx = torch.stack([torch.arange(n).repeat_interleave(per_row), torch.randint(0, n, (n * per_row,), generator=gen)])
    return torch.sparse_coo_tensor(idx, torch.randn(n * per_row, generator=gen, dtype=torch.float64),
                                   (n, n)).coalesce()


def test_large_products_on_kept_blocks():
    """Columns and values of 2 MiB or more are written into blocks kept between calls
    (_backends.cpu.kept_empty): the COO and CSR products equal torch.sparse.mm's; a freed
    product's blocks carry the next product (the same addresses), also when freed on
    another thread; a live product keeps its entries through release_memory (which frees
    what is kept, then has nothing left to free) and through later products; its
    arrays' storage refuses resize_ with PyTorch's error."""
    import threading
    from torchsparsegradutils import release_memory
    A = _large_operand()
    want = torch.sparse.mm(A, A).coalesce()
    assert want._nnz() * 8 >= _backends.cpu.KEPT_MIN_BYTES
    release_memory()
    C = sparse_mm(A, A)
    assert torch.equal(C.indices(), want.indices())
    torch.testing.assert_close(C.values(), want.values(), **TOL[torch.float64])
    Acsr = A.to_sparse_csr()
    D = sparse_mm(Acsr, Acsr)
    assert torch.equal(D.crow_indices(), want.to_sparse_csr().crow_indices())
    assert torch.equal(D.col_indices(), want.indices()[1]) and torch.equal(D.values(), C.values())
    blocks = {D.col_indices().data_ptr(), D.values().data_ptr()}
    del D
    E = sparse_mm(Acsr, Acsr)                                   # on D's blocks
    assert {E.col_indices().data_ptr(), E.values().data_ptr()} == blocks
    held = [E]
    del E
    freer = threading.Thread(target=held.clear)
    freer.start()
    freer.join()
    F = sparse_mm(Acsr, Acsr)                                   # on E's, freed on another thread
    assert {F.col_indices().data_ptr(), F.values().data_ptr()} == blocks
    with pytest.raises(RuntimeError, match="not resizable"):
        F.values().resize_(2 * F.values().numel())
    del F
    assert release_memory() > 2 * want._nnz() * 8 and release_memory() == 0
    G = sparse_mm(_large_operand(key=1), _large_operand(key=1))  # other blocks, other values
    assert torch.equal(C.indices(), want.indices()) and torch.equal(C.values(), sparse_mm(A, A).values())
    torch.testing.assert_close(C.values(), want.values(), **TOL[torch.float64])
    assert G._nnz() > 0


def test_large_gradients_on_kept_blocks(monkeypatch):
    """The backward's gradients of 2 MiB or more (B's here: 300k float64 values) and its
    partial sums (4 x 300k) are on kept blocks too: the same gradients as the torch-ops
    route (itself checked against dense autograd), twice in a row (the second call on the
    first's blocks and workspace)."""
    A, B = _large_operand(per_row=4, key=2), _large_operand(per_row=10, key=3)
    assert B._nnz() * 8 >= _backends.cpu.KEPT_MIN_BYTES
    out = {}
    for forced in (True, False, False):
        monkeypatch.setattr(_backends, "force_torch_ops", forced)
        Al, Bl = A.detach().requires_grad_(), B.detach().requires_grad_()
        C = sparse_mm(Al, Bl)
        C.backward(torch.sparse_coo_tensor(C.indices(), torch.linspace(-1, 1, C._nnz(), dtype=torch.float64),
                                           C.shape))
        got = [Al.grad.coalesce(), Bl.grad.coalesce()]
        for x, y in zip(got, out.get("want", got)):
            assert torch.equal(x.indices(), y.indices())
            torch.testing.assert_close(x.values(), y.values(), **TOL[torch.float64])
        out.setdefault("want", got)


@pytest.mark.skipif(SANITIZED, reason="RLIMIT_AS cannot be combined with ASan's shadow memory")
def test_spgemm_hypersparse_coo_memory_is_o_nnz():
    """Issue 26, defect 4: a COO A of 2**31 + 5 rows and 2 entries times a 3 x 2 sparse B
    allocated 17 GB of row pointers.  Now forward and backward (a sparse G with an entry
    in a row A lacks) run through A's two non-empty rows under a 4 GB address-space
    limit, and C keeps A's row count; every value worked out by hand."""
    r = run_child("""
        n = 2**31 + 5
        A = torch.sparse_coo_tensor(torch.tensor([[0, n - 1], [1, 2]]), torch.tensor([1.0, 2.0]), (n, 3),
                                    is_coalesced=True).requires_grad_()
        B = torch.tensor([[1.0, 0.0], [0.0, 2.0], [3.0, 4.0]]).to_sparse().requires_grad_()
        C = sparse_mm(A, B)
        assert C.shape == (n, 2) and C.is_coalesced(), C
        assert C._indices().tolist() == [[0, n - 1, n - 1], [1, 0, 1]], C
        assert C._values().tolist() == [2.0, 6.0, 8.0], C
        G = torch.sparse_coo_tensor(torch.tensor([[0, 5, n - 1, n - 1], [1, 0, 0, 1]]),
                                    torch.tensor([1.0, 7.0, 10.0, 100.0]), (n, 2))
        C.backward(G)
        assert A.grad._indices().tolist() == [[0, n - 1], [1, 2]], A.grad
        assert A.grad._values().tolist() == [2.0, 430.0], A.grad      # G[i,:] . B[j,:]
        assert B.grad.to_dense().tolist() == [[0.0, 0.0], [0.0, 1.0], [20.0, 200.0]], B.grad
        print("OK")
    """, timeout=300, memory_limit=4 << 30)
    assert r.returncode == 0 and r.stdout.strip() == "OK", r.stdout + r.stderr[-3000:]
