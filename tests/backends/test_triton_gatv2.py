"""The Triton kernels of GATv2 attention (graph_attention_v2, GATv2Conv), forced on CPU
tensors under Triton's interpreter, against the C route: outputs, attention weights and
the gradients w.r.t. x_src, x_dst, att, edge_term and edge_score (through out and
alpha), one head and several, with an empty row, a hub row and a hub source longer than
a block of entries; x_dst the same tensor as x_src; dropout with the same mask for the
same seed (the GAT kernels' counter hash); large scores (GATv2Conv's training step with
edge features and repeated edges: test_triton_gat.py's, beside GATConv's).  Skipped
without triton; `pytest -k triton`."""
import pytest
import torch
from support.gat import hub_mask
from support.operands import seeded
from support.routes import assert_routes_agree, both_routes

import torchsparsegradutils as tsgu

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

TOL = {torch.float32: dict(rtol=1e-4, atol=1e-5), torch.float64: dict(rtol=1e-11, atol=1e-12)}


def _case(n, m, H, C, dtype, gen, spread=1.0):
    """Adjacency (n, m) CSR of hub_mask; x_src, x_dst, att."""
    A = hub_mask(n, m, gen).to(dtype).to_sparse_csr()
    xl = torch.randn(m, H, C, generator=gen, dtype=dtype) * spread
    xr = torch.randn(n, H, C, generator=gen, dtype=dtype) * spread
    att = torch.randn(H, C, generator=gen, dtype=dtype)
    return A, xl, xr, att


def _run(route, A, xl, xr, att, dropout=0.0, et=None, b=None, same=False):
    def fn(xl, xr, att, et=None, b=None):
        torch.manual_seed(11)             # the dropout seed, drawn from PyTorch's generator
        return tsgu.graph_attention_v2(A, xl, xl if same else xr, att, dropout=dropout, return_attention=True,
                                       edge_term=et, edge_score=b)
    inputs = [t.requires_grad_() for t in (xl, xr, att)]
    inputs += [t.requires_grad_() for t in (et, b) if t is not None]
    if et is None and b is not None:
        return both_routes(route, lambda xl, xr, att, b: fn(xl, xr, att, None, b), inputs)
    return both_routes(route, fn, inputs)


@pytest.mark.parametrize("dtype,H,C,dropout", [(torch.float64, 3, 5, 0.0), (torch.float64, 3, 5, 0.4),
                                               (torch.float32, 1, 4, 0.0), (torch.float32, 4, 8, 0.25)])
@pytest.mark.parametrize("edge", [False, True], ids=["plain", "edge"])
def test_triton_gatv2_matches_c(triton_route, dtype, H, C, dropout, edge):
    gen = seeded("triton_gatv2", str(dtype), H, C, dropout, edge)
    A, xl, xr, att = _case(20, 40, H, C, dtype, gen)
    et = torch.randn(A._nnz(), H, C, generator=gen, dtype=dtype) if edge else None
    b = torch.randn(A._nnz(), H, generator=gen, dtype=dtype) if edge else None
    c, t = _run(triton_route, A, xl, xr, att, dropout, et, b)
    assert len(t) == (7 if edge else 5)        # out, alpha and the gradients
    assert_routes_agree((c, t), **TOL[dtype])


def test_triton_gatv2_one_tensor_for_both_ends(triton_route):
    gen = seeded("triton_gatv2_same")
    A, xl, _, att = _case(16, 16, 2, 3, torch.float64, gen)
    c, t = _run(triton_route, A, xl, xl, att, same=True)
    assert_routes_agree((c, t), **TOL[torch.float64])


def test_triton_gatv2_dropout_mask_is_the_c_kernels(triton_route):
    gen = seeded("triton_gatv2_mask")
    A, xl, xr, att = _case(12, 16, 4, 2, torch.float64, gen)
    c, t = _run(triton_route, A, xl, xr, att, dropout=0.5)
    assert torch.equal(c[1] == 0, t[1] == 0) and 0 < int((t[1] == 0).sum()) < t[1].numel()


def test_triton_gatv2_large_scores(triton_route):
    """Scores of a few hundred: the online softmax's shifts keep every weight finite."""
    gen = seeded("triton_gatv2_large")
    c, t = _run(triton_route, *_case(10, 40, 2, 3, torch.float64, gen, spread=100.0))
    assert all(bool(v.isfinite().all()) for v in t)
    assert_routes_agree((c, t), rtol=1e-10, atol=1e-10)

