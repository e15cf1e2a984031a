"""Tests of graph_attention: against a dense PyTorch reference (the masked softmax of the
LeakyReLU scores, absent entries -inf, with autograd) for the output, the attention and
every gradient, gradcheck in float64, dropout (a mask from PyTorch's generator: the same
under a seed, scaled, off outside training), empty rows and nnz = 0, one and several
heads, an additive edge_score per entry (hub and empty rows, gradcheck), the same bits
for 1/2/5 threads, in-place edits after the forward, errors and
malformed structure, the custom op's opcheck and torch.compile(fullgraph=True) of a
SparseCSR.  Every test of results runs on both routes: the C kernels and the PyTorch-ops
one that CUDA takes (forced on CPU here).  The tests whose body is the same for
graph_attention_v2 (nnz = 0, thread counts, edits after the forward, malformed structure,
torch.compile, opcheck) run here for both ops."""
import pytest
import torch
from support.checks import num_threads
from support.gat import GAT, GATV2, as_adjacency, attention_mask, gat_leaves, hub_mask
from support.operands import seeded
from support.references import dense_edge_score

from torchsparsegradutils import SparseCSR, _backends, graph_attention
from torchsparsegradutils._core.view import CSRView

TOL = {torch.float32: dict(atol=1e-5, rtol=1e-4), torch.float64: dict(atol=1e-12, rtol=1e-10)}
BOTH = pytest.mark.parametrize("op", [GAT, GATV2], ids=["gat", "gatv2"])


def operands(n, m, H, F, dtype=torch.float64, seed=0):
    """x, score_src, score_dst for an (n, m) graph."""
    return gat_leaves(torch.zeros(n, m, dtype=torch.bool), H, F, dtype, seed)


def reference(mask, x, s, d, slope=0.2, drop=None, edge=None):
    """(out (n, H, F), alpha (H, n, m)) in dense PyTorch: the masked softmax over each row;
    drop (H, n, m) multiplies alpha (the dropout mask with its scale), if given; edge
    (nnz, H) in row-major order is added to the scores at the pattern, if given."""
    z = s.t()[:, None, :] + d.t()[:, :, None]                     # (H, n, m): s_j + d_i
    if edge is not None:
        z = z + dense_edge_score(mask, edge)
    e = torch.nn.functional.leaky_relu(z, slope).masked_fill(~mask, float("-inf"))
    alpha = torch.softmax(e, -1).nan_to_num(0.0)                   # an empty row: zeros
    if drop is not None:
        alpha = alpha * drop
    return torch.einsum("hnm,mhf->nhf", alpha, x), alpha


def at_pattern(alpha, mask):
    """(H, n, m) -> (nnz, H) in row-major (CSR) order."""
    return alpha[:, mask].t()


@pytest.mark.parametrize("layout", ["sparse_csr", "csr", "coo"])
@pytest.mark.parametrize("H,F", [(1, 4), (3, 5)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_matches_dense_reference(path, layout, H, F, dtype):
    n, m = 7, 9
    mask = attention_mask(n, m)
    x, s, d = operands(n, m, H, F, dtype)
    for itype in (torch.int32, torch.int64) if layout != "coo" else (torch.int64,):
        A = as_adjacency(mask, layout, itype)
        out, alpha = graph_attention(A, x, s, d, 0.15, return_attention=True)
        want, walpha = reference(mask, x, s, d, 0.15)
        torch.testing.assert_close(out, want, **TOL[dtype])
        torch.testing.assert_close(alpha, at_pattern(walpha, mask), **TOL[dtype])
        # every gradient, through out and through alpha
        G = torch.randn(out.shape, dtype=dtype, generator=torch.Generator().manual_seed(3))
        Ga = torch.randn(alpha.shape, dtype=dtype, generator=torch.Generator().manual_seed(4))
        got = torch.autograd.grad((out * G).sum() + (alpha * Ga).sum(), (x, s, d))
        exp = torch.autograd.grad((want * G).sum() + (at_pattern(walpha, mask) * Ga).sum(), (x, s, d))
        for a, b in zip(got, exp):
            torch.testing.assert_close(a, b, **TOL[dtype])
        got = torch.autograd.grad((graph_attention(A, x, s, d, 0.15) * G).sum(), (x, s, d))
        exp = torch.autograd.grad((reference(mask, x, s, d, 0.15)[0] * G).sum(), (x, s, d))
        for a, b in zip(got, exp):
            torch.testing.assert_close(a, b, **TOL[dtype])


@pytest.mark.parametrize("H", [1, 2])
def test_gradcheck(path, H):
    mask = attention_mask(5, 6, 0.5, seed=5)
    A = as_adjacency(mask, "sparse_csr")
    x, s, d = operands(5, 6, H, 3, seed=5)
    assert torch.autograd.gradcheck(lambda x, s, d: graph_attention(A, x, s, d, 0.3), (x, s, d))
    assert torch.autograd.gradcheck(lambda x, s, d: graph_attention(A, x, s, d, 0.3, return_attention=True)[1],
                                    (x, s, d))
    # with a dropout mask fixed by the seed: the same mask on every call
    def dropped(x, s, d):
        torch.manual_seed(7)
        return graph_attention(A, x, s, d, 0.3, dropout=0.4)
    assert torch.autograd.gradcheck(dropped, (x, s, d))


def test_scores_at_zero_take_the_positive_side(path):
    """z = 0 exactly: LeakyReLU's derivative there is the negative slope's, as PyTorch's."""
    mask = torch.ones(2, 2, dtype=torch.bool)
    x = torch.randn(2, 1, 2, dtype=torch.float64, requires_grad=True)
    s = torch.tensor([[0.0], [1.0]], dtype=torch.float64, requires_grad=True)
    d = torch.tensor([[0.0], [-1.0]], dtype=torch.float64, requires_grad=True)
    out = graph_attention(as_adjacency(mask, "sparse_csr"), x, s, d, 0.2)
    want, _ = reference(mask, x, s, d)
    G = torch.randn_like(out)
    for a, b in zip(torch.autograd.grad((out * G).sum(), (x, s, d)), torch.autograd.grad((want * G).sum(), (x, s, d))):
        torch.testing.assert_close(a, b)


def test_dropout(path):
    n, m, H = 30, 40, 4
    mask = attention_mask(n, m, 0.5, seed=8)
    A = as_adjacency(mask, "sparse_csr")
    x, s, d = operands(n, m, H, 3, seed=8)
    _, full = reference(mask, x, s, d)
    full = at_pattern(full, mask)
    torch.manual_seed(9)
    out1, a1 = graph_attention(A, x, s, d, dropout=0.25, return_attention=True)
    torch.manual_seed(9)
    out2, a2 = graph_attention(A, x, s, d, dropout=0.25, return_attention=True)
    assert torch.equal(out1, out2) and torch.equal(a1, a2)             # the seed fixes the mask
    kept = a1 != 0
    assert 0.6 < kept.double().mean() < 0.9                              # about 1 - p kept
    torch.testing.assert_close(a1[kept], full[kept] / 0.75)              # the kept ones scaled
    # out is the sum with the dropped attention: the dense reference given the same mask
    drop = torch.zeros(H, n, m, dtype=x.dtype)
    drop[:, mask] = (kept.t() / 0.75).to(x.dtype)
    want, _ = reference(mask, x, s, d, drop=drop)
    torch.testing.assert_close(out1, want)
    G = torch.randn_like(out1)
    for a, b in zip(torch.autograd.grad((out1 * G).sum(), (x, s, d)),
                    torch.autograd.grad((want * G).sum(), (x, s, d))):
        torch.testing.assert_close(a, b)
    torch.manual_seed(10)
    assert not torch.equal(graph_attention(A, x, s, d, dropout=0.25), out1)   # another seed, another mask
    # outside training, or p = 0: no dropout; p = 1: everything dropped
    plain, _ = reference(mask, x, s, d)
    torch.testing.assert_close(graph_attention(A, x, s, d, dropout=0.25, training=False), plain)
    torch.testing.assert_close(graph_attention(A, x, s, d, dropout=0.0), plain)
    assert torch.equal(graph_attention(A, x, s, d, dropout=1.0), torch.zeros_like(plain))


def test_dropout_mask_is_the_same_on_both_routes(monkeypatch):
    mask = attention_mask(20, 20, 0.5, seed=11)
    A = as_adjacency(mask, "sparse_csr")
    x, s, d = operands(20, 20, 2, 3, seed=11)
    outs = []
    for route in (False, True):
        monkeypatch.setattr(_backends, "force_torch_ops", route)
        torch.manual_seed(12)
        outs.append(graph_attention(A, x, s, d, dropout=0.5))
    torch.testing.assert_close(outs[0], outs[1])


@pytest.mark.parametrize("n,m", [(0, 0), (0, 3), (3, 0), (4, 5)])
@BOTH
def test_nnz_zero_and_empty(path, op, n, m):
    A = SparseCSR(torch.zeros(n + 1, dtype=torch.int64), torch.zeros(0, dtype=torch.int64), torch.zeros(0), (n, m))
    ins = op.leaves(torch.zeros(n, m, dtype=torch.bool), 2, 3)
    out, alpha = op.call(A, ins, return_attention=True)
    assert out.shape == (n, 2, 3) and alpha.shape == (0, 2) and not out.any()
    assert not any(g.any() for g in torch.autograd.grad(out.sum(), ins))


@pytest.mark.parametrize("op,edge", [(GAT, False), (GATV2, True)], ids=["gat", "gatv2-edge"])
def test_same_bits_for_any_thread_count(op, edge):
    """Large enough that the kernels split rows (forward, gradient by rows), sources (their
    sums) and, GATv2's, att's columns over threads."""
    mask = attention_mask(600, 500, 0.1, seed=13, hub=op.hub)
    A = as_adjacency(mask, "sparse_csr")
    ins = op.leaves(mask, 4, 16, torch.float32, seed=13, edge=edge)
    results = []
    for t in (1, 2, 5):
        with num_threads(t):
            torch.manual_seed(14)
            out, alpha = op.call(A, ins, dropout=0.3, return_attention=True)
            G = torch.linspace(-1, 1, out.numel()).reshape(out.shape)
            grads = torch.autograd.grad((out * G).sum() + alpha.sum(), ins)
            results.append((out.detach(), alpha.detach(), *grads))
    for r in results[1:]:
        assert all(torch.equal(a, b) for a, b in zip(results[0], r))


@pytest.mark.parametrize("op,edge,read", [(GAT, False, 3), (GATV2, True, 4)], ids=["gat", "gatv2-edge"])
def test_inputs_unchanged_and_edits_after_forward_detected(op, edge, read):
    """The first `read` leaves are the ones the backward reads (not GATv2's edge_score)."""
    mask = attention_mask(5, 6, 0.5, hub=op.hub)
    A = as_adjacency(mask, "sparse_csr")
    ins = op.leaves(mask, 2, 3, edge=edge)
    before = [t.detach().clone() for t in (A.crow_indices, A.col_indices, *ins)]
    op.call(A, ins, dropout=0.5).sum().backward()
    assert all(torch.equal(a, b) for a, b in zip(before, (A.crow_indices, A.col_indices, *ins)))
    for i in range(read):
        used = [t.detach().clone().requires_grad_() * 1 for t in ins[:read]]
        out = op.call(A, used)
        with torch.no_grad():
            used[i].add_(1)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            out.sum().backward()


def test_errors():
    mask = attention_mask(4, 5)
    A = as_adjacency(mask, "csr")
    x, s, d = operands(4, 5, 2, 3)
    with pytest.raises(ValueError, match="2-D sparse COO or CSR"):
        graph_attention(mask.double(), x, s, d)
    with pytest.raises(ValueError, match="2-D sparse COO or CSR"):
        graph_attention(mask.double().to_sparse_csc(), x, s, d)
    with pytest.raises(ValueError, match="2-D adjacency"):
        graph_attention(torch.ones(2, 4, 5).to_sparse(), x, s, d)
    with pytest.raises(ValueError, match="x must be"):
        graph_attention(A, x[:, 0], s, d)
    with pytest.raises(ValueError, match="x must be"):
        graph_attention(A, x[:4], s, d)
    with pytest.raises(ValueError, match="score_src must be"):
        graph_attention(A, x, s[:, :1], d)
    with pytest.raises(ValueError, match="score_src must be"):
        graph_attention(A, x, s, d[:3])
    with pytest.raises(TypeError, match="float32 and float64"):
        graph_attention(A, x.detach().long(), s, d)
    with pytest.raises(TypeError, match="x's dtype"):
        graph_attention(A, x, s.float(), d)
    with pytest.raises(ValueError, match="must be a tensor"):
        graph_attention(A, x, [1.0], d)
    for p in (-0.1, 1.5):
        with pytest.raises(ValueError, match="dropout must be in"):
            graph_attention(A, x, s, d, dropout=p)
    S = as_adjacency(mask, "sparse_csr")
    with pytest.raises(ValueError, match="crow_indices must have shape"):
        graph_attention(S._replace(crow_indices=S.crow_indices[:-1]), x, s, d)


@pytest.mark.parametrize("route", [False, True], ids=["C", "torch_ops"])
@BOTH
def test_malformed_structure_is_a_value_error(op, route, monkeypatch):
    monkeypatch.setattr(_backends, "force_torch_ops", route)
    ins = op.leaves(torch.zeros(2, 3, dtype=torch.bool), 2, 3)
    ptr = torch.tensor([0, 1, 3])
    for col in (torch.tensor([0, 1, 3]), torch.tensor([0, 2, 1]), torch.tensor([0, -1, 1])):
        with pytest.raises(ValueError, match="malformed sparse matrix"):
            op.call(SparseCSR(ptr, col, torch.ones(3), (2, 3)), ins)
    with pytest.raises(ValueError, match="malformed sparse matrix"):
        op.call(SparseCSR(torch.tensor([0, 2, 1]), torch.tensor([0]), torch.ones(1), (2, 3)), ins)


def test_kernels_check_their_arrays():
    from torchsparsegradutils import _C
    mask = attention_mask(4, 5)
    A = as_adjacency(mask, "sparse_csr")
    x, s, d = (t.detach() for t in operands(4, 5, 2, 3))
    nnz = A.col_indices.shape[0]
    pat = (A.crow_indices, A.col_indices, 4, 5)
    alpha, out = torch.empty(nnz, 2, dtype=x.dtype), torch.empty(4, 2, 3, dtype=x.dtype)
    with pytest.raises(ValueError, match="alpha must have shape"):
        _C.gat_forward(*pat, x, s, d, None, 0, 0, 1.0, 0.2, alpha[:-1], out, 1)
    with pytest.raises(ValueError, match="s must have shape"):
        _C.gat_forward(*pat, x, s[:-1], d, None, 0, 0, 1.0, 0.2, alpha, out, 1)
    with pytest.raises(TypeError, match="dtype of x"):
        _C.gat_forward(*pat, x, s.float(), d, None, 0, 0, 1.0, 0.2, alpha, out, 1)
    with pytest.raises(ValueError, match="drop must be in"):
        _C.gat_forward(*pat, x, s, d, None, 0, 2**24 + 1, 1.0, 0.2, alpha, out, 1)
    with pytest.raises(ValueError, match="contiguous"):
        _C.gat_forward(*pat, x.transpose(1, 2).contiguous().transpose(1, 2), s, d, None, 0, 0, 1.0, 0.2, alpha, out, 1)
    _C.gat_forward(*pat, x, s, d, None, 0, 0, 1.0, 0.2, alpha, out, 1)
    G, dz, gd = torch.randn_like(out), torch.empty_like(alpha), torch.empty_like(d)
    with pytest.raises(ValueError, match="grad must have shape"):
        _C.gat_grad_scores(*pat, x, s, d, None, 0, 0, 1.0, 0.2, alpha, G[:-1], None, dz, gd, 1)
    with pytest.raises(ValueError, match="grad_alpha must have shape"):
        _C.gat_grad_scores(*pat, x, s, d, None, 0, 0, 1.0, 0.2, alpha, G, alpha[:-1], dz, gd, 1)
    with pytest.raises(ValueError, match="e must have shape"):
        _C.gat_forward(*pat, x, s, d, alpha[:-1], 0, 0, 1.0, 0.2, alpha, out, 1)
    with pytest.raises(TypeError, match="dtype of x"):
        _C.gat_grad_scores(*pat, x, s, d, alpha.float(), 0, 0, 1.0, 0.2, alpha, G, None, dz, gd, 1)
    with pytest.raises(ValueError, match="grad_x must have shape"):
        _C.gat_grad_src(*pat, x, 0, 0, 1.0, alpha, G, dz, torch.empty(5, 2, 2, dtype=x.dtype), torch.empty_like(s), 1)


def test_dropout_draw_is_the_kernels():
    """The torch-ops draw (what CUDA and return_attention use) drops exactly the (entry,
    head) pairs the C kernels drop, for seeds of either sign."""
    from torchsparsegradutils._backends import torch_ops
    mask = torch.ones(3, 50, dtype=torch.bool)
    A = as_adjacency(mask, "sparse_csr")
    x = torch.ones(50, 4, 1, dtype=torch.float64)
    s, d = torch.zeros(50, 4, dtype=torch.float64), torch.zeros(3, 4, dtype=torch.float64)
    view = CSRView(A.crow_indices, A.col_indices, None, 1, 3, 50, torch.Size((3, 50)))
    for seed in (torch.tensor([12345]), torch.tensor([-2**63]), torch.tensor([2**63 - 1])):
        _, alpha = _backends.cpu.gat(view, x, s, d, None, None, 0, 1.0, 0.2)
        G = torch.ones(3, 4, 1, dtype=torch.float64)
        # the gradient of x's rows through the attention: alpha * scale where kept, 0 where dropped
        gx, _, _, _ = _backends.cpu.gat_grad(view, x, s, d, None, seed, 2**23, 2.0, 0.2, alpha, G, None)
        dropped = torch_ops.gat_dropped(seed, 150, 4, 2**23).reshape(3, 50, 4)
        want = torch.where(dropped, 0.0, alpha.reshape(3, 50, 4) * 2.0).sum(0)
        torch.testing.assert_close(gx[..., 0], want)
        assert 0.4 < dropped.double().mean() < 0.6


@pytest.mark.parametrize("op,edge", [(GAT, False), (GAT, True), (GATV2, True)], ids=["gat", "gat-edge", "gatv2-edge"])
def test_compiled_sparse_csr_matches_eager(op, edge):
    mask = attention_mask(6, 6, 0.5, seed=15, hub=op.hub)
    A = as_adjacency(mask, "sparse_csr")
    ins = op.leaves(mask, 2, 3, torch.float32, seed=15, edge=edge)

    def model(*ins):
        out, alpha = op.call(A, [ins[0] * 2, *ins[1:]], negative_slope=0.1, return_attention=True)
        return out.sum(1) + alpha.sum()

    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    outs = []
    for fn in (compiled, model):
        y = fn(*ins)
        outs.append((y.detach(), *torch.autograd.grad(y.square().sum(), ins)))
    for a, b in zip(*outs):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("op,name", [(GAT, "gat"), (GATV2, "gatv2")], ids=["gat", "gatv2"])
def test_custom_op_opcheck(op, name):
    """tsgu::<name> and tsgu::<name>_grad, without and with the edge leaves (the gradient
    op takes the first: edge_score's gradient, GATv2's, is the scores')."""
    mask = attention_mask(5, 6, 0.5, seed=16, hub=op.hub)
    A = as_adjacency(mask, "sparse_csr")
    ins = op.leaves(mask, 2, 3, seed=16, edge=True)
    forward, grad = getattr(torch.ops.tsgu, name), getattr(torch.ops.tsgu, name + "_grad")
    for edge in ([None] * len(ins[3:]), ins[3:]):
        args = (A.crow_indices, A.col_indices, [5, 6], *ins[:3], *edge)
        for seed, drop, scale in ((None, 0, 1.0), (torch.tensor([7]), 2**22, 1.5)):
            torch.library.opcheck(forward.default, (*args, seed, drop, scale, 0.2))
            out, alpha = forward(*args, seed, drop, scale, 0.2)
            plain = (A.crow_indices, A.col_indices, [5, 6], *(t.detach() for t in ins[:3]),
                     None if edge[0] is None else edge[0].detach(), seed, drop, scale, 0.2,
                     alpha.detach(), torch.randn_like(out))    # differentiable once: the grad op has no autograd
            for galpha in (None, torch.randn_like(alpha)):
                torch.library.opcheck(grad.default, (*plain, galpha))


# ---------------------------------------------------------------- edge_score
def hub_pattern(n, m, seed):
    return hub_mask(n, m, torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("layout", ["sparse_csr", "coo"])
@pytest.mark.parametrize("H,F", [(1, 3), (4, 2)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_edge_score_matches_dense_reference(path, layout, H, F, dtype):
    mask = hub_pattern(9, 40, seed=21)
    A = as_adjacency(mask, layout)
    x, s, d = operands(9, 40, H, F, dtype, seed=21)
    e = torch.randn(int(mask.sum()), H, dtype=dtype, generator=seeded("gat edge", H)).requires_grad_()
    out, alpha = graph_attention(A, x, s, d, 0.15, return_attention=True, edge_score=e)
    want, walpha = reference(mask, x, s, d, 0.15, edge=e)
    torch.testing.assert_close(out, want, **TOL[dtype])
    torch.testing.assert_close(alpha, at_pattern(walpha, mask), **TOL[dtype])
    assert not out[0].any()                                              # the empty row
    G = torch.randn(out.shape, dtype=dtype, generator=seeded("gat edge G"))
    Ga = torch.randn(alpha.shape, dtype=dtype, generator=seeded("gat edge Ga"))
    got = torch.autograd.grad((out * G).sum() + (alpha * Ga).sum(), (x, s, d, e))
    exp = torch.autograd.grad((want * G).sum() + (at_pattern(walpha, mask) * Ga).sum(), (x, s, d, e))
    for a, b in zip(got, exp):
        torch.testing.assert_close(a, b, **TOL[dtype])
    # an edge_score of zeros is no edge_score
    torch.testing.assert_close(graph_attention(A, x, s, d, 0.15, edge_score=torch.zeros_like(e)),
                               graph_attention(A, x, s, d, 0.15))


@pytest.mark.parametrize("H", [1, 3])
def test_edge_score_gradcheck(path, H):
    mask = hub_pattern(5, 7, seed=22)
    A = as_adjacency(mask, "sparse_csr")
    x, s, d = operands(5, 7, H, 2, seed=22)
    e = torch.randn(int(mask.sum()), H, dtype=torch.float64, generator=seeded("gat gradcheck e")).requires_grad_()
    assert torch.autograd.gradcheck(lambda x, s, d, e: graph_attention(A, x, s, d, 0.3, edge_score=e), (x, s, d, e))
    assert torch.autograd.gradcheck(
        lambda x, s, d, e: graph_attention(A, x, s, d, 0.3, return_attention=True, edge_score=e)[1], (x, s, d, e))

    def dropped(x, s, d, e):
        torch.manual_seed(7)
        return graph_attention(A, x, s, d, 0.3, dropout=0.4, edge_score=e)
    assert torch.autograd.gradcheck(dropped, (x, s, d, e))


def test_edge_score_errors():
    mask = attention_mask(4, 5)
    A = as_adjacency(mask, "csr")
    x, s, d = operands(4, 5, 2, 3)
    nnz = int(mask.sum())
    with pytest.raises(ValueError, match="edge_score must be \\(nnz, heads\\)"):
        graph_attention(A, x, s, d, edge_score=torch.zeros(nnz + 1, 2, dtype=x.dtype))
    with pytest.raises(ValueError, match="edge_score must be \\(nnz, heads\\)"):
        graph_attention(A, x, s, d, edge_score=torch.zeros(nnz, 1, dtype=x.dtype))
    with pytest.raises(ValueError, match="edge_score must be \\(nnz, heads\\)"):
        graph_attention(A, x, s, d, edge_score=torch.zeros(nnz, dtype=x.dtype))
    with pytest.raises(TypeError, match="edge_score must have x's dtype"):
        graph_attention(A, x, s, d, edge_score=torch.zeros(nnz, 2))
    with pytest.raises(ValueError, match="edge_score must be a tensor"):
        graph_attention(A, x, s, d, edge_score=[0.0])
