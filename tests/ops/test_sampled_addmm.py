"""Tests of sampled_addmm: against torch.sparse.sampled_addmm (2-D and batched CSR,
float32/64) and a masked dense reference with autograd (every layout, batched, the
multi-head SparseCSR), gradcheck and gradgradcheck in float64, beta = 0 ignoring A's
NaNs, a transposed Y, empty cases, the same bits for any thread count, inputs
unchanged and in-place edits caught, errors, malformed structure, and
torch.compile(fullgraph=True) of a SparseCSR.  Results run on both routes: the C
kernels and the PyTorch-ops one that CUDA takes (forced on CPU here)."""
import pytest
import torch
from support.checks import num_threads
from support.children import SANITIZED, run_child
from support.operands import random_dense

from torchsparsegradutils import SparseCSR, _backends, sampled_addmm, sparse_coo_tensor

HAS_CUDA = torch.cuda.is_available()
TOL = {torch.float32: dict(atol=2e-5, rtol=2e-5), torch.float64: dict(atol=1e-12, rtol=1e-12)}
SCALES = [(1.0, 1.0), (0.5, -2.0), (0.0, 3.0)]


def operands(D, k=3, seed=1):
    gen = torch.Generator().manual_seed(seed)
    X = torch.randn((*D.shape[:-1], k), generator=gen, dtype=torch.float64).to(D.dtype)
    Y = torch.randn((*D.shape[:-2], k, D.shape[-1]), generator=gen, dtype=torch.float64).to(D.dtype)
    return X, Y


LAYOUTS = ["coo", "coo_uncoalesced", "csr", "sparse_csr", "batched_csr", "batched_coo", "batched_sparse_csr"]


def make(D, layout):
    """A of D's pattern in `layout` (an uncoalesced COO: every entry split in two duplicates,
    in reversed order; its matrix is D)."""
    if layout in ("csr", "batched_csr"):
        return D.to_sparse_csr()
    if layout == "sparse_csr":
        return SparseCSR.from_torch(D.to_sparse_csr())
    if layout == "batched_sparse_csr":
        return SparseCSR.from_torch(D.to_sparse())         # the stacked rows, each item its own nnz
    A = D.to_sparse().coalesce()
    if layout in ("coo", "batched_coo"):
        return A
    idx, val = A.indices(), A.values()
    return torch.sparse_coo_tensor(torch.cat([idx, idx], 1).flip(1), torch.cat([val * 0.25, val * 0.75]).flip(0),
                                   D.shape)


def dense_of(R):
    """A result as a dense tensor (torch cannot densify a batched CSR)."""
    if isinstance(R, SparseCSR):
        R = R.to_torch()
    if R.layout == torch.sparse_csr and R.dim() == 3:
        return torch.stack([r.to_dense() for r in R.unbind(0)])
    return R.to_dense()


def values_of(R):
    return R.values if isinstance(R, SparseCSR) else R.values()


def with_values(A, v):
    """A's pattern holding the leaf v (through our constructors, whose backward hands the
    values gradient through)."""
    if isinstance(A, SparseCSR):
        return A._replace(values=v)
    if A.layout == torch.sparse_csr:
        return torch.sparse_csr_tensor(A.crow_indices(), A.col_indices(), v, A.shape)
    return sparse_coo_tensor(A.indices(), v, A.shape, is_coalesced=True)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("beta,alpha", SCALES)
def test_matches_masked_dense_autograd(path, layout, dtype, beta, alpha):
    """Values at the pattern and the gradients of A's values, X and Y: dense autograd's
    (X @ Y masked to A's pattern)."""
    D = random_dense((2, 6, 5) if layout.startswith("batched") else (6, 5), dtype, same_pattern=layout == "batched_csr")
    A = make(D, layout)
    if not isinstance(A, SparseCSR) and A.layout == torch.sparse_coo:
        A = A.coalesce()
    mask = D != 0
    X, Y = operands(D)
    v = values_of(A).clone().requires_grad_()
    Xl, Yl = X.clone().requires_grad_(), Y.clone().requires_grad_()
    R = sampled_addmm(with_values(A, v), Xl, Yl, beta, alpha)
    Dl, Xr, Yr = D.double().requires_grad_(), X.double().requires_grad_(), Y.double().requires_grad_()
    ref = torch.where(mask, beta * Dl + alpha * (Xr @ Yr), torch.zeros((), dtype=torch.float64))
    torch.testing.assert_close(dense_of(R), ref.detach().to(dtype), **TOL[dtype])
    G = torch.randn(ref.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64) * mask
    (values_of(R) * G[mask].reshape(values_of(R).shape).to(dtype)).sum().backward()
    (ref * G).sum().backward()
    gv = v.grad if v.grad is not None or beta != 0 else torch.zeros_like(v)   # beta = 0: A's values unread
    torch.testing.assert_close(gv, Dl.grad[mask].reshape(v.shape).to(dtype), **TOL[dtype])
    torch.testing.assert_close(Xl.grad, Xr.grad.to(dtype), **TOL[dtype])
    torch.testing.assert_close(Yl.grad, Yr.grad.to(dtype), **TOL[dtype])


@pytest.mark.parametrize("batched", [False, True], ids=["2d", "batched"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_matches_torch_sparse_sampled_addmm(path, batched, dtype):
    D = random_dense((3, 7, 6) if batched else (7, 6), dtype, seed=3, same_pattern=True)
    A = D.to_sparse_csr()
    X, Y = operands(D, k=4, seed=4)
    for beta, alpha in SCALES:
        ours = sampled_addmm(A, X, Y, beta=beta, alpha=alpha)
        theirs = torch.sparse.sampled_addmm(A, X, Y, beta=beta, alpha=alpha)
        assert ours.layout == torch.sparse_csr
        assert torch.equal(ours.crow_indices(), theirs.crow_indices())
        assert torch.equal(ours.col_indices(), theirs.col_indices())
        torch.testing.assert_close(ours.values(), theirs.values(), **TOL[dtype])


def test_uncoalesced_coo_result_on_the_coalesced_pattern(path):
    D = random_dense((6, 5), seed=5)
    A = make(D, "coo_uncoalesced").requires_grad_()
    X, Y = operands(D)
    R = sampled_addmm(A, X, Y)
    assert R.is_coalesced() and torch.equal(R.indices(), D.to_sparse().indices())
    R.values().sum().backward()
    assert torch.equal(A.grad.coalesce().indices(), D.to_sparse().indices())
    torch.testing.assert_close(A.grad.to_dense(), (D != 0).double())


def test_gradcheck(path):
    D = random_dense((2, 5, 4), seed=6)
    X, Y = operands(D, seed=7)
    X.requires_grad_(), Y.requires_grad_()
    for layout in ("batched_coo", "batched_sparse_csr"):
        A = make(D, layout)
        v = values_of(A).clone().requires_grad_()
        assert torch.autograd.gradcheck(lambda v, X, Y: values_of(sampled_addmm(with_values(A, v), X, Y, 0.5, -1.5)),
                                        (v, X, Y))
    S = make(D[0], "sparse_csr")
    v = S.values.clone().requires_grad_()
    assert torch.autograd.gradgradcheck(lambda v, X, Y: sampled_addmm(S._replace(values=v), X, Y, 0.5, 2.0).values,
                                        (v, X[0], Y[0]))


def test_beta_zero_ignores_a_values_nan(path):
    D = random_dense((6, 5), seed=8)
    A = D.to_sparse_csr()
    A = torch.sparse_csr_tensor(A.crow_indices(), A.col_indices(), torch.full_like(A.values(), float("nan")), A.shape)
    X, Y = operands(D)
    R = sampled_addmm(A, X, Y, beta=0.0)
    torch.testing.assert_close(R.to_dense(), (X @ Y) * (D != 0))


def test_transposed_and_strided_operands(path):
    """Y = W.t() (column-major) is read in place; slices of wider buffers, a column-major X
    and PyTorch's lazy negation work too."""
    D = random_dense((7, 6), seed=9)
    A = D.to_sparse_csr()
    X, Y = operands(D, k=5)
    ref = (X @ Y)[D != 0] + D[D != 0]
    for Xs, Ys in ((X, Y.t().contiguous().t()), (torch.cat([X, X], 1)[:, :5], torch.cat([Y, Y], 1)[:, :6]),
                   (X.t().contiguous().t(), (-Y)._neg_view())):
        torch.testing.assert_close(sampled_addmm(A, Xs, Ys).values(), ref, **TOL[torch.float64])


@pytest.mark.parametrize("shape,k", [((0, 3), 2), ((3, 0), 2), ((4, 3), 0), ((2, 0, 3), 2), ((2, 3, 4), 0)])
@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_nnz_zero_and_empty(path, shape, k, layout):
    D = torch.zeros(shape, dtype=torch.float64)
    A = D.to_sparse() if layout == "coo" else D.to_sparse_csr()
    X = torch.randn(*shape[:-1], k, dtype=torch.float64, requires_grad=True)
    Y = torch.randn(*shape[:-2], k, shape[-1], dtype=torch.float64, requires_grad=True)
    R = sampled_addmm(A, X, Y)
    assert R.shape == A.shape and values_of(R).numel() == 0
    values_of(R).sum().backward()
    assert torch.equal(X.grad, torch.zeros_like(X)) and torch.equal(Y.grad, torch.zeros_like(Y))
    D = random_dense((4, 3), seed=10)          # k = 0 with entries: beta * A
    A = D.to_sparse_csr()
    torch.testing.assert_close(sampled_addmm(A, torch.ones(4, 0, dtype=torch.float64),
                                             torch.ones(0, 3, dtype=torch.float64), beta=2.0).to_dense(), 2 * D)


@pytest.mark.parametrize("layout", ["coo", "csr", "sparse_csr"])
def test_same_bits_for_any_thread_count(layout):
    D = random_dense((2, 300, 200), torch.float32, seed=11, density=0.3, same_pattern=True)
    A = make(D, "batched_" + layout if layout != "coo" else "batched_coo")
    X, Y = operands(D, k=16, seed=12)
    results = []
    for t in (1, 2, 5):
        with num_threads(t):
            v, Xl, Yl = values_of(A).clone().requires_grad_(), X.clone().requires_grad_(), Y.clone().requires_grad_()
            R = values_of(sampled_addmm(with_values(A, v), Xl, Yl, 0.5, 2.0))
            (R * torch.linspace(-1, 1, R.numel()).reshape(R.shape)).sum().backward()
            results.append((R.detach(), v.grad, Xl.grad, Yl.grad))
    for r in results[1:]:
        assert all(torch.equal(x, y) for x, y in zip(results[0], r))


def test_inputs_unchanged_and_inplace_edits_caught():
    D = random_dense((6, 5), seed=13)
    A = D.to_sparse_csr().requires_grad_()
    X, Y = operands(D)
    copies = [t.clone() for t in (A.values(), X, Y)]
    Xl, Yl = X.clone().requires_grad_(), Y.clone().requires_grad_()
    R = sampled_addmm(A, Xl, Yl, 0.5)
    assert all(torch.equal(a, b) for a, b in zip((A.values(), X, Y), copies))
    R.values().sum().backward()
    for edit in ("X", "Y"):
        Xe, Ye = X.clone().requires_grad_(), Y.clone().requires_grad_()
        Xa, Ya = Xe * 1, Ye * 1
        R = sampled_addmm(A.detach(), Xa, Ya)
        (Xa if edit == "X" else Ya).add_(1.0)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            R.values().sum().backward()


# ------------------------------------------------------------------ multi-head: values (nnz, H)
def multi_head(H=3, dtype=torch.float64, seed=20):
    D = random_dense((7, 6), seed=seed)
    S = SparseCSR.from_torch(D.to_sparse_csr())
    gen = torch.Generator().manual_seed(seed + 1)
    values = torch.randn(S.values.shape[0], H, generator=gen, dtype=torch.float64).to(dtype)
    X = torch.randn(H, 7, 4, generator=gen, dtype=torch.float64).to(dtype)
    Y = torch.randn(H, 4, 6, generator=gen, dtype=torch.float64).to(dtype)
    return S._replace(values=values), X, Y, D != 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_multi_head_is_each_head_on_its_own(path, dtype):
    """Head h: the single-head op on values[:, h], X[h], Y[h], and the masked dense
    reference; gradients of values, X and Y: dense autograd's."""
    S, X, Y, mask = multi_head(dtype=dtype)
    v, Xl, Yl = S.values.clone().requires_grad_(), X.clone().requires_grad_(), Y.clone().requires_grad_()
    R = sampled_addmm(S._replace(values=v), Xl, Yl, 0.5, 2.0).values
    assert R.shape == S.values.shape
    dense = torch.stack([dense_of(S._replace(values=S.values[:, h].double())) for h in range(3)]).requires_grad_()
    Xr, Yr = X.double().requires_grad_(), Y.double().requires_grad_()
    ref = (0.5 * dense + 2.0 * (Xr @ Yr))[:, mask].t()
    for h in range(3):
        one = sampled_addmm(S._replace(values=S.values[:, h].contiguous()), X[h], Y[h], 0.5, 2.0).values
        torch.testing.assert_close(R[:, h].detach(), one, **TOL[dtype])
    torch.testing.assert_close(R.detach(), ref.detach().to(dtype), **TOL[dtype])
    G = torch.randn(R.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    (R * G.to(dtype)).sum().backward()
    (ref * G).sum().backward()
    torch.testing.assert_close(v.grad, dense.grad[:, mask].t().to(dtype), **TOL[dtype])
    torch.testing.assert_close(Xl.grad, Xr.grad.to(dtype), **TOL[dtype])
    torch.testing.assert_close(Yl.grad, Yr.grad.to(dtype), **TOL[dtype])


@pytest.mark.parametrize("k", [1, 16, 33])
def test_multi_head_is_the_single_head_op_bit_for_bit(path, k):
    """Each head of a multi-head call (the heads on one copy of the pattern on the C
    route) has the bits of the single-head call on its own values, X and Y, for any
    thread count: rows without entries, a hub row, an odd width.  Bits on the C route
    only: the torch-ops route's sums are PyTorch's, whose order is not ours to promise."""
    n, m, H = 90, 70, 4
    gen = torch.Generator().manual_seed(31)
    D = torch.rand(n, m, generator=gen, dtype=torch.float64)
    D[D < 0.9] = 0
    D[5:15] = 0                                         # empty rows
    D[40] = torch.rand(m, generator=gen, dtype=torch.float64) + 0.1    # a hub row: every column
    S = SparseCSR.from_torch(D.to_sparse_csr())
    values = torch.randn(S.values.shape[0], H, generator=gen, dtype=torch.float64)
    X = torch.randn(H, n, k, generator=gen, dtype=torch.float64)
    Y = torch.randn(H, k, m, generator=gen, dtype=torch.float64)
    outs = []
    for t in (1, 2):
        with num_threads(t):
            outs.append(sampled_addmm(S._replace(values=values), X, Y, 0.5, 2.0).values)
    def check(a, b):
        if path == "c_kernels":
            assert torch.equal(a, b)
        else:
            torch.testing.assert_close(a, b, **TOL[torch.float64])

    check(outs[0], outs[1])
    for h in range(H):
        one = sampled_addmm(S._replace(values=values[:, h].contiguous()), X[h], Y[h], 0.5, 2.0).values
        check(outs[0][:, h], one)


def test_multi_head_gradcheck(path):
    S, X, Y, _ = multi_head(H=2, seed=22)
    args = (S.values.clone().requires_grad_(), X.requires_grad_(), Y.requires_grad_())
    fn = lambda v, X, Y: sampled_addmm(S._replace(values=v), X, Y, -0.5, 1.5).values  # noqa: E731
    assert torch.autograd.gradcheck(fn, args)
    assert torch.autograd.gradgradcheck(fn, args)


@pytest.mark.parametrize("heads", [False, True], ids=["one_head", "multi_head"])
def test_compiles_fullgraph_on_a_sparse_csr(heads):
    if heads:
        S, X, Y, _ = multi_head(H=2, dtype=torch.float32, seed=23)
    else:
        D = random_dense((7, 6), torch.float32, seed=23)
        S = SparseCSR.from_torch(D.to_sparse_csr())
        X, Y = operands(D, k=4)

    def model(v, X, Y):
        return sampled_addmm(S._replace(values=v), X, Y, 0.5, 2.0).values.tanh()

    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    outs = []
    for fn in (compiled, model):
        leaves = [t.clone().requires_grad_() for t in (S.values, X, Y)]
        y = fn(*leaves)
        y.sum().backward()
        outs.append((y.detach(), *(t.grad for t in leaves)))
    torch.testing.assert_close(outs[0], outs[1])


def test_second_derivatives_of_a_torch_sparse_tensor_raise():
    D = random_dense((5, 4), seed=24)
    X, Y = operands(D)
    X.requires_grad_()
    R = sampled_addmm(D.to_sparse_csr(), X, Y)
    with pytest.raises(RuntimeError, match="differentiable once.*SparseCSR"):
        torch.autograd.grad(R.values().sum(), X, create_graph=True)


def test_errors():
    D = random_dense((4, 3), seed=25)
    A = D.to_sparse_csr()
    X, Y = operands(D)
    with pytest.raises(ValueError, match="sparse COO or CSR.*torch.addmm"):
        sampled_addmm(D, X, Y)
    with pytest.raises(ValueError, match="sparse tensor or a SparseCSR"):
        sampled_addmm([1.0], X, Y)
    with pytest.raises(ValueError, match="layout torch.sparse_csc"):
        sampled_addmm(D.to_sparse_csc(), X, Y)
    with pytest.raises(ValueError, match="2-D .* or batched 3-D"):
        sampled_addmm(torch.ones(2, 2, 2, 2).to_sparse(), X, Y)
    with pytest.raises(ValueError, match="no dense dimensions"):
        sampled_addmm(torch.ones(4, 3, 2).to_sparse(2), X, Y)
    with pytest.raises(ValueError, match="X must be a dense"):
        sampled_addmm(A, X.to_sparse(), Y)
    with pytest.raises(ValueError, match="Y must be a dense"):
        sampled_addmm(A, X, [1.0])
    with pytest.raises(ValueError, match="2-D like A"):
        sampled_addmm(A, X[None], Y)
    for Xb, Yb in ((X[:3], Y), (X, Y[:, :2]), (X[:, :2], Y)):
        with pytest.raises(ValueError, match=r"X must be \(4, k\) and Y \(k, 3\)"):
            sampled_addmm(A, Xb, Yb)
    B = random_dense((2, 4, 3), seed=26).to_sparse()
    with pytest.raises(ValueError, match=r"X must be \(b, 4, k\)"):
        sampled_addmm(B, torch.ones(3, 4, 2, dtype=torch.float64), torch.ones(3, 2, 3, dtype=torch.float64))
    with pytest.raises(TypeError, match="supports float32 and float64"):
        sampled_addmm(A.to(torch.float16), X.half(), Y.half())
    with pytest.raises(TypeError, match="one dtype"):
        sampled_addmm(A, X.float(), Y)
    with pytest.raises(TypeError, match="beta must be a real number"):
        sampled_addmm(A, X, Y, beta=torch.tensor(1.0))
    with pytest.raises(TypeError, match="alpha must be a real number"):
        sampled_addmm(A, X, Y, alpha=True)
    S, Xh, Yh, _ = multi_head(H=2)
    with pytest.raises(ValueError, match=r"\(H, n, k\) and \(H, k, m\)"):
        sampled_addmm(S, Xh[0], Yh[0])
    with pytest.raises(ValueError, match="with 2 heads"):
        sampled_addmm(S, torch.cat([Xh, Xh[:1]]), torch.cat([Yh, Yh[:1]]))
    with pytest.raises(ValueError, match="shape of col_indices"):
        sampled_addmm(S._replace(values=S.values[1:]), Xh, Yh)
    Sb = SparseCSR.from_torch(B)
    with pytest.raises(ValueError, match="need a 2-D SparseCSR"):
        sampled_addmm(Sb._replace(values=Sb.values[:, None]), Xh, Yh)


@pytest.mark.parametrize("route", [False, True], ids=["C", "torch_ops"])
def test_malformed_structure_is_a_value_error(route, monkeypatch):
    monkeypatch.setattr(_backends, "force_torch_ops", route)
    ptr, vals = torch.tensor([0, 1, 3]), torch.tensor([1.0, 2.0, 3.0])
    X, Y = torch.ones(2, 2), torch.ones(2, 3)
    for col in (torch.tensor([0, 1, 3]), torch.tensor([0, 2, 1]), torch.tensor([0, -1, 1])):
        with pytest.raises(ValueError, match="malformed sparse matrix"):
            sampled_addmm(torch.sparse_csr_tensor(ptr, col, vals, (2, 3)), X, Y)
        with pytest.raises(ValueError, match="malformed sparse matrix"):
            sampled_addmm(SparseCSR(ptr, col, vals, (2, 3)), X, Y)
    with pytest.raises(ValueError, match="malformed sparse matrix"):
        sampled_addmm(torch.sparse_coo_tensor(torch.tensor([[0, 3]]).t(), vals[:1], (2, 3)), X, Y)


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_cuda_matches_cpu():
    D = random_dense((2, 6, 5), seed=27)
    X, Y = operands(D)
    for A in (D.to_sparse(), SparseCSR.from_torch(D.to_sparse())):
        cpu = values_of(sampled_addmm(A, X, Y, 0.5, 2.0))
        Ac = A.cuda() if isinstance(A, torch.Tensor) else SparseCSR(*(t.cuda() for t in A[:3]), A.size)
        gpu = values_of(sampled_addmm(Ac, X.cuda(), Y.cuda(), 0.5, 2.0))
        torch.testing.assert_close(gpu.cpu(), cpu)


@pytest.mark.skipif(SANITIZED, reason="RLIMIT_AS cannot be combined with ASan's shadow memory")
def test_sampled_addmm_hypersparse_coo_memory_is_o_nnz():
    """Issue 26, defect 4: sampled_addmm of a COO A of 2**31 + 5 rows allocated its row
    pointers (17 GB).  Now forward and backward (A and Y; X, one row expanded to n, gets
    none: a dense gradient of n rows) run through A's non-empty rows under a 4 GB
    address-space limit; every value worked out by hand."""
    r = run_child("""
        n = 2**31 + 5
        idx = torch.tensor([[0, 0, n - 1], [0, 2, 1]])
        A = torch.sparse_coo_tensor(idx, torch.tensor([1.0, 3.0, 5.0]), (n, 3), is_coalesced=True).requires_grad_()
        X = torch.tensor([[1.0, 2.0]]).expand(n, 2)                 # every row [1, 2]: X @ Y rows [9, 12, 15]
        Y = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], requires_grad=True)
        out = sampled_addmm(A, X, Y, beta=0.5, alpha=2.0)
        assert out.shape == (n, 3) and torch.equal(out._indices(), idx), out
        assert out._values().tolist() == [18.5, 31.5, 26.5], out
        out.backward(torch.sparse_coo_tensor(idx, torch.tensor([1.0, 2.0, 3.0]), (n, 3)))
        assert A.grad._values().tolist() == [0.5, 1.0, 1.5], A.grad              # beta * G
        assert Y.grad.tolist() == [[2.0, 6.0, 4.0], [4.0, 12.0, 8.0]], Y.grad    # alpha * X^T G
        print("OK")
    """, timeout=300, memory_limit=4 << 30)
    assert r.returncode == 0 and r.stdout.strip() == "OK", r.stdout + r.stderr[-3000:]
