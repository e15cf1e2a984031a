"""nn.conv.sage: SAGEConv's aggregations beyond sum / mean / max / min (std, var, softmax,
powermean, lstm, a PyG Aggregation module), MultiAggregation's combine modes, batched
static-graph features and torch.compile from an edge_index, against PyTorch Geometric's
SAGEConv itself (float64, the same weights through load_state_dict, outputs and every
gradient), skipped where it is not installed."""
import copy

import pytest
import torch

from support.checks import assert_compiles_like_eager
from support.operands import seeded
from support.pyg import pyg_sage_conv

from torchsparsegradutils import graph_attention
from torchsparsegradutils.nn import SAGEConv, sage_adjacency

# 6 nodes: (0 -> 1) given twice, a self loop on 2, node 4 has no in-neighbours, node 5 none at all
EDGES = torch.tensor([[0, 1, 2, 3, 3, 0, 2, 2, 5], [1, 2, 3, 0, 1, 1, 2, 1, 3]])
SORTED = EDGES[:, torch.sort(EDGES[1], stable=True).indices]        # LSTM's input: grouped by target
BIPARTITE = torch.tensor([[0, 4, 2, 2, 1, 2], [1, 0, 2, 1, 1, 1]])   # 5 sources -> 4 targets, target 3 alone

# (aggr, aggr_kwargs, positive x): PyG's options for each
CASES = [("std", {}, False), ("var", {}, False), ("std", dict(semi_grad=True), False),
         ("var", dict(semi_grad=True), False), ("softmax", {}, False), ("softmax", dict(t=0.3), False),
         ("softmax", dict(learn=True, t=0.7), False), ("softmax", dict(learn=True, t=1.5, channels=4), False),
         ("softmax", dict(semi_grad=True, t=2.0), False), ("powermean", {}, True),
         ("powermean", dict(p=2.5), True), ("powermean", dict(learn=True, p=1.5), True),
         ("powermean", dict(learn=True, p=0.5, channels=4), False), ("lstm", {}, False)]
IDS = [f"{a}-{'-'.join(f'{k}={v}' for k, v in kw.items())}" for a, kw, _ in CASES]


def _pair(*args, **kwargs):
    """PyG's SAGEConv(*args, **kwargs) in float64, and ours with its state_dict loaded strictly."""
    torch.manual_seed(0)
    theirs = pyg_sage_conv(*args, **kwargs)
    ours = SAGEConv(*args, **copy.deepcopy(kwargs)).double()       # its own copy of a module aggr
    assert sorted(ours.state_dict()) == sorted(theirs.state_dict())
    ours.load_state_dict(theirs.state_dict())
    return ours, theirs


def _matches(ours, theirs, x, edge_index, gen, atol=1e-12, **kwargs):
    """ours(x, edge_index) is theirs', and so is the gradient of each tensor of x and each
    parameter (by name) for one random G.  Returns the output."""
    leaves = [t for t in (x if isinstance(x, tuple) else (x,)) if t is not None and t.requires_grad]
    a, b = theirs(x, edge_index, **kwargs), ours(x, edge_index, **kwargs)
    torch.testing.assert_close(b, a, rtol=1e-10, atol=atol)
    G = torch.randn(a.shape, dtype=a.dtype, generator=gen)
    names = sorted(dict(theirs.named_parameters()))
    assert names == sorted(dict(ours.named_parameters()))
    mine = torch.autograd.grad(b, leaves + [ours.get_parameter(k) for k in names], G, allow_unused=True,
                               materialize_grads=True)
    pyg = torch.autograd.grad(a, leaves + [theirs.get_parameter(k) for k in names], G, allow_unused=True,
                              materialize_grads=True)
    for what, g, r in zip([f"x[{i}]" for i in range(len(leaves))] + names, mine, pyg):
        torch.testing.assert_close(g, r, rtol=1e-10, atol=atol, msg=lambda m, w=what: f"gradient of {w}: {m}")
        assert what != "aggr_module.t" or g.abs().sum() > 0        # the temperature does learn
    return a


def _x(shape, gen, positive):
    x = torch.randn(shape, dtype=torch.float64, generator=gen)
    return (x.abs() + 0.2 if positive else x).requires_grad_()


@pytest.mark.parametrize("aggr, kwargs, positive", CASES, ids=IDS)
def test_aggr_matches_pyg(aggr, kwargs, positive):
    """A repeated edge, a self loop, nodes without in-neighbours; bipartite with and
    without x_target."""
    gen = seeded("sage aggr", aggr, str(kwargs))
    edges = SORTED if aggr == "lstm" else EDGES
    ours, theirs = _pair(4, 3, aggr=aggr, aggr_kwargs=dict(kwargs))
    _matches(ours, theirs, _x((6, 4), gen, positive), edges, gen)
    bip = BIPARTITE[:, torch.sort(BIPARTITE[1], stable=True).indices] if aggr == "lstm" else BIPARTITE
    ours, theirs = _pair((4, 2), 3, aggr=aggr, aggr_kwargs=dict(kwargs), project=True)
    xs, xt = _x((5, 4), gen, positive), _x((4, 2), gen, False)
    _matches(ours, theirs, (xs, xt), bip, gen)
    out = _matches(ours, theirs, (xs, None), bip, gen, size=(5, 4))
    assert out.shape == (4, 3)


@pytest.mark.parametrize("aggr, kwargs, positive", [c for c in CASES if c[0] != "lstm"],
                         ids=[i for i, c in zip(IDS, CASES) if c[0] != "lstm"])
@pytest.mark.parametrize("layout", ["csr", "coo", "csc"])
@pytest.mark.filterwarnings("ignore:Converting sparse tensor to CSR")
def test_aggr_on_a_torch_sparse_adj_t_matches_pyg(aggr, kwargs, positive, layout):
    """PyG's adj_t as its tests build it: each stored entry one message (values unread)."""
    pytest.importorskip("torch_geometric")
    from torch_geometric.utils import to_torch_coo_tensor, to_torch_csc_tensor
    gen = seeded("sage aggr adj_t", aggr, str(kwargs), layout)
    ei = torch.unique(EDGES, dim=1)
    if layout == "coo":
        adj_t = to_torch_coo_tensor(ei, size=(6, 6)).t().coalesce()
    else:
        adj_t = to_torch_csc_tensor(ei, size=(6, 6)).t()
        adj_t = adj_t.to_sparse_csr() if layout == "csr" and adj_t.layout != torch.sparse_csr else adj_t
    ours, theirs = _pair(4, 3, aggr=aggr, aggr_kwargs=dict(kwargs))
    out = _matches(ours, theirs, _x((6, 4), gen, positive), adj_t.to(torch.float64), gen)
    torch.testing.assert_close(ours(_x((6, 4), gen, positive), ei).shape, out.shape)


def test_lstm_matches_pyg_on_a_sparse_adj_t_and_on_many_neighbours():
    """LSTM over CSR-ordered messages (PyG's adj_t route) and over a random sorted graph."""
    gen = seeded("sage lstm")
    ours, theirs = _pair(3, 2, aggr="lstm")
    ei = torch.randint(0, 20, (2, 80), generator=gen)
    ei = ei[:, torch.sort(ei[1], stable=True).indices]
    _matches(ours, theirs, _x((20, 3), gen, False), ei, gen)
    adj_t = torch.sparse_coo_tensor(ei.flip(0), torch.ones(80, dtype=torch.float64), (20, 20)).coalesce()
    _matches(ours, theirs, _x((20, 3), gen, False), adj_t, gen)
    with pytest.raises(ValueError, match="'index' tensor is not sorted"):
        ours(_x((20, 3), gen, False), ei.flip(1))


MODES = ["cat", "proj", "attn", "sum", "mean", "max", "min", "logsumexp", "std", "var"]


@pytest.mark.parametrize("mode", MODES)
def test_multi_aggr_every_combine_mode_matches_pyg(mode):
    """PyG's test's list (mean, max, sum, softmax with a learnt t) plus std, each mode, the
    state_dict moving both ways (attn: lin_heads.lins.<i> and multihead_attn)."""
    gen = seeded("sage multi", mode)
    kwargs = dict(mode=mode, aggrs_kwargs=[{}, {}, {}, dict(learn=True, t=1), {}])
    if mode in ("proj", "attn"):
        kwargs["mode_kwargs"] = dict(in_channels=4, out_channels=6, **(dict(num_heads=2) if mode == "attn" else {}))
    ours, theirs = _pair(4, 3, aggr=["mean", "max", "sum", "softmax", "std"], aggr_kwargs=kwargs)
    x = _x((6, 4), gen, False)
    _matches(ours, theirs, x, EDGES, gen)
    ours.reset_parameters()
    theirs.load_state_dict(ours.state_dict())
    _matches(ours, theirs, x, EDGES, gen)


def test_a_pyg_aggregation_module_is_called_as_pyg_calls_it():
    """PyG's MLPAggregation as aggr: the same parameters (aggr_module.mlp...), outputs and
    gradients; and PyG's own SoftmaxAggregation instance (run by PyG's code, on messages)."""
    aggr = pytest.importorskip("torch_geometric.nn.aggr")
    gen = seeded("sage module")
    ei = torch.tensor([[0, 1, 2, 3, 4, 5], [0, 0, 1, 1, 3, 3]])
    torch.manual_seed(0)
    ours, theirs = _pair(4, 3, aggr=aggr.MLPAggregation(4, 4, max_num_elements=2, num_layers=2,
                                                            hidden_channels=5))
    _matches(ours, theirs, _x((6, 4), gen, False), ei, gen)
    ours, theirs = _pair(4, 3, aggr=aggr.SoftmaxAggregation(learn=True))
    _matches(ours, theirs, _x((6, 4), gen, False), EDGES, gen)
    ours, theirs = _pair(4, 3, aggr=["mean", aggr.MedianAggregation()], aggr_kwargs=dict(mode="proj", mode_kwargs=dict(
        in_channels=4, out_channels=5)))
    _matches(ours, theirs, _x((6, 4), gen, False), EDGES, gen)


@pytest.mark.parametrize("aggr", ["mean", "sum", "max", "min", "std", "softmax", "powermean",
                                  ["mean", "max", "softmax", "std"]], ids=str)
def test_batched_static_graph_matches_pyg(aggr):
    """x (batch, n, F) over one graph (PyG's node_dim=-2), bipartite too."""
    gen = seeded("sage batched", str(aggr))
    ours, theirs = _pair(4, 3, aggr=aggr)
    _matches(ours, theirs, _x((2, 6, 4), gen, aggr == "powermean"), EDGES, gen)
    ours, theirs = _pair((4, 2), 3, aggr=aggr)
    _matches(ours, theirs, (_x((3, 5, 4), gen, aggr == "powermean"), _x((3, 4, 2), gen, False)), BIPARTITE, gen)


def test_softmax_aggregation_is_graph_attention_with_a_head_per_feature():
    """The identity the layer runs on: heads = features, width 1, source scores t x, target
    scores 0, slope 1, equals PyG's softmax aggregation with its gradients to x and t."""
    aggr = pytest.importorskip("torch_geometric.nn.aggr")
    gen = seeded("softmax as attention")
    ei = torch.unique(torch.randint(0, 30, (2, 150), generator=gen), dim=1)
    x = torch.randn(30, 5, dtype=torch.float64, generator=gen, requires_grad=True)
    theirs = aggr.SoftmaxAggregation(t=0.8, learn=True).double()
    t = theirs.t
    A, _ = sage_adjacency(ei, 30, "sum", dtype=torch.float64)
    ours = graph_attention(A, x.unsqueeze(-1), x * t, x.new_zeros(30, 5), negative_slope=1.0).squeeze(-1)
    ref = theirs(x[ei[0]], ei[1], dim_size=30)
    torch.testing.assert_close(ours, ref, rtol=1e-12, atol=1e-13)
    G = torch.randn(ref.shape, dtype=torch.float64, generator=gen)
    for g, r in zip(torch.autograd.grad(ours, (x, t), G), torch.autograd.grad(ref, (x, t), G)):
        torch.testing.assert_close(g, r, rtol=1e-12, atol=1e-12)


class _Model(torch.nn.Module):
    def __init__(self, aggr):
        super().__init__()
        self.conv1 = SAGEConv(6, 8, aggr=aggr, aggr_kwargs=dict(aggrs_kwargs=[{}] * 4 + [dict(learn=True)]))
        self.conv2 = SAGEConv(8, 3, aggr="std")

    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


def test_multi_aggr_compiles_from_an_edge_index_with_repeated_edges():
    """fullgraph=True from an edge_index (the adjacency built in the graph: repeated edges,
    a node without in-neighbours): outputs and parameter gradients as eager."""
    gen = seeded("sage compile edge_index")
    ei = torch.cat([torch.randint(0, 30, (2, 120), generator=gen), torch.tensor([[1, 1, 1], [2, 2, 2]])], 1)
    ei = ei[:, ei[1] != 7]
    model = _Model(["mean", "sum", "min", "max", "softmax"])
    x = torch.randn(30, 6, generator=gen)
    assert_compiles_like_eager(model, x, ei)
    grads = []                                      # and x's gradient (the padding rows send none)
    for run in (torch.compile(model, fullgraph=True, backend="aot_eager"), model):
        x_in = x.clone().requires_grad_()
        grads.append(torch.autograd.grad(run(x_in, ei).square().sum(), x_in)[0])
    torch._dynamo.reset()
    assert grads[0].isfinite().all()
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-5, atol=1e-5)


def test_edge_structure_padded_passes_opcheck():
    gen = seeded("edge structure opcheck")
    ei = torch.cat([torch.randint(0, 5, (2, 12), generator=gen), torch.tensor([[0, 0], [1, 1]])], 1)
    torch.library.opcheck(torch.ops.tsgu.edge_structure_padded.default, (ei, 5, 6))
    ptr, rows, cols, counts = torch.ops.tsgu.edge_structure_padded(ei, 5, 6)
    assert ptr[-1] == 14 and int(counts.sum()) == 14 and (rows[counts == 0] >= 6).all()


def test_aggregation_errors():
    with pytest.raises(ValueError, match="'softmax', 'powermean', 'lstm'"):
        SAGEConv(2, 2, aggr="median")
    with pytest.raises(TypeError, match="does not take these options"):
        SAGEConv(2, 2, aggr="softmax", aggr_kwargs=dict(temperature=2))
    with pytest.raises(ValueError, match="semi_grad cannot be used with a learnable t"):
        SAGEConv(2, 2, aggr="softmax", aggr_kwargs=dict(learn=True, semi_grad=True))
    with pytest.raises(ValueError, match="channels other than 1 need learn=True"):
        SAGEConv(2, 2, aggr="powermean", aggr_kwargs=dict(channels=2))
    with pytest.raises(ValueError, match="needs mode_kwargs in_channels and out_channels"):
        SAGEConv(2, 2, aggr=["mean", "max"], aggr_kwargs=dict(mode="attn"))
    with pytest.raises(ValueError, match="combine mode of several aggregations must be one of"):
        SAGEConv(2, 2, aggr=["mean", "max"], aggr_kwargs=dict(mode="median"))
    with pytest.raises(ValueError, match="options .* are for an aggregation given by name"):
        SAGEConv(2, 2, aggr=torch.nn.Identity(), aggr_kwargs=dict(learn=True))
    with pytest.raises(ValueError, match="no lazy width"):
        SAGEConv(-1, 2, aggr="lstm")
    x3 = torch.randn(2, 3, 2)
    with pytest.raises(ValueError, match="LSTMAggregation needs a 2-D x"):
        SAGEConv(2, 2, aggr="lstm")(x3, torch.tensor([[0], [1]]))
    with pytest.raises(ValueError, match="channels=2 needs a 2-D x"):
        SAGEConv(2, 2, aggr="softmax", aggr_kwargs=dict(learn=True, channels=2))(x3, torch.tensor([[0], [1]]))


def test_softmax_and_std_aggregations_on_the_triton_route(triton_route):
    """The softmax aggregation (graph attention with a head per feature, a repeated edge's
    additive score) and std on the Triton kernels (interpreted on the CPU) equal the C route."""
    from support.routes import both_routes
    gen = seeded("sage triton")
    conv = SAGEConv(4, 3, aggr=["softmax", "std", "max"], aggr_kwargs=dict(aggrs_kwargs=[dict(learn=True), {}, {}]))
    conv = conv.double()
    x = torch.randn(6, 4, dtype=torch.float64, generator=gen, requires_grad=True)
    t = conv.aggr_module.aggrs[0].t.detach()
    run = lambda x, t: torch.func.functional_call(conv, {"aggr_module.aggrs.0.t": t}, (x, EDGES))  # noqa: E731
    c, tr = both_routes(triton_route, run, [x, (t + 0.5).requires_grad_()])
    assert len(c) == 3 and c[2].abs().sum() > 0           # the output, x's and t's gradients
    for a, b in zip(c, tr):
        torch.testing.assert_close(b, a)
