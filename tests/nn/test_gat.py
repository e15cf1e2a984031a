"""Tests of nn.GATConv: against PyTorch Geometric's GATConv with the same weights (its
state_dict loaded as it is, and ours into PyG's; outputs, attention weights and every
gradient in float64; 1 and 8 heads, concat or mean, with and without self loops; repeated
edges counted per occurrence; edge features with every fill_value, repeated edges with
different features; bipartite inputs with and without x_target, size; residual), dropout
under a seed and off in eval mode, the cached pattern, a SparseCSR or torch sparse
adjacency (self loops added as PyG, attention weights as a sparse tensor), sparse
features, errors and torch.compile(fullgraph=True) on a SparseCSR.  The tests whose body
is the same for nn.GATv2Conv (edge features, isolated nodes, dropout, sparse adjacency,
state_dict, the common errors) run here for both layers."""
import pytest
import torch
from support.checks import assert_compiles_like_eager, assert_layer_matches
from support.gat import BIP_EDGES, EDGES, REPEATED, assert_same_as_pyg, features, pyg_pair
from support.operands import seeded
from support.references import dense_gat_conv

from torchsparsegradutils import SparseCSR
from torchsparsegradutils.nn import GATConv, GATv2Conv, gat_adjacency

CONVS = pytest.mark.parametrize("conv", [GATConv, GATv2Conv], ids=lambda c: c.__name__)


def _grads(out, inputs, G):
    return torch.autograd.grad(out, inputs, G)


@pytest.mark.parametrize("heads", [1, 8])
@pytest.mark.parametrize("concat", [True, False])
@pytest.mark.parametrize("loops", [True, False])
def test_matches_pyg(heads, concat, loops):
    ours, theirs = pyg_pair(GATConv, 5, 3, heads=heads, concat=concat, add_self_loops=loops, negative_slope=0.3)
    x = torch.randn(7, 5, dtype=torch.float64, generator=seeded("gat pyg", heads), requires_grad=True)
    assert_layer_matches(ours, theirs, x, EDGES)
    torch.testing.assert_close(ours(x, EDGES), dense_gat_conv(x, EDGES, ours.lin.weight, ours.att_src, ours.att_dst, ours.bias,
                                                 concat, loops, 0.3))


def test_attention_weights_match_pyg():
    ours, theirs = pyg_pair(GATConv, 5, 3, heads=4)
    x = torch.randn(7, 5, dtype=torch.float64, generator=seeded("gat alpha"))
    out_t, (ei_t, alpha_t) = theirs(x, EDGES, return_attention_weights=True)
    out_o, (ei_o, alpha_o) = ours(x, EDGES, return_attention_weights=True)
    torch.testing.assert_close(out_o, out_t)
    key = lambda ei: ei[1] * 7 + ei[0]
    assert torch.equal(key(ei_o).sort().values, key(ei_t).sort().values)
    torch.testing.assert_close(alpha_o[key(ei_o).argsort()], alpha_t[key(ei_t).argsort()])
    # alpha is differentiable: its gradient reaches the parameters as PyG's does
    Ga = torch.randn_like(alpha_t)
    g_o = _grads((alpha_o[key(ei_o).argsort()] * Ga).sum(), [ours.att_src, ours.att_dst, ours.lin.weight], None)
    g_t = _grads((alpha_t[key(ei_t).argsort()] * Ga).sum(), [theirs.att_src, theirs.att_dst, theirs.lin.weight], None)
    for g, r in zip(g_o, g_t):
        torch.testing.assert_close(g, r)


@CONVS
def test_dropout_follows_the_seed_and_stops_in_eval(conv):
    ours, theirs = pyg_pair(conv, 5, 4, heads=2, dropout=0.5)
    x = features(conv.__name__, 7, 5, "dropout").detach()
    torch.manual_seed(3)
    a = ours(x, EDGES)
    torch.manual_seed(3)
    assert torch.equal(ours(x, EDGES), a)
    torch.manual_seed(4)
    assert not torch.equal(ours(x, EDGES), a)
    ours.eval(), theirs.eval()
    torch.testing.assert_close(ours(x, EDGES), theirs(x, EDGES))


@pytest.mark.parametrize("loops", [True, False])
@pytest.mark.parametrize("heads", [1, 3])
def test_repeated_edges_count_per_occurrence_as_pyg(loops, heads):
    """A repeated edge is one entry of our pattern, its copies' share folded into its score:
    PyG's softmax (each copy its share), output, weights per copy and every gradient."""
    ours, theirs = pyg_pair(GATConv, 5, 3, heads=heads, add_self_loops=loops, negative_slope=0.3)
    assert_same_as_pyg(ours, theirs, features("gat x", 7, 5, "repeats", loops, heads), REPEATED)
    x = features("gat x", 7, 5, "r")
    torch.testing.assert_close(ours(x, REPEATED), dense_gat_conv(x, REPEATED, ours.lin.weight, ours.att_src,
                                                                 ours.att_dst, ours.bias, True, loops, 0.3))


@pytest.mark.parametrize("fill_value", ["mean", "add", "min", "max", "mul", 0.5, "tensor"])
@CONVS
def test_edge_features_match_pyg(conv, fill_value):
    """edge_dim with every fill_value of the self loops; repeated edges with different
    features (their copies' shares differ); a self loop given with features (dropped)."""
    fill = torch.tensor([0.3, -1.0, 2.0]) if fill_value == "tensor" else fill_value
    ours, theirs = pyg_pair(conv, 5, 4, heads=2, edge_dim=3, fill_value=fill, negative_slope=0.1)
    ea = torch.randn(REPEATED.shape[1], 3, dtype=torch.float64, generator=seeded(conv.__name__, "ea", fill_value))
    assert_same_as_pyg(ours, theirs, features(conv.__name__, 7, 5, "ea", fill_value), REPEATED,
                       ea.requires_grad_())


@pytest.mark.parametrize("loops", [True, False])
def test_edge_features_one_dim_no_loops_and_mean(loops):
    """A 1-D edge_attr (edge_dim=1, PyG's edge weights), concat=False, residual."""
    ours, theirs = pyg_pair(GATConv, 5, 3, heads=3, edge_dim=1, concat=False, add_self_loops=loops, residual=True)
    w = torch.rand(REPEATED.shape[1], dtype=torch.float64, generator=seeded("gat ew")).requires_grad_()
    assert_same_as_pyg(ours, theirs, features("gat x", 7, 5, "ew", loops), REPEATED, w)
    # edge_attr without edge_dim is ignored, as PyG
    plain, _ = pyg_pair(GATConv, 5, 3, heads=3, concat=False, add_self_loops=loops, residual=True)
    x = features("gat x", 7, 5, "i")
    torch.testing.assert_close(plain(x, REPEATED, w), plain(x, REPEATED))


@pytest.mark.parametrize("residual", [False, True])
def test_residual_matches_pyg(residual):
    ours, theirs = pyg_pair(GATConv, 5, 3, heads=2, residual=residual)
    assert_same_as_pyg(ours, theirs, features("gat x", 7, 5, "res"), EDGES)
    ours, theirs = pyg_pair(GATConv, 5, 3, heads=2, residual=residual, concat=False, bias=False)
    assert_same_as_pyg(ours, theirs, features("gat x", 7, 5, "res2"), EDGES)


@pytest.mark.parametrize("shared", [False, True], ids=["pair_channels", "int_channels"])
@pytest.mark.parametrize("residual", [False, True])
def test_bipartite_matches_pyg(shared, residual):
    """in_channels (source, target) with lin_src/lin_dst, or one lin for both; x_target
    given or None (then size); with edge features; the self loops i < min(n_src, n_dst)."""
    channels = 5 if shared else (5, 4)
    ours, theirs = pyg_pair(GATConv, channels, 3, heads=2, residual=residual, edge_dim=2)
    x_src, x_dst = features("gat x", 7, 5, "bip src"), features("gat x", 4, 5 if shared else 4, "bip dst")
    ea = torch.randn(BIP_EDGES.shape[1], 2, dtype=torch.float64, generator=seeded("bip ea")).requires_grad_()
    assert_same_as_pyg(ours, theirs, (x_src, x_dst), BIP_EDGES, ea)
    assert_same_as_pyg(ours, theirs, (x_src, x_dst), BIP_EDGES, ea, size=(7, 4))
    assert_same_as_pyg(ours, theirs, (x_src, None), BIP_EDGES, ea, size=(7, 4))
    assert_same_as_pyg(ours, theirs, (x_src, None), BIP_EDGES, None, size=(7, 5))
    if not shared:                           # a bipartite layer on one x: lin_src and lin_dst on it
        ours, theirs = pyg_pair(GATConv, (5, 5), 3, heads=2, residual=residual)
        assert_same_as_pyg(ours, theirs, features("gat x", 7, 5, "one x"), EDGES)


@CONVS
def test_isolated_nodes_and_no_edges_match_pyg(conv):
    ours, theirs = pyg_pair(conv, 5, 3, heads=2)
    iso, none = features(conv.__name__, 9, 5, "iso"), features(conv.__name__, 4, 5, "empty")
    assert_same_as_pyg(ours, theirs, iso, EDGES)                   # nodes 7, 8 only have their loop
    empty = torch.empty(2, 0, dtype=torch.long)
    assert_same_as_pyg(ours, theirs, none, empty)
    ours, theirs = pyg_pair(conv, 5, 3, heads=2, add_self_loops=False)
    torch.testing.assert_close(ours(none, empty), theirs(none, empty))
    assert ours(torch.zeros(0, 5, dtype=torch.float64), empty).shape == (0, 6)


@pytest.mark.parametrize("layout", ["csr", "coo", "SparseCSR"])
@pytest.mark.parametrize("loops", [True, False])
@CONVS
def test_sparse_adjacency_matches_pyg(conv, layout, loops):
    """adj_t (n_target, n_source) gets PyG's self loops; the attention weights come back as a
    sparse tensor (n_target, n_source, heads) holding them, as PyG's torch sparse form."""
    from torch_geometric.utils import to_torch_coo_tensor
    ours, theirs = pyg_pair(conv, 5, 3, heads=2, add_self_loops=loops)
    x = features(conv.__name__, 7, 5, "sparse adj")
    adj_t = to_torch_coo_tensor(EDGES.flip(0), size=(7, 7))          # adj_t: rows are targets
    given = {"csr": adj_t.to_sparse_csr(), "coo": adj_t,
             "SparseCSR": SparseCSR.from_torch(adj_t.to_sparse_csr())}[layout]
    theirs_adj = adj_t.to_sparse_csr() if layout != "coo" else adj_t
    out_t, (A_t, al_t) = theirs(x, theirs_adj, return_attention_weights=True)
    out_o, (A_o, al_o) = ours(x, given, return_attention_weights=True)
    torch.testing.assert_close(out_o, out_t)
    assert A_o.shape == A_t.shape == (7, 7, 2) and A_o._nnz() == A_t._nnz()
    assert A_o.layout == A_t.layout
    torch.testing.assert_close(A_o.to_dense(), A_t.to_dense())
    torch.testing.assert_close(al_o, al_t)
    torch.testing.assert_close(ours(x, given), ours(x, EDGES))              # the same graph as an edge_index
    G = torch.randn(out_t.shape, dtype=out_t.dtype, generator=seeded(conv.__name__, "sparse G"))
    for a, b in zip(torch.autograd.grad(out_o, [x, *ours.parameters()], G),
                    torch.autograd.grad(out_t, [x, *theirs.parameters()], G)):
        torch.testing.assert_close(a, b)


_KWS = [{}, {"edge_dim": 3}, {"residual": True, "edge_dim": 2, "concat": False}, {"bias": False}]


@pytest.mark.parametrize("conv,kw", [(GATConv, kw) for kw in _KWS] + [(GATv2Conv, kw) for kw in
                                                                      _KWS + [{"share_weights": True}]],
                         ids=lambda v: v.__name__ if isinstance(v, type) else str(v))
@pytest.mark.parametrize("channels", [5, (5, 4)], ids=str)
def test_state_dict_both_ways(conv, kw, channels):
    gnn = pytest.importorskip("torch_geometric.nn")
    torch.manual_seed(1)
    theirs, ours = getattr(gnn, conv.__name__)(channels, 3, heads=2, **kw), conv(channels, 3, heads=2, **kw)
    assert sorted(ours.state_dict()) == sorted(theirs.state_dict())
    for name, t in theirs.state_dict().items():
        assert ours.state_dict()[name].shape == t.shape, name
    ours.load_state_dict(theirs.state_dict())                      # strict, both ways
    with torch.no_grad():
        for p in ours.parameters():
            p.normal_()
    theirs.load_state_dict(ours.state_dict())
    for name, t in theirs.state_dict().items():
        assert torch.equal(ours.state_dict()[name], t), name
    assert str(ours) == str(theirs)


def test_sparse_adjacency_and_cache():
    torch.manual_seed(0)
    conv = GATConv(5, 3, heads=2).double()
    x = torch.randn(7, 5, dtype=torch.float64, generator=seeded("gat adjacency"))
    want = conv(x, EDGES)
    S = conv._cache[2]
    conv(x, EDGES.clone())
    assert conv._cache[2] is S                            # same contents: the cached pattern
    S = S.A
    S2 = gat_adjacency(EDGES, 7)
    assert torch.equal(S2.crow_indices, S.crow_indices) and torch.equal(S2.col_indices, S.col_indices)
    torch.testing.assert_close(conv(x, S2), want)
    torch.testing.assert_close(conv(x, S2.to_torch()), want)                  # a torch CSR tensor
    torch.testing.assert_close(conv(x, S2.to_torch().to_sparse_coo()), want)  # and a COO one
    conv(x, EDGES)
    plan = conv._cache[2]
    edited = EDGES.clone()
    edited[0, 0] = 6
    conv(x, edited)
    assert conv._cache[2] is not plan                     # other contents: built again


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
    conv2 = GATConv((4, 2), 3, heads=2, edge_dim=5, residual=True)
    assert sorted(conv2.state_dict()) == ["att_dst", "att_edge", "att_src", "bias", "lin_dst.weight",
                                          "lin_edge.weight", "lin_src.weight", "res.weight"]
    assert conv2.lin is None and conv2.res.weight.shape == (6, 2) and conv2.lin_edge.weight.shape == (6, 5)
    assert str(conv2) == "GATConv((4, 2), 3, heads=2)"
    x = torch.randn(7, 4, dtype=torch.float64)
    assert conv.double()(x, EDGES).dtype == torch.float64


@CONVS
def test_errors_of_both(conv):
    layer = conv(4, 3)
    with pytest.raises(ValueError, match="edge_index must have shape"):
        layer(torch.randn(7, 4), EDGES[0])
    with pytest.raises(ValueError, match="out of range|malformed"):
        layer(torch.randn(3, 4), EDGES)
    with pytest.raises(ValueError, match="2-D"):
        layer(torch.randn(7), EDGES)
    with pytest.raises(ValueError, match="in_channels must be an int or a pair"):
        conv((4, 3, 2), 2)
    with pytest.raises(ValueError, match="dropout must be in"):
        conv(4, 3, dropout=1.5)
    with pytest.raises(ValueError, match="aggr must be 'add'"):
        conv(4, 3, aggr="mean")
    with pytest.raises(ValueError, match="MessagePassing option\\(s\\) flow"):
        conv(4, 3, flow="target_to_source")
    with pytest.raises(ValueError, match="fill_value must be"):
        conv(4, 3, edge_dim=2, fill_value="median")
    with pytest.raises(ValueError, match="edge_dim must be"):
        conv(4, 3, edge_dim=0)
    econv = conv(4, 3, edge_dim=2)
    with pytest.raises(ValueError, match="edge_attr must be \\(E, edge_dim\\)"):
        econv(torch.randn(7, 4), EDGES, torch.randn(EDGES.shape[1] - 1, 2))
    with pytest.raises(ValueError, match="edge_attr with a sparse adjacency"):
        econv(torch.randn(7, 4), gat_adjacency(EDGES, 7), torch.randn(EDGES.shape[1], 2))


def test_errors():
    conv = GATConv(4, 3)
    with pytest.raises(TypeError, match="integer node ids"):
        conv(torch.randn(7, 4), EDGES.double())
    with pytest.raises(ValueError, match="lazy -1 is not supported"):
        GATConv(-1, 2)
    with pytest.raises(ValueError, match="size must be a pair"):
        conv(torch.randn(7, 4), EDGES, size=(7,))
    with pytest.raises(ValueError, match="size\\[0\\] = 8"):
        conv(torch.randn(7, 4), EDGES, size=(8, 7))
    with pytest.raises(ValueError, match="x_target has 5 rows"):
        conv((torch.randn(7, 4), torch.randn(5, 4)), EDGES, size=(7, 7))
    with pytest.raises(ValueError, match="source columns"):
        conv(torch.randn(6, 4), gat_adjacency(EDGES, 7))
    with pytest.raises(ValueError, match="x_source must be given"):
        conv((None, torch.randn(7, 4)), EDGES)
    with pytest.raises(ValueError, match="negative_slope >= 0"):
        GATConv(4, 3, negative_slope=-0.5)(torch.randn(7, 4), REPEATED)


class _GATModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = GATConv(6, 4, heads=3, add_self_loops=False)       # the pattern has its loops
        self.conv2 = GATConv(12, 2, heads=2, concat=False, add_self_loops=False)

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
