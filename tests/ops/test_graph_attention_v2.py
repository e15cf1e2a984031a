"""Tests of graph_attention_v2: against a dense PyTorch reference (per head, the masked
softmax over each row of sum_c att LeakyReLU(x_src[j] + x_dst[i] + edge_term), absent
entries -inf, with autograd) for the output, the attention and every gradient (x_src as
source of scores and as message, x_dst, att, edge_term, edge_score); gradcheck in
float64; x_dst the same tensor as x_src; dropout (the GAT kernels' mask for a seed);
empty rows, hub rows and nnz = 0; the same bits for 1/2/5 threads; in-place edits after
the forward; errors and malformed structure; the C entry points' checks; the custom
op's opcheck and torch.compile(fullgraph=True) of a SparseCSR.  Every test of results
runs on both CPU routes: the C kernels and the PyTorch-ops fallback (forced)."""
import pytest
import torch
from support.checks import num_threads
from support.references import dense_graph_attention_v2

from torchsparsegradutils import SparseCSR, _backends, graph_attention, graph_attention_v2

TOL = {torch.float32: dict(atol=1e-5, rtol=1e-4), torch.float64: dict(atol=1e-12, rtol=1e-10)}


def pattern(n, m, density=0.4, seed=0):
    """A boolean (n, m) pattern, row 1 and column 2 empty, row 0 a hub (every source)."""
    mask = torch.rand(n, m, generator=torch.Generator().manual_seed(seed)) < density
    if n > 2 and m > 2:
        mask[1, :] = False
        mask[:, 2] = False
        mask[0, :] = True
    return mask


def operands(mask, H, C, dtype=torch.float64, seed=0, edge=False):
    """(x_src, x_dst, att, edge_term or None, edge_score or None), leaves that require grad."""
    gen = torch.Generator().manual_seed(seed + 1)
    (n, m), nnz = mask.shape, int(mask.sum())
    shapes = [(m, H, C), (n, H, C), (H, C)] + ([(nnz, H, C), (nnz, H)] if edge else [])
    ts = [torch.randn(s, generator=gen, dtype=dtype).requires_grad_() for s in shapes]
    return ts + [None, None] if not edge else ts


def as_adjacency(mask, layout, itype=torch.int64):
    D = mask.double()
    if layout == "coo":
        return D.to_sparse()
    A = D.to_sparse_csr()
    ptr, col = A.crow_indices().to(itype), A.col_indices().to(itype)
    if layout == "csr":
        return torch.sparse_csr_tensor(ptr, col, A.values(), D.shape)
    return SparseCSR(ptr, col, A.values(), tuple(D.shape))


def _grads(out, alpha, inputs, seed=3):
    gen = torch.Generator().manual_seed(seed)
    G = torch.randn(out.shape, generator=gen, dtype=out.dtype)
    Ga = torch.randn(alpha.shape, generator=gen, dtype=alpha.dtype)
    return torch.autograd.grad((out * G).sum() + (alpha * Ga).sum(), inputs, allow_unused=True)


@pytest.mark.parametrize("layout", ["sparse_csr", "csr", "coo"])
@pytest.mark.parametrize("H,C", [(1, 4), (3, 5), (2, 8)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("edge", [False, True], ids=["plain", "edge"])
def test_matches_dense_reference(path, layout, H, C, dtype, edge):
    mask = pattern(7, 9)
    xl, xr, att, et, b = operands(mask, H, C, dtype, edge=edge)
    inputs = [t for t in (xl, xr, att, et, b) if t is not None]
    for itype in (torch.int32, torch.int64) if layout != "coo" else (torch.int64,):
        A = as_adjacency(mask, layout, itype)
        out, alpha = graph_attention_v2(A, xl, xr, att, 0.15, return_attention=True, edge_term=et, edge_score=b)
        want, walpha = dense_graph_attention_v2(mask, xl, xr, att, 0.15, et, b)
        torch.testing.assert_close(out, want, **TOL[dtype])
        torch.testing.assert_close(alpha, walpha, **TOL[dtype])
        for g, r in zip(_grads(out, alpha, inputs), _grads(want, walpha, inputs)):
            torch.testing.assert_close(g, r, **TOL[dtype])


@pytest.mark.parametrize("H", [1, 2])
def test_gradcheck(path, H):
    mask = pattern(5, 6, 0.5, seed=5)
    A = as_adjacency(mask, "sparse_csr")
    ins = operands(mask, H, 3, seed=5, edge=True)

    def f(xl, xr, att, et, b):
        return graph_attention_v2(A, xl, xr, att, 0.3, return_attention=True, edge_term=et, edge_score=b)
    assert torch.autograd.gradcheck(f, ins)
    assert torch.autograd.gradcheck(lambda xl, xr, att: graph_attention_v2(A, xl, xr, att, 0.3), ins[:3])

    def dropped(xl, xr, att):                     # a dropout mask fixed by the seed
        torch.manual_seed(7)
        return graph_attention_v2(A, xl, xr, att, 0.3, dropout=0.4)
    assert torch.autograd.gradcheck(dropped, ins[:3])


def test_one_tensor_for_both_ends(path):
    """x_dst = x_src (shared weights): its gradient sums both roles, as autograd's."""
    mask = pattern(6, 6, 0.5, seed=6)
    A = as_adjacency(mask, "sparse_csr")
    x, _, att, _, _ = operands(mask, 2, 3, seed=6)
    out, alpha = graph_attention_v2(A, x, x, att, 0.2, return_attention=True)
    want, walpha = dense_graph_attention_v2(mask, x, x, att, 0.2)
    for g, r in zip(_grads(out, alpha, [x, att]), _grads(want, walpha, [x, att])):
        torch.testing.assert_close(g, r)
    assert torch.autograd.gradcheck(lambda x, att: graph_attention_v2(A, x, x, att, 0.2), (x, att))


def test_dropout_is_the_gat_mask(path):
    """The same seed drops the same (entry, head) pairs as graph_attention: with att = 0
    the scores are equal, as GAT's with zero scores."""
    n, m, H = 30, 40, 4
    mask = pattern(n, m, 0.5, seed=8)
    A = as_adjacency(mask, "sparse_csr")
    xl, xr, _, _, _ = operands(mask, H, 3, seed=8)
    att = torch.zeros(H, 3, dtype=torch.float64)
    torch.manual_seed(9)
    out1, a1 = graph_attention_v2(A, xl, xr, att, dropout=0.25, return_attention=True)
    torch.manual_seed(9)
    out2, a2 = graph_attention(A, xl, torch.zeros(m, H, dtype=xl.dtype), torch.zeros(n, H, dtype=xl.dtype),
                               dropout=0.25, return_attention=True)
    torch.testing.assert_close(out1, out2)
    assert torch.equal(a1 == 0, a2 == 0)
    assert 0.6 < (a1 != 0).double().mean() < 0.9
    torch.manual_seed(9)
    assert torch.equal(graph_attention_v2(A, xl, xr, att, dropout=0.25), out1)          # the seed fixes it
    plain = graph_attention_v2(A, xl, xr, att)
    torch.testing.assert_close(graph_attention_v2(A, xl, xr, att, dropout=0.25, training=False), plain)
    assert torch.equal(graph_attention_v2(A, xl, xr, att, dropout=1.0), torch.zeros_like(plain))


@pytest.mark.parametrize("n,m", [(0, 0), (0, 3), (3, 0), (4, 5)])
def test_nnz_zero_and_empty(path, n, m):
    A = SparseCSR(torch.zeros(n + 1, dtype=torch.int64), torch.zeros(0, dtype=torch.int64), torch.zeros(0), (n, m))
    xl, xr, att, _, _ = operands(torch.zeros(n, m, dtype=torch.bool), 2, 3)
    out, alpha = graph_attention_v2(A, xl, xr, att, return_attention=True)
    assert out.shape == (n, 2, 3) and alpha.shape == (0, 2) and not out.any()
    grads = torch.autograd.grad(out.sum(), (xl, xr, att))
    assert not any(g.any() for g in grads)


def test_same_bits_for_any_thread_count():
    """Large enough that the kernels split rows (forward, gradient by rows), sources (their
    sums) and att's columns over threads."""
    mask = pattern(600, 500, 0.1, seed=13)
    A = as_adjacency(mask, "sparse_csr")
    ins = operands(mask, 4, 16, torch.float32, seed=13, edge=True)
    results = []
    for t in (1, 2, 5):
        with num_threads(t):
            torch.manual_seed(14)
            out, alpha = graph_attention_v2(A, *ins[:3], dropout=0.3, return_attention=True, edge_term=ins[3],
                                            edge_score=ins[4])
            G = torch.linspace(-1, 1, out.numel()).reshape(out.shape)
            grads = torch.autograd.grad((out * G).sum() + alpha.sum(), ins)
            results.append((out.detach(), alpha.detach(), *grads))
    for r in results[1:]:
        assert all(torch.equal(a, b) for a, b in zip(results[0], r))


def test_inputs_unchanged_and_edits_after_forward_detected():
    mask = pattern(5, 6, 0.5)
    A = as_adjacency(mask, "sparse_csr")
    ins = operands(mask, 2, 3, edge=True)
    before = [t.detach().clone() for t in (A.crow_indices, A.col_indices, *ins)]
    graph_attention_v2(A, *ins[:3], dropout=0.5, edge_term=ins[3], edge_score=ins[4]).sum().backward()
    assert all(torch.equal(a, b) for a, b in zip(before, (A.crow_indices, A.col_indices, *ins)))
    for i in range(4):                      # xl, xr, att, edge_term: read by the backward
        used = [t.detach().clone().requires_grad_() * 1 for t in ins[:4]]
        out = graph_attention_v2(A, *used[:3], edge_term=used[3])
        with torch.no_grad():
            used[i].add_(1)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            out.sum().backward()


def test_errors():
    mask = pattern(4, 5)
    A = as_adjacency(mask, "csr")
    xl, xr, att, et, b = operands(mask, 2, 3, edge=True)
    with pytest.raises(ValueError, match="2-D sparse COO or CSR"):
        graph_attention_v2(mask.double(), xl, xr, att)
    with pytest.raises(ValueError, match="2-D adjacency"):
        graph_attention_v2(torch.ones(2, 4, 5).to_sparse(), xl, xr, att)
    with pytest.raises(ValueError, match="x_src must be"):
        graph_attention_v2(A, xl[:4], xr, att)
    with pytest.raises(ValueError, match="x_dst must be"):
        graph_attention_v2(A, xl, xr[:3], att)
    with pytest.raises(ValueError, match="x_dst must be"):
        graph_attention_v2(A, xl, xr[:, :1], att)
    with pytest.raises(ValueError, match="att must be"):
        graph_attention_v2(A, xl, xr, att[None])
    with pytest.raises(ValueError, match="edge_term must be"):
        graph_attention_v2(A, xl, xr, att, edge_term=et[:-1])
    with pytest.raises(ValueError, match="edge_score must be"):
        graph_attention_v2(A, xl, xr, att, edge_score=b[:, :1])
    with pytest.raises(ValueError, match="must be a tensor"):
        graph_attention_v2(A, xl, [1.0], att)
    with pytest.raises(ValueError, match="edge_term must be a tensor or None"):
        graph_attention_v2(A, xl, xr, att, edge_term=1.0)
    with pytest.raises(TypeError, match="float32 and float64"):
        graph_attention_v2(A, xl.detach().long(), xr, att)
    with pytest.raises(TypeError, match="att must have x_src's dtype"):
        graph_attention_v2(A, xl, xr, att.float())
    for p in (-0.1, 1.5):
        with pytest.raises(ValueError, match="dropout must be in"):
            graph_attention_v2(A, xl, xr, att, dropout=p)


@pytest.mark.parametrize("route", [False, True], ids=["C", "torch_ops"])
def test_malformed_structure_is_a_value_error(route, monkeypatch):
    monkeypatch.setattr(_backends, "force_torch_ops", route)
    xl, xr, att, _, _ = operands(torch.zeros(2, 3, dtype=torch.bool), 2, 3)
    ptr = torch.tensor([0, 1, 3])
    for col in (torch.tensor([0, 1, 3]), torch.tensor([0, 2, 1]), torch.tensor([0, -1, 1])):
        with pytest.raises(ValueError, match="malformed sparse matrix"):
            graph_attention_v2(SparseCSR(ptr, col, torch.ones(3), (2, 3)), xl, xr, att)
    with pytest.raises(ValueError, match="malformed sparse matrix"):
        graph_attention_v2(SparseCSR(torch.tensor([0, 2, 1]), torch.tensor([0]), torch.ones(1), (2, 3)), xl, xr, att)


def test_kernels_check_their_arrays():
    from torchsparsegradutils import _C
    mask = pattern(4, 5)
    A = as_adjacency(mask, "sparse_csr")
    xl, xr, att, et, b = (t.detach() for t in operands(mask, 2, 3, edge=True))
    nnz = A.col_indices.shape[0]
    pat = (A.crow_indices, A.col_indices, 4, 5)
    alpha, out = torch.empty(nnz, 2, dtype=xl.dtype), torch.empty(4, 2, 3, dtype=xl.dtype)
    ok = (0, 0, 1.0, 0.2)
    with pytest.raises(ValueError, match="alpha must have shape"):
        _C.gatv2_forward(*pat, xl, xr, att, None, None, *ok, alpha[:-1], out, 1)
    with pytest.raises(ValueError, match="xr must have shape"):
        _C.gatv2_forward(*pat, xl, xr[:-1], att, None, None, *ok, alpha, out, 1)
    with pytest.raises(ValueError, match="att must have shape"):
        _C.gatv2_forward(*pat, xl, xr, att[:, :2], None, None, *ok, alpha, out, 1)
    with pytest.raises(ValueError, match="et must have shape"):
        _C.gatv2_forward(*pat, xl, xr, att, et[:-1], None, *ok, alpha, out, 1)
    with pytest.raises(ValueError, match="b must have shape"):
        _C.gatv2_forward(*pat, xl, xr, att, et, b[:-1], *ok, alpha, out, 1)
    with pytest.raises(TypeError, match="dtype of xl"):
        _C.gatv2_forward(*pat, xl, xr.float(), att, None, None, *ok, alpha, out, 1)
    with pytest.raises(ValueError, match="drop must be in"):
        _C.gatv2_forward(*pat, xl, xr, att, None, None, 0, 2**24 + 1, 1.0, 0.2, alpha, out, 1)
    with pytest.raises(ValueError, match="contiguous"):
        _C.gatv2_forward(*pat, xl.transpose(1, 2).contiguous().transpose(1, 2), xr, att, None, None, *ok, alpha,
                         out, 1)
    _C.gatv2_forward(*pat, xl, xr, att, et, b, *ok, alpha, out, 1)
    G, dz = torch.randn_like(out), torch.empty_like(alpha)
    outs = [dz, torch.empty_like(xl), torch.empty_like(xr), torch.empty_like(xr), torch.empty_like(att)]
    with pytest.raises(ValueError, match="grad must have shape"):
        _C.gatv2_grad(*pat, xl, xr, att, et, *ok, alpha, G[:-1], None, *outs, torch.empty_like(et), 1)
    with pytest.raises(ValueError, match="grad_alpha must have shape"):
        _C.gatv2_grad(*pat, xl, xr, att, et, *ok, alpha, G, alpha[:-1], *outs, torch.empty_like(et), 1)
    with pytest.raises(ValueError, match="grad_et must have shape"):
        _C.gatv2_grad(*pat, xl, xr, att, et, *ok, alpha, G, None, *outs, et[:-1], 1)
    with pytest.raises(ValueError, match="grad_xl must have shape"):
        _C.gatv2_grad(*pat, xl, xr, att, None, *ok, alpha, G, None, dz, xr.clone(), *outs[2:], None, 1)
    with pytest.raises(ValueError, match="malformed sparse matrix"):
        _C.gatv2_grad(A.crow_indices, A.col_indices.flip(0), 4, 5, xl, xr, att, None, *ok, alpha, G, None, *outs,
                      None, 1)


def test_compiled_sparse_csr_matches_eager():
    mask = pattern(6, 6, 0.5, seed=15)
    A = as_adjacency(mask, "sparse_csr")
    xl, xr, att, et, b = operands(mask, 2, 3, torch.float32, seed=15, edge=True)

    def model(xl, xr, att, et, b):
        out, alpha = graph_attention_v2(A, xl * 2, xr, att, 0.1, return_attention=True, edge_term=et, edge_score=b)
        return out.sum(1) + alpha.sum()

    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    outs = []
    for fn in (compiled, model):
        y = fn(xl, xr, att, et, b)
        outs.append((y.detach(), *torch.autograd.grad(y.sum(), (xl, xr, att, et, b))))
    for a, c in zip(*outs):
        torch.testing.assert_close(a, c)


def test_custom_op_opcheck():
    mask = pattern(5, 6, 0.5, seed=16)
    A = as_adjacency(mask, "sparse_csr")
    xl, xr, att, et, b = operands(mask, 2, 3, seed=16, edge=True)
    for e, bb in ((None, None), (et, b)):
        args = (A.crow_indices, A.col_indices, [5, 6], xl, xr, att, e, bb)
        for seed, drop, scale in ((None, 0, 1.0), (torch.tensor([7]), 2**22, 1.5)):
            torch.library.opcheck(torch.ops.tsgu.gatv2.default, (*args, seed, drop, scale, 0.2))
            out, alpha = torch.ops.tsgu.gatv2(*args, seed, drop, scale, 0.2)
            plain = (A.crow_indices, A.col_indices, [5, 6], xl.detach(), xr.detach(), att.detach(),
                     None if e is None else e.detach(), seed, drop, scale, 0.2,
                     alpha.detach(), torch.randn_like(out))    # differentiable once: gatv2_grad has no autograd
            for galpha in (None, torch.randn_like(alpha)):
                torch.library.opcheck(torch.ops.tsgu.gatv2_grad.default, (*plain, galpha))
