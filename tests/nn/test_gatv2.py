"""Tests of nn.GATv2Conv: against PyTorch Geometric's GATv2Conv with the same weights
(outputs, attention weights and every gradient in float64: 1 and 4 heads, concat or mean,
with and without self loops, shared weights, no bias; repeated edges counted per
occurrence; 1-D edge weights; bipartite inputs; residual), lazy in_channels, sparse
features, its own errors and torch.compile(fullgraph=True) on a SparseCSR.  The tests it
shares with GATConv (edge features with every fill_value, isolated nodes and no edges,
dropout, a torch sparse or SparseCSR adjacency, state_dict both ways, the common errors)
are test_gat.py's, parametrized over both.  Skipped without torch_geometric, but for the
tests that need only ours."""
import pytest
import torch
from support.checks import assert_compiles_like_eager
from support.gat import BIP_EDGES, EDGES, REPEATED, assert_same_as_pyg, features, pyg_pair
from support.operands import seeded

from torchsparsegradutils.nn import GATv2Conv, gat_adjacency


@pytest.mark.parametrize("heads", [1, 4])
@pytest.mark.parametrize("concat", [True, False])
@pytest.mark.parametrize("loops", [True, False])
@pytest.mark.parametrize("share", [False, True], ids=["two_lins", "shared"])
def test_matches_pyg(heads, concat, loops, share):
    ours, theirs = pyg_pair(GATv2Conv, 5, 3, heads=heads, concat=concat, add_self_loops=loops, share_weights=share,
                         negative_slope=0.3)
    assert_same_as_pyg(ours, theirs, features("gatv2 x", 7, 5, heads, concat, loops, share), EDGES)
    # sparse features: the same numbers, the same output
    x = features("gatv2 x", 7, 5, "sparse")
    torch.testing.assert_close(ours(x.detach().to_sparse(), EDGES), theirs(x, EDGES).detach())


@pytest.mark.parametrize("loops", [True, False])
@pytest.mark.parametrize("heads", [1, 3])
def test_repeated_edges_count_per_occurrence_as_pyg(loops, heads):
    """A repeated edge is one entry of our pattern with its copies' summed share as an
    additive score: PyG's softmax, output, weights per copy and every gradient."""
    ours, theirs = pyg_pair(GATv2Conv, 5, 3, heads=heads, add_self_loops=loops, negative_slope=0.3)
    assert_same_as_pyg(ours, theirs, features("gatv2 x", 7, 5, "repeats", loops, heads), REPEATED)


@pytest.mark.parametrize("loops", [True, False])
def test_edge_weights_one_dim_residual_mean(loops):
    """A 1-D edge_attr (edge_dim=1), concat=False, residual, no bias."""
    ours, theirs = pyg_pair(GATv2Conv, 5, 3, heads=3, edge_dim=1, concat=False, add_self_loops=loops, residual=True,
                            bias=False)
    w = torch.rand(EDGES.shape[1], dtype=torch.float64, generator=seeded("gatv2 ew")).requires_grad_()
    assert_same_as_pyg(ours, theirs, features("gatv2 x", 7, 5, "ew", loops), EDGES, w)


@pytest.mark.parametrize("channels", [5, (5, 4)], ids=str)
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("share", [False, True], ids=["two_lins", "shared"])
def test_bipartite_matches_pyg(channels, residual, share):
    """(x_source, x_target) of 7 and 4 rows, with edge features; self loops i < 4."""
    if share and channels != 5:
        pytest.skip("shared weights need one input width")
    ours, theirs = pyg_pair(GATv2Conv, channels, 3, heads=2, residual=residual, edge_dim=2, share_weights=share)
    x_src, x_dst = features("gatv2 x", 7, 5, "bip src"), features("gatv2 x", 4, 5 if channels == 5 else 4, "bip dst")
    ea = torch.randn(BIP_EDGES.shape[1], 2, dtype=torch.float64, generator=seeded("bip ea")).requires_grad_()
    assert_same_as_pyg(ours, theirs, (x_src, x_dst), BIP_EDGES, ea)
    ours.add_self_loops = theirs.add_self_loops = False
    assert_same_as_pyg(ours, theirs, (x_src, x_dst), BIP_EDGES, ea)


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


def test_errors():
    conv = GATv2Conv(4, 3)
    with pytest.raises(ValueError, match="both x_source and x_target"):
        conv((torch.randn(7, 4), None), EDGES)
    with pytest.raises(ValueError, match="a pair"):
        conv((torch.randn(7, 4),) * 3, EDGES)
    with pytest.raises(ValueError, match="without edge_dim"):
        conv(torch.randn(7, 4), EDGES, torch.randn(EDGES.shape[1], 2))
    with pytest.raises(ValueError, match="adj_t must be"):
        conv(torch.randn(6, 4), gat_adjacency(EDGES, 7))
    with pytest.raises(ValueError, match="or -1"):
        GATv2Conv(-2, 2)


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
