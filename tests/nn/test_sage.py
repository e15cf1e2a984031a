"""nn.conv.sage: SAGEConv and sage_adjacency against a dense reference and PyTorch Geometric's
SAGEConv (where installed), max's gradient at ties included; caches, errors, compile."""
import io

import pytest
import torch

from support.checks import assert_compiles_like_eager, assert_layer_matches
from support.operands import seeded
from support.pyg import pyg_sage_conv
from support.references import SAGE_AGGRS

from torchsparsegradutils import SparseCSR
from torchsparsegradutils.nn import SAGEConv, sage_adjacency


# ---------------------------------------------------------------- SAGEConv
# 6 nodes: (0 -> 1) given twice, a self loop on 2, node 4 has no in-neighbours, node 5 none at all
SAGE_EDGES = torch.tensor([[0, 1, 2, 3, 3, 0, 2, 2, 5], [1, 2, 3, 0, 1, 1, 2, 1, 3]])


def _dense_sage(x_src, x_dst, edge_index, aggr, Wl, b, Wr, normalize):
    """PyG's SAGEConv by scatter over the edges (each listed edge a message)."""
    src, dst = edge_index[0], edge_index[1]
    msg = x_src[src]
    n = x_dst.shape[0]
    if aggr == "max":
        agg = x_src.new_zeros(n, x_src.shape[1]).scatter_reduce(
            0, dst[:, None].expand_as(msg), msg, "amax", include_self=False)
    else:
        agg = x_src.new_zeros(n, x_src.shape[1]).index_add(0, dst, msg)
        if aggr == "mean":
            agg = agg / torch.bincount(dst, minlength=n).clamp(min=1)[:, None].to(x_src.dtype)
    out = agg @ Wl.t()
    if b is not None:
        out = out + b
    if Wr is not None:
        out = out + x_dst @ Wr.t()
    return torch.nn.functional.normalize(out, dim=-1) if normalize else out


def _grads(out, inputs, G):
    return torch.autograd.grad(out, inputs, G)


@pytest.mark.parametrize("aggr", SAGE_AGGRS)
@pytest.mark.parametrize("root_weight, bias, normalize", [(True, True, False), (True, True, True),
                                                          (False, True, False), (True, False, False)])
@pytest.mark.parametrize("channels", [(5, 3), (3, 5)])     # weights first / aggregation first
def test_sage_conv_matches_dense_reference(aggr, root_weight, bias, normalize, channels):
    gen = seeded("sage", aggr, root_weight, bias, normalize, channels)
    i, o = channels
    conv = SAGEConv(i, o, aggr=aggr, root_weight=root_weight, bias=bias, normalize=normalize).double()
    x = torch.randn(6, i, dtype=torch.float64, generator=gen, requires_grad=True)
    params = [conv.lin_l.weight] + ([conv.lin_l.bias] if bias else []) + ([conv.lin_r.weight] if root_weight else [])
    out = conv(x, SAGE_EDGES)
    ref = _dense_sage(x, x, SAGE_EDGES, aggr, conv.lin_l.weight, conv.lin_l.bias,
                      conv.lin_r.weight if root_weight else None, normalize)
    torch.testing.assert_close(out, ref)
    G = torch.randn(out.shape, dtype=torch.float64, generator=gen)
    for g, r in zip(_grads(out, [x, *params], G), _grads(ref, [x, *params], G)):
        torch.testing.assert_close(g, r)


@pytest.mark.parametrize("aggr", SAGE_AGGRS)
def test_sage_conv_node_without_neighbours(aggr):
    """Node 4 has no in-neighbours: its aggregation is 0, so its output is W_r x_4 + b."""
    conv = SAGEConv(3, 2, aggr=aggr).double()
    x = torch.randn(6, 3, dtype=torch.float64) + 5          # positive: "max" of nothing must not be > 0
    out = conv(x, SAGE_EDGES)
    torch.testing.assert_close(out[4], conv.lin_r(x[4]) + conv.lin_l.bias)
    no_root = SAGEConv(3, 2, aggr=aggr, root_weight=False, bias=False)
    assert torch.equal(no_root(x.float(), SAGE_EDGES)[4], torch.zeros(2))


@pytest.mark.parametrize("aggr", SAGE_AGGRS)
def test_sage_conv_matches_pyg(aggr):
    """The same weights in PyG's SAGEConv (its state_dict loaded as it is): the same output
    and gradients, with a repeated edge, a self loop and nodes without neighbours."""
    for normalize in (False, True):
        for i, o in ((5, 3), (3, 5)):
            torch.manual_seed(0)
            theirs = pyg_sage_conv(i, o, aggr=aggr, normalize=normalize)
            ours = SAGEConv(i, o, aggr=aggr, normalize=normalize).double()
            ours.load_state_dict(theirs.state_dict())
            x = torch.randn(6, i, dtype=torch.float64, requires_grad=True)
            assert_layer_matches(ours, theirs, x, SAGE_EDGES)


def _sage_max_grads_like_pyg(x, edge_index):
    """x.grad of ours and of PyG's SAGEConv(aggr="max") with the same weights (root weight
    off, so that x's gradient is the aggregation's alone) for one random G, and ours on
    x.to_sparse() (its gradient PyG's at x's nonzeros, the pattern it is kept on)."""
    torch.manual_seed(0)
    theirs = pyg_sage_conv(x.shape[1], 3, aggr="max", root_weight=False)
    ours = SAGEConv(x.shape[1], 3, aggr="max", root_weight=False).double()
    ours.load_state_dict(theirs.state_dict())
    G = torch.randn(x.shape[0], 3, dtype=torch.float64)
    outs = []
    for layer, x_in in ((ours, x), (theirs, x), (ours, x.detach().to_sparse())):
        x_in = x_in.detach().requires_grad_()
        out = layer(x_in, edge_index)
        outs.append((out, torch.autograd.grad(out, x_in, G)[0].to_dense()))
    (ours_out, ours_grad), (their_out, their_grad), (sparse_out, sparse_grad) = outs
    torch.testing.assert_close(ours_out, their_out)
    torch.testing.assert_close(sparse_out, their_out)
    return ours_grad, their_grad, sparse_grad, their_grad * (x != 0)


def test_sage_max_splits_tied_gradient_like_pyg():
    """Issue 26, defect 7: two neighbours with equal features sending to one node share its
    gradient evenly, as PyG's (torch.scatter_reduce "amax") does; sparse_mm's "amax" gave
    it all to the first.  A tie in one feature only, a tie of three with one of them sent
    twice (PyG counts each message), and a feature-wise mix, in float64."""
    x = torch.tensor([[1.0, 2.0, -3.0],
                      [1.0, 2.0, -3.0],          # = node 0: tied in every feature
                      [0.5, 2.0, -1.0],          # tied with 0 and 1 in feature 1 only
                      [4.0, -1.0, 5.0]], dtype=torch.float64)
    edge_index = torch.tensor([[0, 1, 0, 1, 2, 2, 3, 0],
                               [3, 3, 2, 2, 1, 1, 0, 1]])    # 2 -> 1 twice; 0 -> 1 once
    ours, theirs, sparse, theirs_on_pattern = _sage_max_grads_like_pyg(x, edge_index)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-15)
    torch.testing.assert_close(sparse, theirs_on_pattern, rtol=0, atol=1e-15)


def test_sage_max_of_zero_counts_pyg_start_value_like_pyg():
    """Where the maximum is exactly 0 PyG's scatter (torch.scatter_reduce "amax" with
    include_self=False) counts the zero it starts from as one more tie: k tied
    neighbours get G / (k + 1) each.  Ours gives the same, the case ReLU features make
    common; a node without neighbours still gives 0 and sends nothing."""
    x = torch.tensor([[0.0, -1.0], [0.0, -1.0], [-2.0, 0.0], [3.0, 0.0]], dtype=torch.float64)
    edge_index = torch.tensor([[0, 1, 2, 0, 2], [3, 3, 3, 2, 0]])
    ours, theirs, sparse, theirs_on_pattern = _sage_max_grads_like_pyg(x, edge_index)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-15)
    torch.testing.assert_close(sparse, theirs_on_pattern, rtol=0, atol=1e-15)


@pytest.mark.parametrize("block", [None, 7])
def test_sage_max_gradient_matches_pyg_with_many_ties(block, monkeypatch):
    """Small integer features (ties everywhere, zeros among them) on a random graph with
    repeated edges: PyG's gradient, in one block of rows and in blocks of 7 products."""
    from torchsparsegradutils._ops import aggr
    if block is not None:
        monkeypatch.setattr(aggr, "_BLOCK", block)
    gen = seeded("sage max ties", block)
    x = torch.randint(-2, 3, (30, 4), generator=gen).to(torch.float64)
    ours, theirs, sparse, theirs_on_pattern = _sage_max_grads_like_pyg(x, torch.randint(0, 30, (2, 120), generator=gen))
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-14)
    torch.testing.assert_close(sparse, theirs_on_pattern, rtol=0, atol=1e-14)


@pytest.mark.parametrize("ties", [False, True])
def test_sage_max_second_derivatives_match_pyg(ties):
    """The Hessian-vector product through SAGEConv(aggr="max") (x's gradient taken with
    create_graph, then differentiated again with respect to x and the weights) equals
    PyG's, on random features (no ties) and on small integers (ties everywhere, zeros
    among them); the weights' part makes it nonzero."""
    gen = seeded("sage max second derivatives", ties)
    x = (torch.randint(-2, 3, (12, 4), generator=gen).to(torch.float64) if ties
         else torch.randn(12, 4, generator=gen, dtype=torch.float64))
    edge_index = torch.randint(0, 12, (2, 40), generator=gen)
    G, V = torch.randn(12, 3, generator=gen, dtype=torch.float64), torch.randn(12, 4, generator=gen, dtype=torch.float64)
    torch.manual_seed(0)
    theirs = pyg_sage_conv(4, 3, aggr="max")
    ours = SAGEConv(4, 3, aggr="max").double()
    ours.load_state_dict(theirs.state_dict())
    results = []
    for layer in (ours, theirs):
        x_in = x.clone().requires_grad_()
        gx, = torch.autograd.grad(layer(x_in, edge_index), x_in, G, create_graph=True)
        params = [x_in] + list(layer.parameters())
        results.append(torch.autograd.grad((gx * V).sum(), params, allow_unused=True, materialize_grads=True))
    for mine, pyg in zip(*results):
        torch.testing.assert_close(mine, pyg, rtol=0, atol=1e-13)
    assert any(h.abs().sum() > 0 for h in results[0])


def test_max_aggregation_backward_passes_gradgradcheck():
    """The second-order op against finite differences, away from ties (random values)."""
    gen = seeded("max aggregation gradgradcheck")
    A, _ = sage_adjacency(torch.randint(0, 6, (2, 14), generator=gen), 6, "max", dtype=torch.float64)
    a = torch.rand(A.values.shape, generator=gen, dtype=torch.float64).add_(0.5).requires_grad_()
    x = torch.randn(6, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    fn = lambda a, x: torch.ops.tsgu.max_aggregation(A.crow_indices, A.col_indices, list(A.size), a, None, x)  # noqa: E731
    assert torch.autograd.gradgradcheck(fn, (a, x))


def test_max_aggregation_custom_op_passes_opcheck():
    gen = seeded("max aggregation opcheck")
    A, _ = sage_adjacency(torch.randint(0, 6, (2, 14), generator=gen), 6, "max", dtype=torch.float64)
    a = A.values.clone().requires_grad_()
    x = torch.randint(-1, 2, (6, 3), generator=gen).to(torch.float64).requires_grad_()
    torch.library.opcheck(torch.ops.tsgu.max_aggregation.default, (A.crow_indices, A.col_indices, list(A.size), a,
                                                                    None, x))


@pytest.mark.parametrize("aggr", SAGE_AGGRS)
def test_sage_conv_bipartite_matches_pyg(aggr):
    torch.manual_seed(0)
    ei = torch.tensor([[0, 4, 2, 2, 1], [1, 0, 2, 1, 1]])       # 5 sources -> 3 targets
    theirs = pyg_sage_conv((4, 3), 2, aggr=aggr)
    ours = SAGEConv((4, 3), 2, aggr=aggr).double()
    ours.load_state_dict(theirs.state_dict())
    xs, xt = torch.randn(5, 4, dtype=torch.float64), torch.randn(3, 3, dtype=torch.float64)
    torch.testing.assert_close(ours((xs, xt), ei), theirs((xs, xt), ei))
    ones = torch.sparse_coo_tensor(ei.flip(0), torch.ones(5, dtype=torch.float64), (3, 5)).coalesce()
    torch.testing.assert_close(ours((xs, xt), SparseCSR.from_torch(ones)), theirs((xs, xt), ei))


@pytest.mark.parametrize("aggr", SAGE_AGGRS)
def test_sage_conv_on_a_sparse_csr_adjacency(aggr):
    """A SparseCSR (or torch sparse) adjacency: sparse_mm(A, x, reduce) with A's values as
    weights.  Without repeated edges and with ones as values it is PyG's aggregation."""
    ei = torch.tensor([[0, 1, 2, 3, 3, 2, 5], [1, 2, 3, 0, 1, 2, 3]])      # no repeats
    n = 6
    conv = SAGEConv(4, 3, aggr=aggr).double()
    x = torch.randn(n, 4, dtype=torch.float64)
    ones = torch.sparse_coo_tensor(ei.flip(0), torch.ones(ei.shape[1], dtype=torch.float64), (n, n)).coalesce()
    expected = conv(x, ei)
    torch.testing.assert_close(conv(x, ones), expected)
    torch.testing.assert_close(conv(x, ones.to_sparse_csr()), expected)
    torch.testing.assert_close(conv(x, SparseCSR.from_torch(ones)), expected)
    A, reduce = sage_adjacency(SAGE_EDGES, n, aggr, dtype=torch.float64)   # with the repeated edge
    assert reduce in ("sum", "amax")
    with pytest.raises(ValueError, match="target rows"):
        conv(x[:5], SparseCSR.from_torch(ones))


def test_sage_adjacency_counts_repeated_edges_as_pyg():
    A, reduce = sage_adjacency(torch.tensor([[0, 0, 2], [1, 1, 1]]), 3, "mean", dtype=torch.float64)
    assert reduce == "sum"
    torch.testing.assert_close(A.to_torch().to_dense()[1], torch.tensor([2 / 3, 0, 1 / 3], dtype=torch.float64))
    A, _ = sage_adjacency(torch.tensor([[0, 0, 2], [1, 1, 1]]), 3, "sum")
    assert A.values.tolist() == [2.0, 1.0]
    A, reduce = sage_adjacency(torch.tensor([[0, 0, 2], [1, 1, 1]]), 3, "max")
    assert reduce == "amax" and A.values.tolist() == [1.0, 1.0]


def test_sage_conv_caches_while_edge_index_is_unchanged():
    conv = SAGEConv(2, 2)
    edge_index = torch.tensor([[0, 1], [1, 2]])
    first, _ = conv.adjacency(edge_index, 3)
    assert conv.adjacency(edge_index, 3)[0] is first
    assert conv.adjacency(edge_index.clone(), 3)[0] is first
    x = torch.randn(3, 2)
    before = conv(x, edge_index)
    edge_index[0, 0] = 2                                           # edited in place: rebuilt
    assert conv.adjacency(edge_index, 3)[0] is not first
    torch.testing.assert_close(conv(x, edge_index), _dense_sage(x, x, edge_index, "mean", conv.lin_l.weight,
                                                                conv.lin_l.bias, conv.lin_r.weight, False))
    assert not torch.equal(conv(x, edge_index), before)
    edge_index.numpy()[1, 1] = 0                                   # an edit the version counter misses
    torch.testing.assert_close(conv(x, edge_index), _dense_sage(x, x, edge_index, "mean", conv.lin_l.weight,
                                                                conv.lin_l.bias, conv.lin_r.weight, False))
    assert conv.adjacency(edge_index, 4)[0] is not conv.adjacency(edge_index, 3)[0]


def test_sage_conv_after_double_and_a_state_dict_round_trip():
    torch.manual_seed(0)
    conv = SAGEConv(4, 3, aggr="max")
    x = torch.randn(6, 4)
    conv(x, SAGE_EDGES)                                            # a float32 adjacency cached
    conv = conv.double()
    xd = x.double()
    out = conv(xd, SAGE_EDGES)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, _dense_sage(xd, xd, SAGE_EDGES, "max", conv.lin_l.weight, conv.lin_l.bias,
                                                conv.lin_r.weight, False))
    other = SAGEConv(4, 3, aggr="max").double()
    assert sorted(other.state_dict()) == ["lin_l.bias", "lin_l.weight", "lin_r.weight"]
    buffer = io.BytesIO()
    torch.save(conv.state_dict(), buffer)
    buffer.seek(0)
    other.load_state_dict(torch.load(buffer))
    torch.testing.assert_close(other(xd, SAGE_EDGES), out)
    assert "lin_r.weight" not in SAGEConv(4, 3, root_weight=False).state_dict()


def test_sage_conv_errors():
    for bad in ("max_pool", "amax", None, ["mean", "median"], 3):
        with pytest.raises(ValueError, match="'sum' \\(or 'add'\\), 'mean', 'max'"):
            SAGEConv(2, 2, aggr=bad)
    with pytest.raises(ValueError, match="empty"):
        SAGEConv(2, 2, aggr=[])
    with pytest.raises(ValueError, match="in_channels and out_channels"):
        SAGEConv(2, 2, aggr=["mean", "max"], aggr_kwargs=dict(mode="proj"))
    with pytest.raises(ValueError, match="several aggregations"):
        SAGEConv(2, 2, aggr=["mean"], aggr_kwargs=dict(mode="proj", mode_kwargs=dict(in_channels=2, out_channels=2)))
    with pytest.raises(TypeError, match="does not take these options"):
        SAGEConv(2, 2, aggr=["mean", "max"], aggr_kwargs=dict(aggrs_kwargs=[{}, dict(learn=True)]))
    with pytest.raises(ValueError, match="one dict per aggregation"):
        SAGEConv(2, 2, aggr=["mean", "max"], aggr_kwargs=dict(aggrs_kwargs=[{}]))
    with pytest.raises(TypeError, match="does not take these options"):
        SAGEConv(2, 2, aggr="mean", aggr_kwargs=dict(mode="cat"))
    with pytest.raises(ValueError, match="not supported for a list aggr"):
        SAGEConv(2, 2, aggr=["mean", "max"], aggr_kwargs=dict(semi_grad=True))
    with pytest.raises(ValueError, match="lazy"):
        SAGEConv(-1, 2, project=True)
    with pytest.raises(ValueError, match="in_channels"):
        SAGEConv((2, 3, 4), 2)
    with pytest.raises(TypeError, match="node_dim"):
        SAGEConv(2, 2, node_dim=0)
    conv = SAGEConv(2, 2)
    x = torch.randn(3, 2)
    for bad in (torch.tensor([0, 1]), torch.tensor([[0, 1], [1, 0], [0, 0]])):
        with pytest.raises(ValueError, match="shape"):
            conv(x, bad)
    for bad in ([[0, 3], [1, 0]], [[0, -1], [1, 0]], [[0, 1], [1, 2**40]]):
        with pytest.raises(ValueError, match="malformed sparse matrix"):
            conv(x, torch.tensor(bad))
    with pytest.raises(TypeError, match="integer"):
        conv(x, torch.tensor([[0.0], [1.0]]))
    with pytest.raises(ValueError, match="2-D"):
        conv(torch.randn(2, 3, 2, 2), torch.tensor([[0], [1]]))
    with pytest.raises(ValueError, match=r"shape \(n, 2\)"):
        conv(torch.randn(3, 4).to_sparse(), torch.tensor([[0], [1]]))
    with pytest.raises(ValueError, match=r"size\[0\] = 4"):
        conv(x, torch.tensor([[0], [1]]), size=(4, 3))
    with pytest.raises(ValueError, match="pair"):
        conv(x, torch.tensor([[0], [1]]), size=(3,))
    with pytest.raises(ValueError, match="x_source must be given"):
        conv((None, x), torch.tensor([[0], [1]]))
    adj_t = torch.sparse_coo_tensor(torch.tensor([[0], [1]]), torch.ones(1), (3, 4))
    with pytest.raises(ValueError, match="source columns"):
        conv(x, adj_t)
    with pytest.raises(ValueError, match=r"\(n_target, n_source\) = \(2, 3\)"):
        conv((x, None), torch.sparse_coo_tensor(torch.tensor([[0], [1]]), torch.ones(1), (3, 3)), size=(3, 2))


class _SAGEModel(torch.nn.Module):
    def __init__(self, aggr):
        super().__init__()
        self.conv1, self.conv2 = SAGEConv(6, 8, aggr=aggr), SAGEConv(8, 3, aggr=aggr, normalize=True)

    def forward(self, x, A):
        return self.conv2(self.conv1(x, A).relu(), A)


@pytest.mark.parametrize("aggr", [*SAGE_AGGRS, "min", ["mean", "max", "min"]], ids=str)
def test_sage_conv_fullgraph_compile_on_a_sparse_csr(aggr):
    """fullgraph=True (no graph break) on a SparseCSR adjacency: outputs and parameter
    gradients as eager."""
    gen = seeded("sage compile", aggr)
    n = 40
    ei = torch.randint(0, n, (2, 160), generator=gen)
    A, reduce = sage_adjacency(ei, n, "max")                       # ones: every reduce on it is PyG's
    assert_compiles_like_eager(_SAGEModel(aggr), torch.randn(n, 6, generator=gen), A)


# ---------------------------------------------------------------- PyG's SAGEConv signature, against PyG itself
ALL_AGGRS = ["mean", "sum", "add", "max", "min", ["mean", "max", "sum", "min"]]


def _pyg_pair(*args, **kwargs):
    """PyG's SAGEConv(*args, **kwargs) in float64 and ours with its state_dict loaded (strict)."""
    theirs = pyg_sage_conv(*args, **kwargs)
    ours = SAGEConv(*args, **kwargs).double()
    ours.load_state_dict(theirs.state_dict())
    assert str(ours) == str(theirs)
    return ours, theirs


def _assert_matches_pyg(ours, theirs, x, edge_index, gen, **kwargs):
    """ours(x, edge_index, **kwargs) equals theirs' output, and the gradients w.r.t. every
    tensor of x and every parameter (by name) for one random G.  Returns the output."""
    leaves = [t for t in (x if isinstance(x, tuple) else (x,)) if t is not None and t.requires_grad]
    a, b = theirs(x, edge_index, **kwargs), ours(x, edge_index, **kwargs)
    torch.testing.assert_close(b, a)
    G = torch.randn(a.shape, dtype=a.dtype, generator=gen)
    ours_p, theirs_p = dict(ours.named_parameters()), dict(theirs.named_parameters())
    assert sorted(ours_p) == sorted(theirs_p)
    names = sorted(theirs_p)
    mine = torch.autograd.grad(b, leaves + [ours_p[k] for k in names], G, allow_unused=True, materialize_grads=True)
    pyg = torch.autograd.grad(a, leaves + [theirs_p[k] for k in names], G, allow_unused=True, materialize_grads=True)
    for what, g, r in zip([f"x[{i}]" for i in range(len(leaves))] + names, mine, pyg):
        torch.testing.assert_close(g, r, msg=lambda m, w=what: f"gradient of {w}: {m}")
    return a


@pytest.mark.parametrize("aggr", ALL_AGGRS, ids=str)
@pytest.mark.parametrize("project, normalize", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("channels", [(5, 3), (3, 5)])     # weights first / aggregation first
def test_sage_conv_every_aggr_matches_pyg(aggr, project, normalize, channels):
    """Output and every gradient (x and each parameter) equal PyG's, float64, on SAGE_EDGES
    (a repeated edge, a self loop, nodes without in-neighbours); project's ReLU gives
    zeros, so max / min ties at 0 too.  And on x made sparse."""
    gen = seeded("sage pyg", str(aggr), project, normalize, channels)
    i, o = channels
    torch.manual_seed(0)
    ours, theirs = _pyg_pair(i, o, aggr=aggr, project=project, normalize=normalize)
    x = torch.randn(6, i, dtype=torch.float64, generator=gen, requires_grad=True)
    out = _assert_matches_pyg(ours, theirs, x, SAGE_EDGES, gen)
    torch.testing.assert_close(ours(x.detach().to_sparse(), SAGE_EDGES), out.detach())


@pytest.mark.parametrize("aggr", ALL_AGGRS, ids=str)
@pytest.mark.parametrize("project", [False, True])
def test_sage_conv_bipartite_every_aggr_matches_pyg(aggr, project):
    """(x_source, x_target) and (x_source, None) with size, 5 sources -> 4 targets, a
    repeated edge and target 3 without neighbours."""
    gen = seeded("sage bipartite pyg", str(aggr), project)
    ei = torch.tensor([[0, 4, 2, 2, 1, 2], [1, 0, 2, 1, 1, 1]])
    torch.manual_seed(0)
    ours, theirs = _pyg_pair((4, 3), 2, aggr=aggr, project=project)
    xs = torch.randn(5, 4, dtype=torch.float64, generator=gen, requires_grad=True)
    xt = torch.randn(4, 3, dtype=torch.float64, generator=gen, requires_grad=True)
    _assert_matches_pyg(ours, theirs, (xs, xt), ei, gen)
    _assert_matches_pyg(ours, theirs, (xs, xt), ei, gen, size=(5, 4))
    out = _assert_matches_pyg(ours, theirs, (xs, None), ei, gen, size=(5, 4))
    assert out.shape == (4, 2)


@pytest.mark.parametrize("aggr", ALL_AGGRS, ids=str)
@pytest.mark.parametrize("layout", ["csc", "coo", "csr"])
@pytest.mark.filterwarnings("ignore:Converting sparse tensor to CSR")          # PyG's, on a COO or CSC adj_t
def test_sage_conv_torch_sparse_adj_t_matches_pyg(aggr, layout):
    """PyG's adj_t (n_target, n_source) as its tests build it (to_torch_csc_tensor(...).t()
    and to_torch_coo_tensor(...).t().coalesce()), and a CSR one: PyG's output on it and on
    edge_index (no repeated edge), bipartite too; x's gradient PyG's."""
    pytest.importorskip("torch_geometric")
    from torch_geometric.utils import to_torch_coo_tensor, to_torch_csc_tensor
    gen = seeded("sage adj_t", str(aggr), layout)
    ei = torch.tensor([[0, 1, 2, 3, 3, 2, 5, 1], [1, 2, 3, 0, 1, 2, 3, 1]])
    for (n_src, n_dst), x_dst in (((6, 6), True), ((6, 4), True), ((6, 4), False)):
        torch.manual_seed(0)
        ours, theirs = _pyg_pair(3, 2, aggr=aggr) if n_src == n_dst else _pyg_pair((3, 5), 2, aggr=aggr)
        xs = torch.randn(n_src, 3, dtype=torch.float64, generator=gen, requires_grad=True)
        if n_src == n_dst:
            x = xs
        else:
            x = (xs, torch.randn(n_dst, 5, dtype=torch.float64, generator=gen) if x_dst else None)
        if layout == "coo":
            adj_t = to_torch_coo_tensor(ei, size=(n_src, n_dst)).t().coalesce()
        else:
            adj_t = to_torch_csc_tensor(ei, size=(n_src, n_dst)).t()
            adj_t = adj_t.to_sparse_csr() if layout == "csr" and adj_t.layout != torch.sparse_csr else adj_t
        adj_t = adj_t.to(torch.float64)
        expected = _assert_matches_pyg(ours, theirs, x, adj_t, gen)
        torch.testing.assert_close(ours(x, ei, size=(n_src, n_dst)), expected)


@pytest.mark.parametrize("mode", ["cat", "sum", "mean", "max", "min", "proj"])
def test_sage_conv_multi_aggr_combine_modes_match_pyg(mode):
    """Each supported MultiAggregation combine mode (with "proj"'s Linear in the
    state_dict, aggr_module.lin), with aggrs_kwargs of empty dicts as PyG's test gives."""
    gen = seeded("sage combine", mode)
    kwargs = dict(mode=mode, aggrs_kwargs=[{}, {}, {}])
    if mode == "proj":
        kwargs["mode_kwargs"] = dict(in_channels=4, out_channels=6)
    torch.manual_seed(0)
    ours, theirs = _pyg_pair(4, 3, aggr=["max", "mean", "min"], aggr_kwargs=kwargs)
    assert ours.lin_l.in_features == {"cat": 12, "proj": 6}.get(mode, 4)
    x = torch.randn(6, 4, dtype=torch.float64, generator=gen, requires_grad=True)
    _assert_matches_pyg(ours, theirs, x, SAGE_EDGES, gen)


def test_sage_conv_state_dict_moves_both_ways():
    """Every parameter PyG's layer has (project's lin, proj's aggr_module.lin, lin_l,
    lin_r) loads strictly into ours and back, and both then agree."""
    kwargs = dict(aggr=["sum", "max"], project=True,
                  aggr_kwargs=dict(mode="proj", mode_kwargs=dict(in_channels=4, out_channels=5)))
    torch.manual_seed(0)
    theirs, ours = pyg_sage_conv(4, 3, **kwargs), SAGEConv(4, 3, **kwargs).double()
    assert sorted(ours.state_dict()) == sorted(theirs.state_dict())
    x = torch.randn(6, 4, dtype=torch.float64)
    ours.load_state_dict(theirs.state_dict())
    torch.testing.assert_close(ours(x, SAGE_EDGES), theirs(x, SAGE_EDGES))
    ours.reset_parameters()
    theirs.load_state_dict(ours.state_dict())
    torch.testing.assert_close(theirs(x, SAGE_EDGES), ours(x, SAGE_EDGES))
    for m in ("lin", "lin_l", "lin_r", "aggr_module.lin"):
        assert torch.equal(ours.get_submodule(m).weight, theirs.get_submodule(m).weight)


@pytest.mark.parametrize("aggr", ["mean", ["max", "sum"]], ids=str)
def test_sage_conv_lazy_in_channels(aggr):
    """in_channels -1 (and -1 in a pair): lin_l and lin_r take their widths (the
    concatenation's for a list aggr) on the first forward; PyG's state_dict then loads."""
    gen = seeded("sage lazy", str(aggr))
    x = torch.randn(6, 4, dtype=torch.float64, generator=gen)
    ours = SAGEConv(-1, 3, aggr=aggr).double()
    assert str(ours) == f"SAGEConv(-1, 3, aggr={aggr})"
    assert ours(x, SAGE_EDGES).shape == (6, 3)
    theirs = pyg_sage_conv(4, 3, aggr=aggr)
    ours.load_state_dict(theirs.state_dict())
    torch.testing.assert_close(ours(x, SAGE_EDGES), theirs(x, SAGE_EDGES))
    bip = SAGEConv((4, -1), 3, aggr=aggr).double()
    assert bip((x, x[:4, :2]), SAGE_EDGES[:, SAGE_EDGES[1] < 4]).shape == (4, 3)
    assert bip.lin_r.weight.shape == (3, 2)
