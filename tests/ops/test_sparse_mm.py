"""Tests of sparse_mm against dense PyTorch autograd and gradcheck: the correctness grid
(device x route x layout x dtype x shape), gradcheck, the error contract, and the edge
cases found so far.  The CUDA-only tests (memory, streams, structure checks on the
device) are in test_sparse_mm_cuda.py.

Reference: the same product on A.to_dense() with torch autograd; A's gradient is
compared at A's stored positions (the dense gradient masked by A's pattern).
"""
import json
import re
import sys

import pytest
import torch
from support.checks import num_threads
from support.children import SANITIZED, child_outcomes, run_child
from support.operands import LAYOUTS, random_dense, seeded
from support.mm import HALF, TOL, check_against_dense, dense_reference, grads_of, make_case

import torchsparsegradutils as tsgu
from torchsparsegradutils import _backends, sparse_csr_tensor, sparse_mm
from torchsparsegradutils._core import native

HAS_CUDA = torch.cuda.is_available()


# ---------------------------------------------------------------- inputs
GRID = [
    # layout, batched, itype
    ("coo", False, torch.int64), ("coo_uncoalesced", False, torch.int64), ("coo_unflagged", False, torch.int64),
    ("csr", False, torch.int64), ("csr", False, torch.int32),
    ("coo", True, torch.int64), ("coo_uncoalesced", True, torch.int64), ("coo_unflagged", True, torch.int64),
    ("csr", True, torch.int64), ("csr", True, torch.int32),
]
SHAPES = [(7, 5, 3, 12), (5, 9, 1, 10), (30, 40, 17, 200), (4, 4, 0, 5), (6, 3, 2, 0),  # n, m, p, nnz
          (12, 9, 16, 40), (11, 6, 32, 20), (10, 8, 64, 30), (9, 7, 130, 25)]  # the kernels' special widths


ROUTES = [("cpu", "kernels"), ("cpu", "torch_ops"), ("cuda", "kernels"), ("cuda", "torch_ops")]


@pytest.fixture(params=ROUTES, ids=["-".join(r) for r in ROUTES])
def route(request, monkeypatch):
    """The correctness grid's device and route: our kernels (C on the CPU, CUDA and Triton
    on the GPU) and PyTorch's ops (what CUDA takes in a build without nvcc; forced on the
    CPU).  Returns the device; the CUDA routes skip without a GPU."""
    device, via = request.param
    if device == "cuda":
        if not HAS_CUDA:
            pytest.skip("no CUDA device")
        if via == "kernels" and not tsgu._C.cuda:
            pytest.skip("built without nvcc: no CUDA kernels")
        monkeypatch.setattr(native, "cuda_enabled", via == "kernels")
        monkeypatch.setattr(_backends, "triton_enabled", via == "kernels")   # torch_ops: no Triton either
    else:
        monkeypatch.setattr(_backends, "force_torch_ops", via == "torch_ops")
    return device


def on(device, *tensors):
    return [t.to(device) for t in tensors]


@pytest.mark.parametrize("layout,batched,itype", GRID)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n,m,p,nnz", SHAPES)
def test_matches_dense_autograd(route, layout, batched, itype, dtype, n, m, p, nnz):
    A, B, G, D = make_case(layout, batched, n, m, p, nnz, dtype, itype)
    check_against_dense(*on(route, A, B, G, D), TOL[dtype])


@pytest.mark.parametrize("layout", ["coo", "csr"])
@pytest.mark.parametrize("batched", [False, True])
def test_noncontiguous_B_and_G(path, layout, batched):
    A, B, G, D = make_case(layout, batched, 8, 6, 5, 20, torch.float64, torch.int64)
    Bt = B.transpose(-1, -2).contiguous().transpose(-1, -2)  # same values, column-major
    assert not Bt.is_contiguous()
    C = check_against_dense(A, Bt, G, D, TOL[torch.float64])
    # a strided view of a larger tensor (row stride > p)
    Bwide = torch.randn(*B.shape[:-1], 2 * B.shape[-1], dtype=B.dtype)[..., ::2]
    Bwide_view = torch.cat([B, B], -1)[..., : B.shape[-1]]
    assert not Bwide_view.is_contiguous()
    torch.testing.assert_close(sparse_mm(A, Bwide_view), C.detach())
    torch.testing.assert_close(sparse_mm(A, Bwide), D @ Bwide)
    # an expanded (stride 0) upstream gradient, as sum() produces
    A2 = A.detach().requires_grad_()
    sparse_mm(A2, B).sum().backward()
    ref = dense_reference(D, B, torch.ones(*D.shape[:-1], B.shape[-1], dtype=B.dtype))[1]
    torch.testing.assert_close(A2.grad.to_dense(), ref * (D != 0))


def test_empty_sizes():
    for n, m, p in [(0, 4, 3), (4, 0, 3), (4, 3, 0), (0, 0, 0)]:
        A = torch.zeros(n, m).to_sparse().requires_grad_()
        B = torch.randn(m, p, requires_grad=True)
        C = sparse_mm(A, B)
        assert C.shape == (n, p) and torch.all(C == 0)
        C.sum().backward()
        assert B.grad.shape == (m, p) and torch.all(B.grad == 0)
        assert A.grad._nnz() == 0
    Ab = torch.zeros(0, 3, 4).to_sparse()
    assert sparse_mm(Ab, torch.randn(0, 4, 2)).shape == (0, 3, 2)
    Ac = torch.sparse_csr_tensor(torch.zeros(2, 4, dtype=torch.int64), torch.zeros(2, 0, dtype=torch.int64),
                                 torch.zeros(2, 0), (2, 3, 5))
    assert torch.equal(sparse_mm(Ac, torch.randn(2, 5, 2)), torch.zeros(2, 3, 2))


# ---------------------------------------------------------------- gradcheck (float64, through the values)
@pytest.mark.parametrize("layout", ["coo", "coo_uncoalesced", "csr"])
@pytest.mark.parametrize("batched", [False, True])
def test_gradcheck_through_values(layout, batched):
    A, B, _, _ = make_case(layout, batched, 6, 5, 3, 9, torch.float64, torch.int64, seed=1)
    B = B.requires_grad_()
    if layout == "csr":
        crow, col = A.crow_indices(), A.col_indices()
        values = A.values().clone().requires_grad_()

        def f(v, B):
            return sparse_mm(sparse_csr_tensor(crow, col, v, A.shape), B)
    else:
        idx = A._indices()
        values = A._values().clone().requires_grad_()

        def f(v, B):
            return sparse_mm(torch.sparse_coo_tensor(idx, v, A.shape), B)
    assert torch.autograd.gradcheck(f, (values, B))


@pytest.mark.parametrize("batched", [False, True])
def test_gradgradcheck_through_values(batched):
    """Second derivatives: backward with create_graph=True records a graph of sparse kernels."""
    A, B, _, _ = make_case("csr", batched, 6, 5, 3, 9, torch.float64, torch.int64, seed=2)
    crow, col = A.crow_indices(), A.col_indices()
    values = A.values().clone().requires_grad_()
    B = B.requires_grad_()

    def f(v, B):
        return sparse_mm(sparse_csr_tensor(crow, col, v, A.shape), B)
    assert torch.autograd.gradgradcheck(f, (values, B))


def test_hessian_vector_product_matches_dense():
    A, B, _, D = make_case("csr", False, 8, 6, 4, 20, torch.float64, torch.int64, seed=3)
    crow, col = A.crow_indices(), A.col_indices()
    mask = D != 0
    v0 = A.values().clone()
    W = torch.randn(8, 4, dtype=torch.float64)
    u = torch.randn_like(v0)

    def loss_sparse(v, B):
        return (sparse_mm(sparse_csr_tensor(crow, col, v, A.shape), B) ** 2 * W).sum()

    def loss_dense(v, B):
        Dv = torch.zeros(8, 6, dtype=torch.float64).masked_scatter(mask, v)
        return ((Dv @ B) ** 2 * W).sum()

    results = []
    for loss in (loss_sparse, loss_dense):
        v = v0.clone().requires_grad_()
        Bx = B.clone().requires_grad_()
        gv, gB = torch.autograd.grad(loss(v, Bx), (v, Bx), create_graph=True)
        hv = torch.autograd.grad((gv * u).sum() + gB.sum(), (v, Bx))
        results.append(hv)
    for x, y in zip(*results):
        torch.testing.assert_close(x, y)


def test_second_derivative_into_coo_leaf():
    """d/dA of a function of grad_B, for a leaf COO A: sparse, and equal to the dense answer."""
    A, B, G, D = make_case("coo", False, 7, 5, 3, 12, torch.float64, torch.int64, seed=6)
    Al = A.detach().requires_grad_()
    Bx = B.clone().requires_grad_()
    (gB,) = torch.autograd.grad((sparse_mm(Al, Bx) * G).sum(), Bx, create_graph=True)
    (gA,) = torch.autograd.grad((gB ** 2).sum(), Al)
    Dl = D.clone().requires_grad_()
    (gBd,) = torch.autograd.grad((Dl @ Bx * G).sum(), Bx, create_graph=True)
    (gAd,) = torch.autograd.grad((gBd ** 2).sum(), Dl)
    assert gA.layout == torch.sparse_coo
    torch.testing.assert_close(gA.to_dense(), gAd * (D != 0))


def test_values_grad_of_uncoalesced_coo_duplicates():
    """Each duplicate contributes linearly with coefficient 1: each gets the entry's derivative."""
    idx = torch.tensor([[0, 1, 0, 2], [1, 0, 1, 2]])
    v = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64, requires_grad=True)
    B = torch.randn(3, 2, dtype=torch.float64)
    G = torch.randn(3, 2, dtype=torch.float64)
    sparse_mm(torch.sparse_coo_tensor(idx, v, (3, 3)), B).backward(G)
    expect = torch.stack([G[i] @ B[j] for i, j in idx.t().tolist()])
    torch.testing.assert_close(v.grad, expect)


# ---------------------------------------------------------------- published examples
def test_published_examples():
    indices = torch.tensor([[0, 0, 1, 1, 2, 2], [0, 2, 1, 3, 0, 2]])
    values = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    A = torch.sparse_coo_tensor(indices, values, (3, 4))
    B = torch.randn(4, 2)
    out = sparse_mm(A, B)
    assert out.shape == torch.Size([3, 2])
    torch.testing.assert_close(out, A.to_dense() @ B)
    A_batch = torch.stack([A, A])
    B_batch = torch.randn(2, 4, 2)
    out = sparse_mm(A_batch, B_batch)
    assert out.shape == torch.Size([2, 3, 2])
    torch.testing.assert_close(out, A_batch.to_dense() @ B_batch)
    A.requires_grad_(True)
    B.requires_grad_(True)
    sparse_mm(A, B).sum().backward()
    assert A.grad.is_sparse
    assert A.grad._nnz() == 6


# ---------------------------------------------------------------- errors
def test_error_contract():
    A = torch.eye(3).to_sparse()
    B = torch.randn(3, 2)
    cases = [
        ((A.to_dense().tolist(), B), ValueError, "instances of torch.Tensor"),
        ((A, B.numpy()), ValueError, "instances of torch.Tensor"),
        ((torch.ones(3).to_sparse(), torch.ones(3)), ValueError, "at least 2-dimensional"),
        ((A, torch.randn(1, 3, 2)), ValueError, "both be 2D or both be 3D"),
        ((torch.zeros(1, 1, 3, 3).to_sparse(), torch.randn(1, 1, 3, 2)), ValueError, "both be 2D or both be 3D"),
        ((A.to_sparse_csc(), B), ValueError, "COO or CSR"),
        ((A.to_dense(), B.to_sparse_csc()), ValueError, "with a dense A, B must be dense or a sparse COO or CSR"),
        ((A, B.to_sparse_csc()), ValueError, "B should be in either COO or CSR"),   # a sparse B: COO or CSR
        ((torch.stack([A, A]), torch.randn(3, 3, 2)), ValueError, "same batch size"),
        ((A, torch.randn(4, 2)), ValueError, "Incompatible inner dimensions"),
        ((A.to(torch.int64), B.to(torch.int64)), TypeError, "float16, bfloat16, float32 and float64"),
        ((A.to(torch.complex64), B.to(torch.complex64)), TypeError, "float32 and float64"),
        ((A, B.double()), TypeError, "same dtype"),
        ((A.half(), B), TypeError, "same dtype"),
        ((A.to(torch.bfloat16), B.half()), TypeError, "same dtype"),
        ((A.double(), B), TypeError, "same dtype"),
        ((torch.sparse_coo_tensor(torch.tensor([[0], [1]]), torch.ones(1, 2), (3, 3, 2)), B),
         ValueError, "both be 2D or both be 3D"),
        ((torch.sparse_coo_tensor(torch.tensor([[0], [1]]), torch.ones(1, 2), (3, 3, 2)), torch.randn(3, 3, 2)),
         ValueError, "dense dimensions"),
    ]
    for args, exc, match in cases:
        with pytest.raises(exc, match=match):
            sparse_mm(*args)


@pytest.mark.parametrize("form", ["coo", "csr", "SparseCSR"])
@pytest.mark.parametrize("grad", [False, True])
def test_contract_checked_in_c_raises_the_published_error(form, grad):
    """Without a graph, the CPU route leaves the sizes, dtypes and dense dimensions to the C
    glue and checks the published contract only after a failure there: the same errors
    as with a graph (checked first), each raised on its own (not chained to the glue's
    failure), and a failure the contract does not cover (an index out of range) raised
    as it is."""
    def operand(D):
        if form == "coo":
            return D.to_sparse()
        C = D.to_sparse_csr()
        return C if form == "csr" else tsgu.SparseCSR(C.crow_indices(), C.col_indices(), C.values(), tuple(C.shape))

    A = operand(torch.eye(3, dtype=torch.float64))
    A3 = operand(torch.eye(3, dtype=torch.float64).expand(2, 3, 3).contiguous())
    cases = [
        ((A, torch.randn(4, 2, dtype=torch.float64)), ValueError, r"^Incompatible inner dimensions: A\[..., 3\]"),
        ((A3, torch.randn(3, 3, 2, dtype=torch.float64)), ValueError, "^If batched, A and B must have the same batch"),
        ((A, torch.randn(3, 2)), TypeError, "^A and B must have the same dtype"),
        ((operand(torch.eye(3, dtype=torch.int64)), torch.ones(3, 2, dtype=torch.int64)), TypeError,
         "supports float16, bfloat16, float32 and float64 values"),
    ]
    for args, exc, match in cases:
        B = args[1].requires_grad_(grad) if args[1].is_floating_point() else args[1]
        with pytest.raises(exc, match=match) as e:
            sparse_mm(args[0], B)
        assert e.value.__suppress_context__ or e.value.__context__ is None
    if form == "coo":   # an index beyond the size, flagged coalesced: the glue's own error
        bad = torch.sparse_coo_tensor(torch.tensor([[0, 5], [0, 1]]), torch.ones(2, dtype=torch.float64), (3, 3),
                                      is_coalesced=True, check_invariants=False)
        with pytest.raises(ValueError, match="out of range|outside"):
            sparse_mm(bad, torch.randn(3, 2, dtype=torch.float64))


@pytest.mark.parametrize("which,layout", [("A", "csc"), ("A", "bsr"), ("B", "csc")])
def test_unsupported_layout_error_names_the_conversions(which, layout):
    """A CSC or BSR A (or a CSC B beside a sparse A): the published message, and a note
    naming what the operand was and how to make it COO or CSR.  (A dense A is
    torch.sparse.mm's other form: test_sparse_mm_dense_a.py.)"""
    D = torch.eye(4)
    X = {"dense": D, "csc": D.to_sparse_csc(), "bsr": D.to_sparse_bsr((2, 2))}[layout]
    args = (X, torch.randn(4, 2)) if which == "A" else (D.to_sparse(), X)
    with pytest.raises(ValueError, match=f"^{which} should be in either COO or CSR sparse format") as e:
        sparse_mm(*args)
    assert str(e.value) == f"{which} should be in either COO or CSR sparse format"      # the published message
    if sys.version_info >= (3, 11):                     # exception notes: what tracebacks print besides
        assert e.value.__notes__ == [f"got {which} of layout {X.layout}: convert it with {which}.to_sparse() "
                                     f"(COO) or {which}.to_sparse_csr() (CSR)"]


RANGE = re.escape(tsgu._C.status_messages()["EIDX_RANGE"])


@pytest.mark.parametrize("order", ["sorted", "unsorted", "hypersparse"])
@pytest.mark.parametrize("batched,kind", [(False, "row"), (False, "column"), (True, "batch"), (True, "row"),
                                          (True, "column")])
def test_out_of_range_coo_index_error_names_index_entry_dimension_and_size(order, batched, kind):
    """A COO index out of range is the malformed-matrix ValueError naming which index
    (batch, row or column), its value, its entry and its dimension's size: through the
    one-call COO product (sorted entries), the coalescing intake (unsorted) and the
    hypersparse one (a tall matrix of few entries)."""
    n = 10 ** 6 if order == "hypersparse" else 5
    idx = torch.tensor([[0, 0, 1, 1, 1], [0, 1, 2, 3, 4], [0, 1, 2, 3, 1]])
    idx = idx if batched else idx[1:]
    d = ["batch", "row", "column"].index(kind) - (not batched)
    idx[d, 3] = {"batch": 2, "row": n + 2, "column": -1}[kind]
    if order == "unsorted":
        idx = idx[:, [1, 0, 2, 3, 4]]
    sizes = ((2,) if batched else ()) + (n, 4)
    A = torch.sparse_coo_tensor(idx, torch.ones(5), sizes, check_invariants=False)
    bad = idx[d, 3].item()
    with pytest.raises(ValueError, match=f"^{RANGE}: {kind} index {bad} at entry 3 is out of range for dimension {d} "
                                         f"of size {sizes[d]}$"):
        sparse_mm(A, torch.ones(*sizes[:-2], 4, 2))


def test_out_of_range_coo_index_named_alike_for_any_thread_count():
    """The entry named is the first out of range, whatever the number of threads that
    check the entries (each stops at the first of its chunk)."""
    nnz = 1 << 20
    rows = torch.arange(nnz) // 4
    idx = torch.stack([rows, torch.arange(nnz) % 4])
    idx[0, nnz - 10], idx[1, nnz // 2 + 1], idx[1, nnz // 2 + 5] = -3, 4, 9   # the one at nnz/2 + 1 is first
    A = torch.sparse_coo_tensor(idx, torch.ones(nnz), (nnz // 4, 4), check_invariants=False)
    before = torch.get_num_threads()
    try:
        for threads in (1, 2, 4):
            torch.set_num_threads(threads)
            with pytest.raises(ValueError, match=f": column index 4 at entry {nnz // 2 + 1} is out of range for "
                                                 f"dimension 1 of size 4$"):
                sparse_mm(A, torch.ones(4, 1))
    finally:
        torch.set_num_threads(before)


def test_unsorted_coo_rows_named_alike_for_any_thread_count():
    """A COO tensor flagged coalesced whose early entry jumps to the last row, so that
    every later chunk's rows lie before it: the same order error for any number of
    threads (whose row-pointer writes stay apart: csrc/tsgu_coo.h), and the in-order
    tensor's product unchanged by the thread count."""
    nnz = 1 << 20
    idx = torch.stack([torch.arange(nnz) // 4, torch.arange(nnz) % 4])
    B = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    good = torch.sparse_coo_tensor(idx.clone(), torch.ones(nnz), (nnz // 4, 4), is_coalesced=True)
    idx[0, 10] = nnz // 4 - 1
    bad = torch.sparse_coo_tensor(idx, torch.ones(nnz), (nnz // 4, 4), is_coalesced=True, check_invariants=False)
    want = good.to_dense() @ B
    for threads in (1, 2, 4):
        with num_threads(threads):
            with pytest.raises(ValueError, match="not sorted by row"):
                sparse_mm(bad, B)
            torch.testing.assert_close(sparse_mm(good, B), want)


def test_error_devices():
    if not HAS_CUDA:
        pytest.skip("needs a CUDA device to put A and B on different devices")
    with pytest.raises(ValueError, match="same device"):
        sparse_mm(torch.eye(3).to_sparse().cuda(), torch.randn(3, 2))


def test_malformed_coo_flagged_coalesced_no_grad():
    """A COO tensor flagged coalesced whose entries are not in order, multiplied
    without grad: the same errors as with grad (the view's checks)."""
    D = torch.tensor([[1.0, 0.0, 2.0], [0.0, 0.0, 0.0], [0.0, 3.0, 4.0]])
    A = D.to_sparse().coalesce()
    idx, val, B = A.indices(), A.values(), torch.randn(3, 2)
    for perm, match in (([2, 3, 0, 1], "not sorted by row"), ([1, 0, 2, 3], "sorted and unique within each row")):
        bad = torch.sparse_coo_tensor(idx[:, perm], val[perm], (3, 3), is_coalesced=True)
        for Bx in (B, B.clone().requires_grad_()):
            with pytest.raises(ValueError, match=match):
                sparse_mm(bad, Bx)


# ---------------------------------------------------------------- semantics and hygiene
def test_values_of_nonleaf_are_copied_when_unguarded():
    """A's values made by an op (not a leaf): an edit cannot be detected, so grad_B
    must use the values of the forward pass."""
    A, B, G, D = make_case("coo", False, 6, 5, 3, 12, torch.float64, torch.int64)
    w = A.values().clone().requires_grad_()
    vals = w * 1.0
    Bx = B.clone().requires_grad_()
    C = sparse_mm(torch.sparse_coo_tensor(A.indices(), vals, A.shape), Bx)
    with torch.no_grad():
        vals.mul_(5)
    C.backward(G)
    torch.testing.assert_close(Bx.grad, D.t() @ G)


def test_grad_only_when_needed():
    A, B, G, _ = make_case("csr", False, 6, 5, 3, 12, torch.float64, torch.int64)
    Bx = B.clone().requires_grad_()
    sparse_mm(A, Bx).backward(G)           # A needs no gradient
    assert A.grad is None and Bx.grad is not None
    Ax = A.detach().requires_grad_()
    sparse_mm(Ax, B).backward(G)           # B needs no gradient
    assert Ax.grad is not None and B.grad is None


def test_training_loop_learns_sparse_weights():
    """A sparse linear layer with a learnable values Parameter, trained with Adam."""
    gen = torch.Generator().manual_seed(7)
    n, m, p = 30, 20, 16
    D = random_dense((n, m), torch.float32, gen, nnz=80, empty_rows=False)
    S = D.to_sparse_csr()

    class SparseLinear(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.crow, self.col = S.crow_indices(), S.col_indices()
            self.values = torch.nn.Parameter(torch.zeros(S.values().shape))

        def forward(self, X):
            return sparse_mm(sparse_csr_tensor(self.crow, self.col, self.values, (n, m)), X)

    model = SparseLinear()
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    X = torch.randn(m, p, generator=gen)
    Y = D @ X
    losses = []
    for _ in range(300):
        opt.zero_grad()
        loss = ((model(X) - Y) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 1e-3 * losses[0]
    torch.testing.assert_close(model.values.detach(), S.values(), rtol=0.05, atol=0.05)


@pytest.mark.skipif(SANITIZED, reason="peak memory is not ours to measure under ASan")
def test_bilinear_form_huge_n_small_memory():
    """x^T A y with n = m = 2e6: grad w.r.t. A's values is x[i] y[j], O(nnz) memory."""
    r = run_child("""
        import json, resource
        n = 2_000_000
        nnz = 4_000_000
        g = torch.Generator().manual_seed(0)
        rows = torch.randint(0, n, (nnz,), generator=g)
        cols = torch.randint(0, n, (nnz,), generator=g)
        A = torch.sparse_coo_tensor(torch.stack([rows, cols]), torch.randn(nnz, generator=g), (n, n)).coalesce()
        A.requires_grad_(True)
        x = torch.randn(n, 1, generator=g)
        y = torch.randn(n, 1, generator=g)
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        f = (x * sparse_mm(A, y)).sum()
        f.backward()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        i, j = A.detach().indices()
        expect = x[i, 0] * y[j, 0]
        ok = torch.allclose(A.grad._values(), expect, rtol=1e-5, atol=1e-6)
        Ad = A.detach()
        ref = (x[i, 0] * Ad.values() * y[j, 0]).sum()
        print(json.dumps({"peak_mb": peak / 1024, "delta_mb": (peak - base) / 1024, "grad_ok": ok,
                          "f_ok": abs(f.item() - ref.item()) <= 1e-3 * max(1.0, abs(ref.item()))}))
    """, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["grad_ok"] and out["f_ok"]
    assert out["peak_mb"] < 2048, out


# ---------------------------------------------------------------- 16-bit values
# The kernels sum 16-bit products in float32 and round once: against float64
# sums of the same (rounded) inputs they differ by the final rounding (half a
# unit in the last place, 2^-11 and 2^-8 relative) and float32's own error.
ROUNDED_TOL = {torch.float16: dict(rtol=2 ** -10, atol=1e-5), torch.bfloat16: dict(rtol=2 ** -7, atol=1e-4)}


def rounded_case(layout, batched, n, m, p, nnz, dtype, itype, seed):
    """make_case's operands in `dtype` (float32 draws rounded to it), with the dense
    float64 matrix of A's entries (duplicates summed as A's own coalesce sums them)
    and its pattern."""
    A, B, G, _ = make_case(layout, batched, n, m, p, nnz, torch.float32, itype, seed)
    A, B, G = A.to(dtype), B.to(dtype), G.to(dtype)
    S = A.coalesce() if A.layout == torch.sparse_coo else A
    ones = torch.sparse_coo_tensor(S.indices(), torch.ones(S._nnz()), S.shape) if A.layout == torch.sparse_coo \
        else torch.sparse_csr_tensor(S.crow_indices(), S.col_indices(), torch.ones(S.values().shape), S.shape)
    return A, B, G, S.to_dense().double(), ones.to_dense().double()


def float64_reference(D, mask, B, G):
    B, G = B.double(), G.double()
    return D @ B, (G @ B.transpose(-1, -2)) * mask, D.transpose(-1, -2) @ G


@pytest.mark.parametrize("layout,batched,itype", GRID)
@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("n,m,p,nnz", SHAPES)
def test_half_matches_float64_of_the_rounded_inputs(route, layout, batched, itype, dtype, n, m, p, nnz):
    A, B, G, D, mask = rounded_case(layout, batched, n, m, p, nnz, dtype, itype, seed=13)
    for got, want in zip(grads_of(*on(route, A, B, G)), float64_reference(D, mask, B, G)):
        torch.testing.assert_close(got.cpu().double(), want, **ROUNDED_TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32] + HALF)
@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_batched_wide_p_same_bits_for_any_thread_count(layout, dtype):
    """Batched, p = 130 (two full column blocks and a narrow one): large enough that
    every kernel splits across up to 5 threads, the grad_B split falling inside an
    item (3 items over 2 or 5 threads).  Same bits on 1, 2 and 5 threads, and the
    float64 answer."""
    A, B, G, D, mask = rounded_case(layout, True, 300, 200, 130, 12000, dtype, torch.int64, seed=12)
    results = []
    old = torch.get_num_threads()
    try:
        for t in (1, 2, 5):
            torch.set_num_threads(t)
            results.append(grads_of(A, B, G))
    finally:
        torch.set_num_threads(old)
    for other in results[1:]:
        assert all(torch.equal(x, y) for x, y in zip(results[0], other))
    tol = ROUNDED_TOL.get(dtype, TOL[torch.float32])
    for got, want in zip(results[0], float64_reference(D, mask, B, G)):
        torch.testing.assert_close(got.double(), want, **tol)


# ---------------------------------------------------------------- edge cases
def _coo_rows_apart(entry, size):
    """A one-entry COO whose index array is a column of a wider buffer: its
    rows lie 2 elements apart in memory (as coalesce() of duplicates leaves it)."""
    idx = torch.tensor([[e, 0] for e in entry])[:, :1]
    assert idx.stride() == (2, 1)
    return torch.sparse_coo_tensor(idx, torch.tensor([1.0]), size)


def test_one_entry_coo_with_strided_indices():
    A = _coo_rows_apart((0, 2, 1), (1, 3, 3))
    B = torch.arange(9.0).reshape(1, 3, 3)
    C = sparse_mm(A, B)
    torch.testing.assert_close(C, A.to_dense() @ B)
    assert torch.equal(C[0, 2], B[0, 1])                       # the entry's row, not row 0
    A2 = _coo_rows_apart((2, 1), (3, 3))
    torch.testing.assert_close(sparse_mm(A2, B[0]), A2.to_dense() @ B[0])


def test_duplicates_collapsing_to_one_entry():
    """Coalescing two duplicates leaves one entry with a non-unit-stride index array."""
    for _ in range(20):                                          # the fault varied from run to run
        A = torch.sparse_coo_tensor([[0, 0], [2, 2], [1, 1]], [1.0, 2.0], (1, 3, 3)).requires_grad_()
        B = torch.randn(1, 3, 2, requires_grad=True)
        C = sparse_mm(A, B)
        C.sum().backward()
        Ad = A.detach().to_dense().requires_grad_()
        Bd = B.detach().clone().requires_grad_()
        Cd = Ad @ Bd
        Cd.sum().backward()
        torch.testing.assert_close(C, Cd)
        torch.testing.assert_close(B.grad, Bd.grad)
        torch.testing.assert_close(A.grad.to_dense(), Ad.grad * (Ad.detach() != 0))


def test_expanded_one_entry_indices_in_a_child():
    """Stride-0 (expanded) indices: once a heap-buffer-overflow read; in a child in case it crashes."""
    r = run_child("""
        A = torch.sparse_coo_tensor(torch.tensor([[0], [2], [1]]).expand(3, 4), torch.ones(4), (1, 3, 3))
        B = torch.arange(6.0).reshape(1, 3, 2)
        print(torch.equal(sparse_mm(A, B), A.to_dense() @ B))
    """)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["True"], r.stdout


@pytest.mark.parametrize("layout", ["csr", "coo"])
def test_lazily_negated_operands(layout):
    """B (and the upstream gradient) with PyTorch's negative bit: their values are
    minus their memory, which DLPack cannot say."""
    D = torch.tensor([[1.0, 2.0, 0.0], [0.0, 3.0, 0.0], [4.0, 0.0, 5.0]])
    A = D.to_sparse_csr() if layout == "csr" else D.to_sparse()
    b = torch.tensor([[1 + 1j], [2 + 2j], [3 + 3j]]).conj().imag
    assert b.is_neg()
    torch.testing.assert_close(sparse_mm(A, b), -torch.tensor([[5.0], [6.0], [19.0]]))
    B = torch.randn(3, 2)._neg_view().requires_grad_()
    G = torch.randn(3, 2)._neg_view()
    A = A.detach().requires_grad_()
    C = sparse_mm(A, B)
    C.backward(G)
    Ad, Bd = D.clone().requires_grad_(), B.detach().resolve_neg().requires_grad_()
    (Ad @ Bd).backward(G.resolve_neg())
    torch.testing.assert_close(C, D @ B.resolve_neg())
    torch.testing.assert_close(B.grad, Bd.grad)
    torch.testing.assert_close(A.grad.to_dense(), Ad.grad * (D != 0))


@pytest.mark.parametrize("ctor", ["torch_csr", "ours_csr", "coo_coalesced_flag"])
def test_edit_of_values_without_grad_never_changes_grad_B(ctor):
    """Values that need no gradient, edited after forward: grad_B must be that of
    the values of the forward pass (or the version-counter error is raised)."""
    crow, col = torch.tensor([0, 1, 2]), torch.tensor([0, 1])
    v = torch.tensor([1.0, 2.0])
    if ctor == "torch_csr":
        A = torch.sparse_csr_tensor(crow, col, v, (2, 2))
    elif ctor == "ours_csr":
        A = sparse_csr_tensor(crow, col, v, (2, 2))
    else:
        A = torch.sparse_coo_tensor(torch.tensor([[0, 1], [0, 1]]), v, (2, 2), is_coalesced=True)
    B = torch.ones(2, 3, requires_grad=True)
    C = sparse_mm(A, B)
    v.mul_(10)
    try:
        C.sum().backward()
    except RuntimeError as e:
        assert "modified by an inplace operation" in str(e)
    else:
        torch.testing.assert_close(B.grad, torch.tensor([[1.0] * 3, [2.0] * 3]))


def _batched_csr_case(b, seed):
    """A batched CSR leaf (one pattern for every item, as batched CSR requires), B and the dense A."""
    gen = seeded("batched_csr", b, seed)
    mask = torch.rand(4, 5, generator=gen) < 0.5
    mask[:, 0] = True
    D = (torch.rand(b, 4, 5, generator=gen, dtype=torch.float64) + 0.5) * mask
    B = torch.randn(b, 5, 3, generator=gen, dtype=torch.float64)
    return D.to_sparse_csr().requires_grad_(), B, D


def _well_formed_csr_like(g, A):
    """g is a CSR tensor with A's shape and pattern arrays of A's shapes, and passes torch's invariant check."""
    assert g.layout == torch.sparse_csr and g.shape == A.shape
    assert g.crow_indices().shape == A.crow_indices().shape
    assert g.col_indices().shape == A.col_indices().shape
    assert g.values().shape == A.values().shape
    torch.sparse_csr_tensor(g.crow_indices(), g.col_indices(), g.values(), g.shape, check_invariants=True)


@pytest.mark.parametrize("b", [1, 2])
def test_batched_csr_grad_accumulates(b):
    """Two backward calls into one batched CSR leaf: twice the gradient, or a clear error."""
    A, B, D = _batched_csr_case(b, 0)
    try:
        for _ in range(2):
            sparse_mm(A, B).sum().backward()
    except (RuntimeError, ValueError, NotImplementedError) as e:
        assert "batched" in str(e) and "CSR" in str(e), f"unclear error: {e}"
        return
    _well_formed_csr_like(A.grad, A)
    Dd = D.clone().requires_grad_()
    (Dd @ B).sum().backward()
    torch.testing.assert_close(A.grad.to_dense(), 2 * Dd.grad * (D != 0))


@pytest.mark.parametrize("b", [1, 2])
def test_batched_csr_second_derivatives(b):
    """d/dA of a function of grad_B, for a batched CSR leaf: right values on A's
    pattern, or a clear error; never a malformed tensor."""
    A, B, D = _batched_csr_case(b, 1)
    Bx = B.clone().requires_grad_()
    try:
        (gB,) = torch.autograd.grad((sparse_mm(A, Bx) ** 2).sum(), Bx, create_graph=True)
        (gA,) = torch.autograd.grad((gB ** 2).sum(), A)          # A's gradient comes by two paths
    except (RuntimeError, ValueError, NotImplementedError) as e:
        assert "batched" in str(e) and "CSR" in str(e), f"unclear error: {e}"
        return
    _well_formed_csr_like(gA, A)
    Dd = D.clone().requires_grad_()
    (gBd,) = torch.autograd.grad(((Dd @ Bx) ** 2).sum(), Bx, create_graph=True)
    (gAd,) = torch.autograd.grad((gBd ** 2).sum(), Dd)
    torch.testing.assert_close(gA.to_dense(), gAd * (D != 0))


def test_huge_int64_structure_is_checked_before_use():
    """Row pointers and columns near 2**62, large enough to run on two threads: a
    ValueError, and (checked by the sanitizer job, where UBSan halts on it) no
    signed overflow on the way."""
    make = ("n, nnz = 1000, 300_000\n"
            "crow, col = torch.linspace(0, nnz, n + 1).long(), torch.arange(nnz) % 300\n")  # valid, sorted rows
    cases = {name: make + edit + "\nA = torch.sparse_csr_tensor(crow, col, torch.ones(nnz), (n, 500))\n"
                                 "torch.set_num_threads(2)\ninputs = [A]\n"
                                 "call = lambda: sparse_mm(A, torch.ones(500, 8))"
             for name, edit in {"crow": "crow[n // 2] = 2**62", "col": "col[nnz // 2] = 2**62"}.items()}
    outcomes = child_outcomes(cases)
    bad = {name: o for name, o in outcomes.items() if o[0] != "ValueError" or "malformed sparse matrix" not in o[1]}
    assert not bad, bad


def _first_bad_row_status(ptr, col, n, m, batched):
    """The status the kernels raise for a structure: that of its first bad global row, in row
    order (an independent reference: each row's pointers checked on their own, against the
    entries left after its item's offset, as tsgu.h lays the two layouts out)."""
    b, flat = (ptr.shape[0] if batched else (ptr.numel() - 1) // n), col.reshape(-1).tolist()
    for k in range(b):
        P, off = (ptr[k].tolist(), k * col.shape[-1]) if batched else (ptr[k * n:].tolist(), 0)
        for i in range(n):
            if not 0 <= P[i] <= P[i + 1] <= len(flat) - off:
                return "EPTR_ORDER"
            prev = -1
            for j in flat[off + P[i]:off + P[i + 1]]:
                if j < 0 or j >= m:
                    return "ECOL_RANGE"
                if j <= prev:
                    return "ECOL_ORDER"
                prev = j
    return None


@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.parametrize("p", [1, 3])
def test_malformed_structure_raises_its_first_bad_rows_status(batched, p):
    """spmm walks each item's rows reading every pointer once; one or two corrupted pointers
    or columns raise the status of the first bad row, as a row-by-row check would."""
    g = torch.Generator().manual_seed(3)
    msgs = tsgu._C.status_messages()
    for trial in range(300):
        b, n, m, per = 3, 5, 6, 8
        ptr = torch.tensor([0, 2, 4, 4, 6, per]).repeat(b, 1)       # rows of 2, 2, 0, 2, 2 entries
        col = torch.stack([torch.cat([torch.randperm(m, generator=g)[:2].sort().values for _ in range(per // 2)])
                           for _ in range(b)])
        for _ in range(1 + trial % 2):
            if torch.rand(1, generator=g) < 0.5:
                ptr[torch.randint(b, (1,), generator=g), torch.randint(1, n, (1,), generator=g)] = \
                    torch.randint(-2, per + 3, (1,), generator=g)
            else:
                col.view(-1)[torch.randint(b * per, (1,), generator=g)] = torch.randint(-2, m + 2, (1,), generator=g)
        if not batched:                                              # one global pointer array
            ptr = torch.cat([ptr[0, :-1], ptr[1, :-1] + per, ptr[2] + 2 * per])
            col = col.reshape(-1)
        want = _first_bad_row_status(ptr, col, n, m, batched)
        call = lambda: tsgu._C.spmm(ptr, col, torch.ones(col.shape), b, n, m, torch.ones(b, m, p),
                                    torch.empty(b, n, p), 1)
        if want is None:
            call()
        else:
            with pytest.raises(ValueError, match=f"^{re.escape(msgs[want])}$"):
                call()


def test_transposed_product_on_two_threads_raises_the_first_bad_rows_status():
    """spmm_t (A^T G) on two threads, each owning a range of A's columns: one or two corrupted
    columns raise the status of the first bad row, as a row-by-row check would, and a
    well-formed A gives the same bits as on one thread."""
    g = torch.Generator().manual_seed(5)
    msgs = tsgu._C.status_messages()
    n, m, p = 1500, 1400, 16                                    # about 42k entries: two threads' work
    D = torch.rand(n, m, generator=g) < 0.02
    S = D.float().to_sparse_csr()
    ptr, col0, vals, G = S.crow_indices(), S.col_indices(), S.values(), torch.randn(n, p, generator=g)

    def call(col, threads):
        out = torch.empty(m, p)
        tsgu._C.spmm_t(ptr, col, vals, 1, n, m, G, out, threads)
        return out
    torch.testing.assert_close(call(col0, 2), D.float().T @ G, rtol=0, atol=1e-5)
    assert torch.equal(call(col0, 2), call(col0, 1))
    for trial in range(40):
        col = col0.clone()
        for _ in range(1 + trial % 2):
            col[torch.randint(col.numel(), (1,), generator=g)] = torch.randint(-2, m + 2, (1,), generator=g)
        want = _first_bad_row_status(ptr, col, n, m, False)
        if want is None:
            call(col, 2)
        else:
            with pytest.raises(ValueError, match=f"^{re.escape(msgs[want])}$"):
                call(col, 2)


@pytest.mark.skipif(SANITIZED, reason="RLIMIT_AS cannot be combined with ASan's shadow memory")
def test_hypersparse_coo_in_bounded_memory():
    """2**31 + 5 rows, 2 entries: O(nnz) memory or a clear ValueError before allocating,
    under a 4 GB address-space limit.  (p = 0 keeps the dense output empty: any
    p >= 1 needs >= 8 GB for the output alone.)"""
    r = run_child("""
        import time
        n = 2**31 + 5
        A = torch.sparse_coo_tensor(torch.tensor([[0, n - 1], [1, 2]]), torch.tensor([1.0, 2.0]), (n, 3))
        start = time.time()
        try:
            C = sparse_mm(A, torch.randn(3, 0))
            print("OK", tuple(C.shape))
        except ValueError as e:
            print("VALUEERROR", e)
        print("SECONDS", time.time() - start)
    """, timeout=120, memory_limit=4 << 30)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    assert lines[0] == "OK (2147483653, 0)" or lines[0].startswith("VALUEERROR"), r.stdout
    assert float(lines[1].split()[1]) < 10, r.stdout


def _csr_layer():
    S = torch.tensor([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]]).to_sparse_csr()

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.crow, self.col = S.crow_indices(), S.col_indices()
            self.values = torch.nn.Parameter(S.values().clone())

        def forward(self, X):
            A = torch.sparse_csr_tensor(self.crow, self.col, self.values, S.shape)
            return sparse_mm(A, X).relu() + 1
    return Layer()


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_torch_compile_of_a_csr_layer(backend):
    """torch.compile (fullgraph=False) of a layer calling sparse_mm on a CSR tensor:
    a graph break at worst, and the eager result and gradient."""
    torch._dynamo.reset()
    try:
        layer = _csr_layer()
        X = torch.randn(3, 4, generator=seeded("compile"))
        compiled = torch.compile(layer, backend=backend)
        out = compiled(X)
        out.sum().backward()
        got = layer.values.grad.clone()
        layer.values.grad = None
        ref = layer(X)
        ref.sum().backward()
        torch.testing.assert_close(out, ref)
        torch.testing.assert_close(got, layer.values.grad)
    finally:
        torch._dynamo.reset()


FUNC_UNSUPPORTED = r"torch\.func"


@pytest.mark.parametrize("transform", ["grad", "jvp"])
def test_torch_func_with_csr_is_clear(transform):
    """torch.func transforms over sparse_mm with a CSR A: the right answer, or an
    error whose message names torch.func as what is unsupported."""
    S = torch.tensor([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]]).to_sparse_csr()
    X = torch.randn(3, 4, generator=seeded("func"))
    T = torch.randn(3, 4, generator=seeded("func tangent"))
    try:
        if transform == "grad":
            got = torch.func.grad(lambda B: sparse_mm(S, B).sum())(X)
            ref = torch.func.grad(lambda B: (S.to_dense() @ B).sum())(X)
        else:
            got = torch.func.jvp(lambda B: sparse_mm(S, B), (X,), (T,))
            ref = torch.func.jvp(lambda B: S.to_dense() @ B, (X,), (T,))
    except (ValueError, TypeError, RuntimeError, NotImplementedError) as e:
        assert re.search(FUNC_UNSUPPORTED, str(e)), f"unclear error: {type(e).__name__}: {e}"
        return
    torch.testing.assert_close(got, ref)


@pytest.mark.parametrize("p", [0, 1, 3])
def test_hypersparse_coo_matches_dense(p):
    """Far more rows than entries (the path that keeps only non-empty rows), p = 0 included."""
    A = torch.sparse_coo_tensor([[0, 99, 99], [1, 2, 0]], [1.0, 2.0, -1.0], (100, 3)).requires_grad_()
    B = torch.randn(3, p, requires_grad=True, generator=seeded("hypersparse", p))
    C = sparse_mm(A, B)
    C.backward(torch.ones_like(C))
    Ad, Bd = A.detach().to_dense().requires_grad_(), B.detach().clone().requires_grad_()
    (Ad @ Bd).backward(torch.ones(100, p))
    torch.testing.assert_close(C, Ad @ Bd)
    torch.testing.assert_close(B.grad, Bd.grad)
    torch.testing.assert_close(A.grad.to_dense(), Ad.grad * (Ad.detach() != 0))


# ---------------------------------------------------------------- the no-grad path


@pytest.mark.parametrize("layout", LAYOUTS + ("coo_unflagged",))
@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.parametrize("n,nnz", [(20, 60), (300, 7)])     # and a hypersparse A (n*b > 8 * (nnz + 1))
def test_no_grad_path_gives_the_same_bits(layout, batched, n, nnz):
    """Without anything to differentiate, sparse_mm skips the autograd.Function (and
    on CPU multiplies A's own arrays: a COO A's row pointers built in the same C
    call where its entries are in order): the same bits as the forward of the
    recorded path, and no graph."""
    A, B, _, _ = make_case(layout, batched, n, 15, 5, nnz, torch.float32, torch.int64)
    recorded = sparse_mm(A, B.clone().requires_grad_())
    plain_out = sparse_mm(A, B)
    with torch.no_grad():
        no_grad = sparse_mm(A.detach().requires_grad_(), B.clone().requires_grad_())
    assert recorded.grad_fn is not None and plain_out.grad_fn is None and no_grad.grad_fn is None
    assert torch.equal(plain_out, recorded.detach()) and torch.equal(no_grad, plain_out)
    torch.testing.assert_close(plain_out, A.to_dense() @ B)
    if layout == "csr":                        # the SparseCSR operand: the custom op, or the kernel directly
        crow, col, val = A.crow_indices(), A.col_indices(), A.values()
        size = tuple(A.shape)
        recorded = sparse_mm(tsgu.SparseCSR(crow, col, val.clone().requires_grad_(), size), B)
        direct = sparse_mm(tsgu.SparseCSR(crow, col, val, size), B)
        assert recorded.grad_fn is not None and direct.grad_fn is None
        assert torch.equal(direct, recorded.detach()) and torch.equal(direct, plain_out)


def test_forward_mode_ad_still_refused():
    """An open forward-AD level takes the Function path, which refuses a tangent
    instead of dropping it silently."""
    import torch.autograd.forward_ad as fwAD
    A, B, _, _ = make_case("csr", False, 5, 4, 2, 8, torch.float64, torch.int64)
    with fwAD.dual_level():
        with pytest.raises(NotImplementedError, match="jvp"):
            sparse_mm(A, fwAD.make_dual(B, torch.ones_like(B)))


