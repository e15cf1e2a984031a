"""Tests of nn.GATConv: against PyTorch Geometric's GATConv with the same weights (its
state_dict loaded as it is; outputs, attention weights and every gradient; 1 and 8 heads,
concat or mean, with and without self loops), dropout under a seed and off in eval mode,
repeated edges, the cached pattern, a SparseCSR or torch sparse adjacency, sparse
features, errors and torch.compile(fullgraph=True) on a SparseCSR."""
import pytest
import torch
from conftest import assert_compiles_like_eager, assert_layer_matches, dense_gat_conv, seeded

from torchsparsegradutils.nn import GATConv, gat_adjacency

# 7 nodes: a self loop (3 -> 3), node 6 has no in-edges, node 5 no out-edges
EDGES = torch.tensor([[0, 1, 2, 3, 4, 0, 2, 3, 1, 4, 0],
                      [1, 2, 3, 3, 0, 4, 0, 1, 5, 5, 2]])


def _grads(out, inputs, G):
    return torch.autograd.grad(out, inputs, G)


def _pair(i, o, seed=0, **kw):
    gnn = pytest.importorskip("torch_geometric.nn")
    torch.manual_seed(seed)
    theirs = gnn.GATConv(i, o, **kw).double()
    ours = GATConv(i, o, **kw).double()
    ours.load_state_dict(theirs.state_dict())
    with torch.no_grad():                        # PyG starts the bias at zero: make it count
        theirs.bias.normal_()
        ours.bias.copy_(theirs.bias)
    return ours, theirs


@pytest.mark.parametrize("heads", [1, 8])
@pytest.mark.parametrize("concat", [True, False])
@pytest.mark.parametrize("loops", [True, False])
def test_matches_pyg(heads, concat, loops):
    ours, theirs = _pair(5, 3, heads=heads, concat=concat, add_self_loops=loops, negative_slope=0.3)
    x = torch.randn(7, 5, dtype=torch.float64, generator=seeded("gat pyg", heads), requires_grad=True)
    assert_layer_matches(ours, theirs, x, EDGES)
    torch.testing.assert_close(ours(x, EDGES), dense_gat_conv(x, EDGES, ours.lin.weight, ours.att_src, ours.att_dst, ours.bias,
                                                 concat, loops, 0.3))


def test_attention_weights_match_pyg():
    ours, theirs = _pair(5, 3, heads=4)
    x = torch.randn(7, 5, dtype=torch.float64, generator=seeded("gat alpha"))
    out_t, (ei_t, alpha_t) = theirs(x, EDGES, return_attention_weights=True)
    out_o, (ei_o, alpha_o) = ours(x, EDGES, return_attention_weights=True)
    torch.testing.assert_close(out_o, out_t)
    key = lambda ei: ei[1] * 7 + ei[0]           # noqa: E731  (target, source) order
    assert torch.equal(key(ei_o).sort().values, key(ei_t).sort().values)
    torch.testing.assert_close(alpha_o[key(ei_o).argsort()], alpha_t[key(ei_t).argsort()])
    # alpha is differentiable: its gradient reaches the parameters as PyG's does
    Ga = torch.randn_like(alpha_t)
    g_o = _grads((alpha_o[key(ei_o).argsort()] * Ga).sum(), [ours.att_src, ours.att_dst, ours.lin.weight], None)
    g_t = _grads((alpha_t[key(ei_t).argsort()] * Ga).sum(), [theirs.att_src, theirs.att_dst, theirs.lin.weight], None)
    for g, r in zip(g_o, g_t):
        torch.testing.assert_close(g, r)


def test_dropout_follows_the_seed_and_stops_in_eval():
    ours, theirs = _pair(5, 4, heads=2, dropout=0.5)
    x = torch.randn(7, 5, dtype=torch.float64, generator=seeded("gat dropout"))
    ours.train()
    torch.manual_seed(3)
    a = ours(x, EDGES)
    torch.manual_seed(3)
    assert torch.equal(ours(x, EDGES), a)
    torch.manual_seed(4)
    assert not torch.equal(ours(x, EDGES), a)
    ours.eval(), theirs.eval()
    torch.testing.assert_close(ours(x, EDGES), theirs(x, EDGES))


def test_repeated_edges_are_attended_once():
    """Unlike PyG (which gives a repeated edge its share twice), the pattern holds it once:
    the result is PyG's on the edge_index without repeats."""
    ours, theirs = _pair(5, 3, heads=2)
    x = torch.randn(7, 5, dtype=torch.float64, generator=seeded("gat repeats"))
    repeated = torch.cat([EDGES, EDGES[:, :4]], 1)
    torch.testing.assert_close(ours(x, repeated), theirs(x, EDGES))


def test_sparse_adjacency_and_cache():
    torch.manual_seed(0)
    conv = GATConv(5, 3, heads=2).double()
    x = torch.randn(7, 5, dtype=torch.float64, generator=seeded("gat adjacency"))
    want = conv(x, EDGES)
    S = conv._cache[2]
    conv(x, EDGES.clone())
    assert conv._cache[2] is S                            # same contents: the cached pattern
    S2 = gat_adjacency(EDGES, 7)
    assert torch.equal(S2.crow_indices, S.crow_indices) and torch.equal(S2.col_indices, S.col_indices)
    torch.testing.assert_close(conv(x, S2), want)
    torch.testing.assert_close(conv(x, S2.to_torch()), want)                  # a torch CSR tensor
    torch.testing.assert_close(conv(x, S2.to_torch().to_sparse_coo()), want)  # and a COO one
    edited = EDGES.clone()
    edited[0, 0] = 6
    conv(x, edited)
    assert conv._cache[2] is not S                        # other contents: built again


def test_gat_adjacency_self_loops():
    S = gat_adjacency(torch.tensor([[0, 1, 1], [1, 1, 0]]), 3)
    dense = torch.zeros(3, 3, dtype=torch.bool)
    rows = torch.repeat_interleave(torch.arange(3), S.crow_indices.diff())
    dense[rows, S.col_indices] = True
    assert torch.equal(dense, torch.tensor([[True, True, False], [True, True, False], [False, False, True]]))
    S = gat_adjacency(torch.tensor([[0, 1, 1], [1, 1, 0]]), 3, add_self_loops=False)
    assert S.crow_indices.tolist() == [0, 1, 3, 3] and S.col_indices.tolist() == [1, 0, 1]


def test_state_dict_keys_and_double():
    conv = GATConv(4, 3, heads=2, concat=False)
    assert sorted(conv.state_dict()) == ["att_dst", "att_src", "bias", "lin.weight"]
    assert conv.bias.shape == (3,) and conv.att_src.shape == (1, 2, 3) and conv.lin.weight.shape == (6, 4)
    assert GATConv(4, 3, heads=2, bias=False).bias is None
    x = torch.randn(7, 4, dtype=torch.float64)
    assert conv.double()(x, EDGES).dtype == torch.float64


def test_errors():
    conv = GATConv(4, 3)
    with pytest.raises(ValueError, match="edge_index must have shape"):
        conv(torch.randn(7, 4), EDGES[0])
    with pytest.raises(TypeError, match="integer node ids"):
        conv(torch.randn(7, 4), EDGES.double())
    with pytest.raises(ValueError, match="out of range|malformed"):
        conv(torch.randn(3, 4), EDGES)
    with pytest.raises(ValueError, match="2-D"):
        conv(torch.randn(7), EDGES)
    with pytest.raises(ValueError, match="in_channels must be an int"):
        GATConv((4, 3), 2)
    with pytest.raises(ValueError, match="dropout must be in"):
        GATConv(4, 3, dropout=1.5)


class _GATModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = GATConv(6, 4, heads=3), GATConv(12, 2, heads=2, concat=False)

    def forward(self, x, A):
        return self.conv2(torch.nn.functional.elu(self.conv1(x, A)), A)


def test_fullgraph_compile_on_a_sparse_csr():
    """fullgraph=True (no graph break) on a SparseCSR adjacency: outputs and parameter
    gradients as eager."""
    gen = seeded("gat compile")
    n = 40
    A = gat_adjacency(torch.randint(0, n, (2, 160), generator=gen), n)
    torch.manual_seed(0)
    assert_compiles_like_eager(_GATModel(), torch.randn(n, 6, generator=gen), A)
