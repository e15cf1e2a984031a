"""The Triton kernels of fused graph attention (graph_attention, GATConv), forced on CPU
tensors under Triton's interpreter, against the C route: outputs, attention weights and
the gradients w.r.t. x, score_src and score_dst (through out and alpha), one head and
several, with an empty row, a hub row and a hub source longer than a block of entries;
dropout with the same mask for the same seed (the C kernels' counter hash); large
scores; an additive edge_score per entry (and its gradient); a GATConv training step;
GATConv and GATv2Conv with edge features and repeated edges.  Skipped without triton;
`pytest -k triton`."""
import pytest
import torch
from support.gat import hub_mask, repeated_graph
from support.operands import seeded
from support.routes import assert_routes_agree, both_routes, layer_on_both_routes

import torchsparsegradutils as tsgu
from torchsparsegradutils import _backends
from torchsparsegradutils.nn import GATConv, GATv2Conv

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

TOL = {torch.float32: dict(rtol=1e-5, atol=1e-6), torch.float64: dict(rtol=1e-12, atol=1e-12)}


def _case(n, m, H, F, dtype, gen, spread=1.0):
    """Adjacency (n, m) CSR of hub_mask; x, s, d."""
    A = hub_mask(n, m, gen).to(dtype).to_sparse_csr()
    x = torch.randn(m, H, F, generator=gen, dtype=dtype)
    s = torch.randn(m, H, generator=gen, dtype=dtype) * spread
    d = torch.randn(n, H, generator=gen, dtype=dtype) * spread
    return A, x, s, d


def _run(route, A, x, s, d, dropout=0.0, e=None):
    def fn(x, s, d, e=None):
        torch.manual_seed(11)             # the dropout seed, drawn from PyTorch's generator
        return tsgu.graph_attention(A, x, s, d, dropout=dropout, return_attention=True, edge_score=e)
    inputs = [x.requires_grad_(), s.requires_grad_(), d.requires_grad_()]
    return both_routes(route, fn, inputs if e is None else inputs + [e.requires_grad_()])


@pytest.mark.parametrize("dtype,H,F,dropout", [(torch.float64, 3, 5, 0.0), (torch.float64, 3, 5, 0.4),
                                               (torch.float32, 1, 4, 0.0), (torch.float32, 8, 8, 0.25)])
def test_triton_gat_matches_c(triton_route, dtype, H, F, dropout):
    gen = seeded("triton_gat", str(dtype), H, F, dropout)
    c, t = _run(triton_route, *_case(20, 24, H, F, dtype, gen), dropout=dropout)
    assert_routes_agree((c, t), **TOL[dtype])


@pytest.mark.parametrize("dtype,H,F,dropout", [(torch.float64, 3, 5, 0.0), (torch.float64, 2, 3, 0.4),
                                               (torch.float32, 8, 8, 0.25)])
def test_triton_gat_edge_score_matches_c(triton_route, dtype, H, F, dropout):
    """With an edge_score (nnz, H): outputs and the gradients of x, s, d and edge_score,
    on a hub row longer than a block, an empty row and a hub source."""
    gen = seeded("triton_gat_edge", str(dtype), H, F, dropout)
    A, x, s, d = _case(20, 40, H, F, dtype, gen)
    e = torch.randn(A._nnz(), H, generator=gen, dtype=dtype) * 2
    c, t = _run(triton_route, A, x, s, d, dropout=dropout, e=e)
    assert len(t) == 6                     # out, alpha, and the 4 gradients
    assert_routes_agree((c, t), **TOL[dtype])


def test_triton_gat_dropout_mask_is_the_c_kernels(triton_route):
    """The same seed drops the same (entry, head) pairs on both routes, and the draw
    agrees with _backends.gat_dropped (the torch-ops route's)."""
    gen = seeded("triton_gat_mask")
    A, x, s, d = _case(12, 16, 4, 2, torch.float64, gen)
    c, t = _run(triton_route, A, x, s, d, dropout=0.5)
    alpha_c, alpha_t = c[1], t[1]
    assert torch.equal(alpha_c == 0, alpha_t == 0) and 0 < int((alpha_t == 0).sum()) < alpha_t.numel()
    torch.manual_seed(11)
    seed = torch.randint(-2**63, 2**63 - 1, (1,), dtype=torch.int64)
    assert torch.equal(alpha_t == 0, _backends.gat_dropped(seed, *alpha_t.shape, round(0.5 * 2**24)))


def test_triton_gat_large_scores(triton_route):
    """Scores of a few hundred: the softmax's shift keeps every weight finite."""
    gen = seeded("triton_gat_large")
    c, t = _run(triton_route, *_case(10, 20, 2, 3, torch.float64, gen, spread=300.0))
    assert all(bool(v.isfinite().all()) for v in t)
    assert_routes_agree((c, t), rtol=1e-10, atol=1e-10)


def test_triton_gatconv_step(triton_route):
    """A GATConv layer's output and its parameters' gradients, on both routes."""
    gen = seeded("triton_gatconv")
    A, _, _, _ = _case(16, 16, 1, 1, torch.float64, gen)
    feats = torch.randn(16, 6, generator=gen, dtype=torch.float64)
    results = layer_on_both_routes(triton_route, lambda: GATConv(6, 4, heads=2, dropout=0.3).double(), feats, A)
    assert_routes_agree(results, **TOL[torch.float64])


@pytest.mark.parametrize("conv,kw,rtol", [(GATConv, {}, 1e-12), (GATv2Conv, {"dropout": 0.2}, 1e-11)],
                         ids=["GATConv", "GATv2Conv"])
def test_triton_gatconv_edge_features_and_repeats(triton_route, conv, kw, rtol):
    """A layer with edge features, repeated edges (their copies folded into the edge score)
    and self loops: the output and every parameter's gradient on both routes."""
    ei, feats, ea = repeated_graph(seeded("triton_gatconv_edges", conv.__name__))
    results = layer_on_both_routes(triton_route,
                                   lambda: conv(5, 4, heads=3, edge_dim=3, residual=True, **kw).double(), feats, ei, ea)
    assert_routes_agree(results, rtol=rtol, atol=1e-12)
