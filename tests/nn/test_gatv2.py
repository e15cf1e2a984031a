"""Tests of nn.GATv2Conv: against PyTorch Geometric's GATv2Conv with the same weights (its
state_dict loaded as it is, and ours into PyG's; outputs, attention weights and every
gradient in float64: 1 and 4 heads, concat or mean, with and without self loops, shared
weights, no bias; repeated edges counted per occurrence; edge features with every
fill_value, repeated edges with different features; bipartite inputs; isolated nodes and
no edges; residual; a torch sparse or SparseCSR adjacency), lazy in_channels, dropout
under a seed and off in eval mode, sparse features, errors and torch.compile(fullgraph=True)
on a SparseCSR.  Skipped without torch_geometric, but for the tests that need only ours."""
import pytest
import torch
from support.checks import assert_compiles_like_eager
from support.operands import seeded

from torchsparsegradutils import SparseCSR
from torchsparsegradutils.nn import GATv2Conv, gat_adjacency

# 7 nodes: a self loop (3 -> 3), node 6 has no in-edges, node 5 no out-edges
EDGES = torch.tensor([[0, 1, 2, 3, 4, 0, 2, 3, 1, 4, 0],
                      [1, 2, 3, 3, 0, 4, 0, 1, 5, 5, 2]])
# repeats: 0 -> 1 three times, 2 -> 3 twice, and a repeated self loop (removed with loops)
REPEATED = torch.cat([EDGES, torch.tensor([[0, 0, 2, 3], [1, 1, 3, 3]])], 1)
# bipartite: 7 sources, 4 targets; 0 -> 0 twice, source 4 isolated, target 3 without edges
BIP_EDGES = torch.tensor([[0, 1, 2, 3, 6, 5, 0, 0, 1], [0, 0, 1, 1, 2, 2, 2, 0, 1]])


def _pair(i, o, seed=0, **kw):
    gnn = pytest.importorskip("torch_geometric.nn")
    torch.manual_seed(seed)
    theirs = gnn.GATv2Conv(i, o, **kw).double()
    ours = GATv2Conv(i, o, **kw).double()
    ours.load_state_dict(theirs.state_dict())
    if theirs.bias is not None:
        with torch.no_grad():                    # PyG starts the bias at zero: make it count
            theirs.bias.normal_()
            ours.bias.copy_(theirs.bias)
    return ours, theirs


def _x(n, f, *key):
    return torch.randn(n, f, dtype=torch.float64, generator=seeded("gatv2 x", n, f, *key)).requires_grad_()


def _assert_same(ours, theirs, x, *args):
    """ours(x, *args) equals theirs in the output, the attention weights (PyG's edges in
    PyG's order) and the gradients of x, of every float tensor in args and of every
    parameter (float64, through the output and the weights)."""
    inputs = [t for t in (x if isinstance(x, (tuple, list)) else (x,)) if t.requires_grad]
    inputs += [a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point() and a.requires_grad]
    out_t, (ei_t, al_t) = theirs(x, *args, return_attention_weights=True)
    out_o, (ei_o, al_o) = ours(x, *args, return_attention_weights=True)
    torch.testing.assert_close(out_o, out_t)
    assert torch.equal(ei_o, ei_t)
    torch.testing.assert_close(al_o, al_t)
    gen = seeded("gatv2 grads", out_t.shape)
    G = torch.randn(out_t.shape, generator=gen, dtype=out_t.dtype)
    Ga = torch.randn(al_t.shape, generator=gen, dtype=al_t.dtype)
    names = [n for n, _ in theirs.named_parameters()]
    assert names == [n for n, _ in ours.named_parameters()]
    g_t = torch.autograd.grad((out_t * G).sum() + (al_t * Ga).sum(), inputs + list(theirs.parameters()))
    g_o = torch.autograd.grad((out_o * G).sum() + (al_o * Ga).sum(), inputs + list(ours.parameters()))
    for name, a, b in zip(["input"] * len(inputs) + names, g_o, g_t):
        torch.testing.assert_close(a, b, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("heads", [1, 4])
@pytest.mark.parametrize("concat", [True, False])
@pytest.mark.parametrize("loops", [True, False])
@pytest.mark.parametrize("share", [False, True], ids=["two_lins", "shared"])
def test_matches_pyg(heads, concat, loops, share):
    ours, theirs = _pair(5, 3, heads=heads, concat=concat, add_self_loops=loops, share_weights=share,
                         negative_slope=0.3)
    _assert_same(ours, theirs, _x(7, 5, heads, concat, loops, share), EDGES)
    # sparse features: the same numbers, the same output
    x = _x(7, 5, "sparse")
    torch.testing.assert_close(ours(x.detach().to_sparse(), EDGES), theirs(x, EDGES).detach())


@pytest.mark.parametrize("loops", [True, False])
@pytest.mark.parametrize("heads", [1, 3])
def test_repeated_edges_count_per_occurrence_as_pyg(loops, heads):
    """A repeated edge is one entry of our pattern with its copies' summed share as an
    additive score: PyG's softmax, output, weights per copy and every gradient."""
    ours, theirs = _pair(5, 3, heads=heads, add_self_loops=loops, negative_slope=0.3)
    _assert_same(ours, theirs, _x(7, 5, "repeats", loops, heads), REPEATED)


@pytest.mark.parametrize("fill_value", ["mean", "add", "min", "max", "mul", 0.5, "tensor"])
def test_edge_features_match_pyg(fill_value):
    """edge_dim with every fill_value of the self loops; repeated edges with different
    features (their copies' shares differ); a self loop given with features (dropped)."""
    fill = torch.tensor([0.3, -1.0, 2.0]) if fill_value == "tensor" else fill_value
    ours, theirs = _pair(5, 4, heads=2, edge_dim=3, fill_value=fill, negative_slope=0.1)
    ea = torch.randn(REPEATED.shape[1], 3, dtype=torch.float64, generator=seeded("gatv2 ea", fill_value))
    _assert_same(ours, theirs, _x(7, 5, "ea", fill_value), REPEATED, ea.requires_grad_())


@pytest.mark.parametrize("loops", [True, False])
def test_edge_weights_one_dim_residual_mean(loops):
    """A 1-D edge_attr (edge_dim=1), concat=False, residual, no bias."""
    ours, theirs = _pair(5, 3, heads=3, edge_dim=1, concat=False, add_self_loops=loops, residual=True, bias=False)
    w = torch.rand(EDGES.shape[1], dtype=torch.float64, generator=seeded("gatv2 ew")).requires_grad_()
    _assert_same(ours, theirs, _x(7, 5, "ew", loops), EDGES, w)


@pytest.mark.parametrize("channels", [5, (5, 4)], ids=str)
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("share", [False, True], ids=["two_lins", "shared"])
def test_bipartite_matches_pyg(channels, residual, share):
    """(x_source, x_target) of 7 and 4 rows, with edge features; self loops i < 4."""
    if share and channels != 5:
        pytest.skip("shared weights need one input width")
    ours, theirs = _pair(channels, 3, heads=2, residual=residual, edge_dim=2, share_weights=share)
    x_src, x_dst = _x(7, 5, "bip src"), _x(4, 5 if channels == 5 else 4, "bip dst")
    ea = torch.randn(BIP_EDGES.shape[1], 2, dtype=torch.float64, generator=seeded("bip ea")).requires_grad_()
    _assert_same(ours, theirs, (x_src, x_dst), BIP_EDGES, ea)
    ours.add_self_loops = theirs.add_self_loops = False
    _assert_same(ours, theirs, (x_src, x_dst), BIP_EDGES, ea)


def test_isolated_nodes_and_no_edges_match_pyg():
    ours, theirs = _pair(5, 3, heads=2)
    _assert_same(ours, theirs, _x(9, 5, "iso"), EDGES)                   # nodes 7, 8 only have their loop
    empty = torch.empty(2, 0, dtype=torch.long)
    _assert_same(ours, theirs, _x(4, 5, "empty"), empty)
    ours, theirs = _pair(5, 3, heads=2, add_self_loops=False)
    torch.testing.assert_close(ours(_x(4, 5, "empty"), empty), theirs(_x(4, 5, "empty"), empty))
    assert ours(torch.zeros(0, 5, dtype=torch.float64), empty).shape == (0, 6)


@pytest.mark.parametrize("layout", ["csr", "coo", "SparseCSR"])
@pytest.mark.parametrize("loops", [True, False])
def test_sparse_adjacency_matches_pyg(layout, loops):
    """adj_t (n_target, n_source) gets PyG's self loops; the attention weights come back as
    a sparse tensor (n_target, n_source, heads), as PyG's torch sparse form."""
    from torch_geometric.utils import to_torch_coo_tensor
    ours, theirs = _pair(5, 3, heads=2, add_self_loops=loops)
    x = _x(7, 5, "sparse adj")
    adj_t = to_torch_coo_tensor(EDGES.flip(0), size=(7, 7))
    given = {"csr": adj_t.to_sparse_csr(), "coo": adj_t,
             "SparseCSR": SparseCSR.from_torch(adj_t.to_sparse_csr())}[layout]
    theirs_adj = adj_t.to_sparse_csr() if layout != "coo" else adj_t
    out_t, (A_t, al_t) = theirs(x, theirs_adj, return_attention_weights=True)
    out_o, (A_o, al_o) = ours(x, given, return_attention_weights=True)
    torch.testing.assert_close(out_o, out_t)
    assert A_o.shape == A_t.shape == (7, 7, 2) and A_o._nnz() == A_t._nnz() and A_o.layout == A_t.layout
    torch.testing.assert_close(A_o.to_dense(), A_t.to_dense())
    torch.testing.assert_close(al_o, al_t)
    G = torch.randn(out_t.shape, dtype=out_t.dtype, generator=seeded("gatv2 sparse G"))
    for a, b in zip(torch.autograd.grad(out_o, [x, *ours.parameters()], G),
                    torch.autograd.grad(out_t, [x, *theirs.parameters()], G)):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("kw", [dict(), dict(edge_dim=3), dict(residual=True, edge_dim=2, concat=False),
                                dict(bias=False), dict(share_weights=True)], ids=str)
@pytest.mark.parametrize("channels", [5, (5, 4)], ids=str)
def test_state_dict_both_ways(kw, channels):
    gnn = pytest.importorskip("torch_geometric.nn")
    torch.manual_seed(1)
    theirs, ours = gnn.GATv2Conv(channels, 3, heads=2, **kw), GATv2Conv(channels, 3, heads=2, **kw)
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


@pytest.mark.parametrize("channels", [-1, (-1, 4), (-1, -1)], ids=str)
def test_lazy_in_channels(channels):
    """-1: the widths come from the first forward (PyG's lazy Linear); afterwards the
    layer matches PyG's, once given its weights."""
    gnn = pytest.importorskip("torch_geometric.nn")
    torch.manual_seed(2)
    ours, theirs = GATv2Conv(channels, 3, heads=2, residual=True), gnn.GATv2Conv(channels, 3, heads=2, residual=True)
    x = (torch.randn(7, 5), torch.randn(4, 4)) if channels != -1 else torch.randn(7, 5)
    ei = BIP_EDGES if channels != -1 else EDGES
    out = ours(x, ei)
    assert out.shape == (4 if channels != -1 else 7, 6)
    assert ours.lin_l.weight.shape == (6, 5) and ours.res.weight.shape == (6, 4 if channels != -1 else 5)
    theirs(x, ei)
    ours.load_state_dict(theirs.state_dict())
    torch.testing.assert_close(ours(x, ei), theirs(x, ei))


def test_dropout_follows_the_seed_and_stops_in_eval():
    ours, theirs = _pair(5, 4, heads=2, dropout=0.5)
    x = _x(7, 5, "dropout").detach()
    torch.manual_seed(3)
    a = ours(x, EDGES)
    torch.manual_seed(3)
    assert torch.equal(ours(x, EDGES), a)
    torch.manual_seed(4)
    assert not torch.equal(ours(x, EDGES), a)
    ours.eval(), theirs.eval()
    torch.testing.assert_close(ours(x, EDGES), theirs(x, EDGES))


def test_errors():
    conv = GATv2Conv(4, 3)
    with pytest.raises(ValueError, match="edge_index must have shape"):
        conv(torch.randn(7, 4), EDGES[0])
    with pytest.raises(ValueError, match="out of range|malformed"):
        conv(torch.randn(3, 4), EDGES)
    with pytest.raises(ValueError, match="2-D"):
        conv(torch.randn(7), EDGES)
    with pytest.raises(ValueError, match="both x_source and x_target"):
        conv((torch.randn(7, 4), None), EDGES)
    with pytest.raises(ValueError, match="a pair"):
        conv((torch.randn(7, 4),) * 3, EDGES)
    with pytest.raises(ValueError, match="without edge_dim"):
        conv(torch.randn(7, 4), EDGES, torch.randn(EDGES.shape[1], 2))
    with pytest.raises(ValueError, match="adj_t must be"):
        conv(torch.randn(6, 4), gat_adjacency(EDGES, 7))
    with pytest.raises(ValueError, match="in_channels must be an int or a pair"):
        GATv2Conv((4, 3, 2), 2)
    with pytest.raises(ValueError, match="or -1"):
        GATv2Conv(-2, 2)
    with pytest.raises(ValueError, match="dropout must be in"):
        GATv2Conv(4, 3, dropout=1.5)
    with pytest.raises(ValueError, match="aggr must be 'add'"):
        GATv2Conv(4, 3, aggr="mean")
    with pytest.raises(ValueError, match="MessagePassing option\\(s\\) flow"):
        GATv2Conv(4, 3, flow="target_to_source")
    with pytest.raises(ValueError, match="fill_value must be"):
        GATv2Conv(4, 3, edge_dim=2, fill_value="median")
    with pytest.raises(ValueError, match="edge_dim must be"):
        GATv2Conv(4, 3, edge_dim=0)
    econv = GATv2Conv(4, 3, edge_dim=2)
    with pytest.raises(ValueError, match="edge_attr must be \\(E, edge_dim\\)"):
        econv(torch.randn(7, 4), EDGES, torch.randn(EDGES.shape[1] - 1, 2))
    with pytest.raises(ValueError, match="edge_attr with a sparse adjacency"):
        econv(torch.randn(7, 4), gat_adjacency(EDGES, 7), torch.randn(EDGES.shape[1], 2))


class _Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = GATv2Conv(6, 4, heads=3, add_self_loops=False)       # the pattern has its loops
        self.conv2 = GATv2Conv(12, 2, heads=2, concat=False, add_self_loops=False, share_weights=True)

    def forward(self, x, A):
        return self.conv2(torch.nn.functional.elu(self.conv1(x, A)), A)


def test_fullgraph_compile_on_a_sparse_csr():
    gen = seeded("gatv2 compile")
    n = 40
    A = gat_adjacency(torch.randint(0, n, (2, 160), generator=gen), n)
    torch.manual_seed(0)
    assert_compiles_like_eager(_Model(), torch.randn(n, 6, generator=gen), A)
