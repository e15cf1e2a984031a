"""nn.conv.sage: SAGEConv and sage_adjacency against a dense reference and PyTorch Geometric's
SAGEConv (where installed), max's gradient at ties included; caches, errors, compile."""
import io

import pytest
import torch

from conftest import SAGE_AGGRS, assert_compiles_like_eager, assert_layer_matches, seeded

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
    gnn = pytest.importorskip("torch_geometric.nn")
    for normalize in (False, True):
        for i, o in ((5, 3), (3, 5)):
            torch.manual_seed(0)
            theirs = gnn.SAGEConv(i, o, aggr=aggr, normalize=normalize).double()
            ours = SAGEConv(i, o, aggr=aggr, normalize=normalize).double()
            ours.load_state_dict(theirs.state_dict())
            x = torch.randn(6, i, dtype=torch.float64, requires_grad=True)
            assert_layer_matches(ours, theirs, x, SAGE_EDGES)


def _sage_max_grads_like_pyg(x, edge_index):
    """x.grad of ours and of PyG's SAGEConv(aggr="max") with the same weights (root weight
    off, so that x's gradient is the aggregation's alone) for one random G, and ours on
    x.to_sparse() (its gradient PyG's at x's nonzeros, the pattern it is kept on)."""
    gnn = pytest.importorskip("torch_geometric.nn")
    torch.manual_seed(0)
    theirs = gnn.SAGEConv(x.shape[1], 3, aggr="max", root_weight=False).double()
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
    gnn = pytest.importorskip("torch_geometric.nn")
    gen = seeded("sage max second derivatives", ties)
    x = (torch.randint(-2, 3, (12, 4), generator=gen).to(torch.float64) if ties
         else torch.randn(12, 4, generator=gen, dtype=torch.float64))
    edge_index = torch.randint(0, 12, (2, 40), generator=gen)
    G, V = torch.randn(12, 3, generator=gen, dtype=torch.float64), torch.randn(12, 4, generator=gen, dtype=torch.float64)
    torch.manual_seed(0)
    theirs = gnn.SAGEConv(4, 3, aggr="max").double()
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
    gnn = pytest.importorskip("torch_geometric.nn")
    torch.manual_seed(0)
    ei = torch.tensor([[0, 4, 2, 2, 1], [1, 0, 2, 1, 1]])       # 5 sources -> 3 targets
    theirs = gnn.SAGEConv((4, 3), 2, aggr=aggr).double()
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
    for bad in ("max_pool", "lstm", "amax", None, ["mean"]):
        with pytest.raises(ValueError, match="'mean', 'max', 'sum'"):
            SAGEConv(2, 2, aggr=bad)
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
        conv(torch.randn(2, 3, 2), torch.tensor([[0], [1]]))
    with pytest.raises(ValueError, match=r"shape \(n, 2\)"):
        conv(torch.randn(3, 4).to_sparse(), torch.tensor([[0], [1]]))


class _SAGEModel(torch.nn.Module):
    def __init__(self, aggr):
        super().__init__()
        self.conv1, self.conv2 = SAGEConv(6, 8, aggr=aggr), SAGEConv(8, 3, aggr=aggr, normalize=True)

    def forward(self, x, A):
        return self.conv2(self.conv1(x, A).relu(), A)


@pytest.mark.parametrize("aggr", SAGE_AGGRS)
def test_sage_conv_fullgraph_compile_on_a_sparse_csr(aggr):
    """fullgraph=True (no graph break) on a SparseCSR adjacency: outputs and parameter
    gradients as eager."""
    gen = seeded("sage compile", aggr)
    n = 40
    ei = torch.randint(0, n, (2, 160), generator=gen)
    A, reduce = sage_adjacency(ei, n, "max")                       # ones: every reduce on it is PyG's
    assert_compiles_like_eager(_SAGEModel(aggr), torch.randn(n, 6, generator=gen), A)
