"""Tests of graph_attention_v2: against a dense PyTorch reference (per head, the masked
softmax over each row of sum_c att LeakyReLU(x_src[j] + x_dst[i] + edge_term), absent
entries -inf, with autograd) for the output, the attention and every gradient (x_src as
source of scores and as message, x_dst, att, edge_term, edge_score); gradcheck in
float64; x_dst the same tensor as x_src; dropout (the GAT kernels' mask for a seed);
empty and hub rows; errors; the C entry points' checks.  Every test of results runs on
both CPU routes: the C kernels and the PyTorch-ops fallback (forced).  nnz = 0, the same
bits for 1/2/5 threads, in-place edits after the forward, malformed structure,
torch.compile(fullgraph=True) of a SparseCSR and the custom op's opcheck are
test_graph_attention.py's, parametrized over both ops."""
import pytest
import torch
from support.gat import as_adjacency, attention_mask, gatv2_leaves
from support.references import dense_graph_attention_v2

from torchsparsegradutils import graph_attention, graph_attention_v2

TOL = {torch.float32: dict(atol=1e-5, rtol=1e-4), torch.float64: dict(atol=1e-12, rtol=1e-10)}


def pattern(n, m, density=0.4, seed=0):
    """attention_mask's, row 0 a hub (every source)."""
    return attention_mask(n, m, density, seed, hub=True)


def operands(mask, H, C, dtype=torch.float64, seed=0, edge=False):
    """(x_src, x_dst, att, edge_term or None, edge_score or None), leaves that require grad."""
    ts = gatv2_leaves(mask, H, C, dtype, seed, edge)
    return ts if edge else ts + [None, None]


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
