"""torchsparsegradutils.nn: SparseLinear, GCNConv and SAGEConv against dense references (and
SAGEConv against PyTorch Geometric's where it is installed); sparse input features."""
import io

import pytest
import torch

from conftest import assert_compiles_like_eager, assert_layer_matches, child_outcomes, seeded

from torchsparsegradutils import SparseCSR
from torchsparsegradutils.nn import GATConv, GCNConv, SAGEConv, SparseLinear, dropout, gcn_norm, sage_adjacency


def _dense_weight(layer: SparseLinear) -> torch.Tensor:
    return layer.weight.to_torch().to_dense()


@pytest.mark.parametrize("how", ["density", "dense", "coo", "csr"])
def test_sparse_linear_matches_dense_linear(how):
    gen = torch.Generator().manual_seed(0)
    mask = torch.rand(6, 9, generator=gen) < 0.4
    pattern = {"density": None, "dense": mask, "coo": mask.float().to_sparse(), "csr": mask.float().to_sparse_csr()}[how]
    layer = SparseLinear(9, 6, pattern=pattern, density=0.4 if how == "density" else None, generator=gen,
                         dtype=torch.float64)
    if how != "density":
        assert torch.equal(_dense_weight(layer) != 0, mask)
    x = torch.randn(2, 5, 9, dtype=torch.float64, requires_grad=True)
    W = _dense_weight(layer).detach().requires_grad_()
    torch.testing.assert_close(layer(x), x @ W.t() + layer.bias)
    G = torch.randn(2, 5, 6, dtype=torch.float64)
    layer(x).backward(G)
    xd = x.detach().clone().requires_grad_()
    (xd @ W.t()).backward(G)
    torch.testing.assert_close(x.grad, xd.grad)
    stored = W.detach() != 0
    torch.testing.assert_close(layer.values.grad, W.grad[stored])   # row-major order of the pattern
    torch.testing.assert_close(layer.bias.grad, G.sum((0, 1)))


def test_sparse_linear_init_scaled_by_row_fan_in():
    layer = SparseLinear(400, 3, pattern=torch.tensor([[1] * 4 + [0] * 396, [1] * 100 + [0] * 300, [1] * 400]))
    fan_in = torch.tensor([4, 100, 400])
    rows = torch.repeat_interleave(torch.arange(3), fan_in)
    assert bool((layer.values.abs() <= fan_in[rows].rsqrt()).all())
    assert layer.values[:4].abs().max() > 1 / 400 ** 0.5      # wider than the densest row's bound


def test_sparse_linear_state_dict_optimizer_and_errors():
    torch.manual_seed(0)
    layer = SparseLinear(10, 4, density=0.3)
    clone = SparseLinear(10, 4, pattern=layer.weight.to_torch())
    clone.load_state_dict(layer.state_dict())
    x = torch.randn(8, 10)
    torch.testing.assert_close(clone(x), layer(x))
    opt = torch.optim.SGD(layer.parameters(), lr=0.1)
    target = torch.randn(8, 4)
    losses = []
    for _ in range(30):
        opt.zero_grad()
        loss = (layer(x) - target).pow(2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    with pytest.raises(ValueError, match="exactly one"):
        SparseLinear(3, 2)
    with pytest.raises(ValueError, match="shape"):
        SparseLinear(3, 2, pattern=torch.ones(3, 2))


def test_sparse_linear_compiles_fullgraph():
    torch.manual_seed(0)
    layer = SparseLinear(16, 8, density=0.25)
    x = torch.randn(4, 16)
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(x), layer(x))


def _dense_gcn_adjacency(edge_index, n):
    A = torch.zeros(n, n, dtype=torch.float64)
    A.index_put_((edge_index[1], edge_index[0]), torch.ones(edge_index.shape[1], dtype=torch.float64),
                 accumulate=True)
    A += torch.eye(n, dtype=torch.float64)
    d = A.sum(1).rsqrt()
    return d[:, None] * A * d[None, :]


def test_gcn_norm_and_conv_match_dense():
    edge_index = torch.tensor([[0, 1, 1, 2, 3, 3], [1, 0, 2, 1, 0, 0]])     # (3 -> 0) twice
    S = gcn_norm(edge_index, 5, dtype=torch.float64)                        # node 4 isolated
    Ad = _dense_gcn_adjacency(edge_index, 5)
    torch.testing.assert_close(S.to_torch().to_dense(), Ad)
    conv = GCNConv(3, 2).double()
    x = torch.randn(5, 3, dtype=torch.float64)
    expected = Ad @ conv.lin(x) + conv.bias
    torch.testing.assert_close(conv(x, edge_index), expected)
    torch.testing.assert_close(conv(x, S), expected)


def test_gcn_conv_caches_while_edge_index_is_unchanged():
    conv = GCNConv(2, 2)
    edge_index = torch.tensor([[0, 1], [1, 2]])
    first = conv.adjacency(edge_index, 3)
    assert isinstance(first, SparseCSR)
    assert conv.adjacency(edge_index, 3) is first
    assert conv.adjacency(edge_index.clone(), 3) is first                   # the same contents
    edge_index[0, 0] = 2                                                    # edited in place
    assert conv.adjacency(edge_index, 3) is not first
    assert conv.adjacency(edge_index, 4) is not conv.adjacency(edge_index, 3)


def _assert_adjacency_of(conv, edge_index, n):
    """conv's adjacency for edge_index is that of a fresh gcn_norm (no stale cache)."""
    A = conv.adjacency(edge_index, n)
    B = gcn_norm(edge_index.clone(), n, dtype=conv.lin.weight.dtype)
    assert A.values.dtype == B.values.dtype
    torch.testing.assert_close(A.to_torch().to_dense(), B.to_torch().to_dense())


def test_gcn_conv_cache_sees_edits_the_version_counter_misses():
    """Edits through .numpy() or .data do not bump the version counter: the cached
    adjacency once went stale."""
    conv = GCNConv(2, 2)
    edge_index = torch.tensor([[0, 1, 2], [1, 2, 0]])
    _assert_adjacency_of(conv, edge_index, 3)
    edge_index.numpy()[1, 2] = 1
    _assert_adjacency_of(conv, edge_index, 3)
    edge_index.data[0] = torch.tensor([2, 0, 1])
    _assert_adjacency_of(conv, edge_index, 3)


def test_gcn_conv_after_double_and_to():
    """The cached adjacency once kept its old dtype: 'A and B must have the same dtype'."""
    edge_index = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    conv = GCNConv(3, 2)
    conv(torch.randn(3, 3), edge_index)
    for convert in (lambda m: m.double(), lambda m: m.float(), lambda m: m.to(torch.float64)):
        conv = convert(conv)
        dtype = conv.lin.weight.dtype
        x = torch.randn(3, 3, dtype=dtype)
        Ad = _dense_gcn_adjacency(edge_index, 3).to(dtype)
        torch.testing.assert_close(conv(x, edge_index), Ad @ conv.lin(x) + conv.bias)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gcn_conv_after_to_device():
    edge_index = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    conv = GCNConv(3, 2)
    x = torch.randn(3, 3)
    expected = conv(x, edge_index)
    conv = conv.to("cuda")
    torch.testing.assert_close(conv(x.cuda(), edge_index.cuda()).cpu(), expected)
    conv = conv.to("cpu")
    torch.testing.assert_close(conv(x, edge_index), expected)


def _dense_weighted_gcn_adjacency(edge_index, n, w):
    """D^-1/2 (A + I) D^-1/2 with A[target, source] the summed weights, differentiable in w."""
    A = torch.zeros(n, n, dtype=w.dtype).index_put((edge_index[1], edge_index[0]), w, accumulate=True)
    A = A + torch.eye(n, dtype=w.dtype)
    d = A.sum(1).rsqrt()
    return d[:, None] * A * d[None, :]


def test_gcn_norm_is_differentiable_in_edge_weight():
    """edge_weight.grad once stayed None (the weights were detached)."""
    edge_index = torch.tensor([[0, 1, 1, 2, 3, 3, 2], [1, 0, 2, 1, 0, 0, 2]])   # a repeat and a self loop
    w = torch.rand(7, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) + 0.5
    w.requires_grad_()
    S = gcn_norm(edge_index, 5, edge_weight=w, dtype=torch.float64)          # node 4 isolated
    ref = _dense_weighted_gcn_adjacency(edge_index, 5, w)
    torch.testing.assert_close(S.to_torch().to_dense(), ref)
    G = torch.randn(5, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    (gw,) = torch.autograd.grad((S.to_torch().to_dense() * G).sum(), w)
    (want,) = torch.autograd.grad((ref * G).sum(), w)
    torch.testing.assert_close(gw, want)
    assert torch.autograd.gradcheck(lambda w: gcn_norm(edge_index, 5, edge_weight=w, dtype=torch.float64).values,
                                    (w,))


def test_gcn_norm_and_conv_refuse_bad_edge_index():
    with pytest.raises(ValueError, match="shape"):
        gcn_norm(torch.tensor([0, 1]), 2)
    with pytest.raises(TypeError, match="integer"):
        gcn_norm(torch.tensor([[0.0], [1.0]]), 2)
    with pytest.raises(ValueError, match="edge_weight"):
        gcn_norm(torch.tensor([[0, 1], [1, 0]]), 2, edge_weight=torch.ones(3))
    for bad in ([[0, 3], [1, 0]], [[0, 1], [1, 2**40]]):
        with pytest.raises(ValueError, match="malformed sparse matrix"):
            gcn_norm(torch.tensor(bad), 3)


def test_negative_node_id_is_a_value_error_not_a_crash():
    """Once a SIGSEGV or glibc 'double free': coalesce() read through the id unchecked."""
    calls = {"gcn_norm": "gcn_norm(e, 3)", "gcn_conv": "GCNConv(2, 2)(torch.randn(3, 2), e)",
             "weighted": "gcn_norm(e, 3, edge_weight=torch.ones(2, requires_grad=True))"}
    outcomes = child_outcomes({name: "from torchsparsegradutils.nn import GCNConv, gcn_norm\n"
                                     "e = torch.tensor([[0, -1], [1, 0]])\ninputs = [e]\ncall = lambda: " + call
                               for name, call in calls.items()})
    for name, (outcome, message) in outcomes.items():
        assert outcome == "ValueError" and "malformed sparse matrix" in message, (name, outcome, message)


def _trained_pair():
    """A layer trained 5 steps with Adam, its state and its optimizer's state."""
    torch.manual_seed(0)
    layer = SparseLinear(10, 4, density=0.4)
    opt = torch.optim.Adam(layer.parameters(), lr=0.05)
    x, y = torch.randn(16, 10), torch.randn(16, 4)
    for _ in range(5):
        opt.zero_grad()
        (layer(x) - y).pow(2).mean().backward()
        opt.step()
    return layer, opt, x, y


def test_sparse_linear_resume_recipe_trains_the_loaded_parameter():
    """Build the model, build the optimizer, load the checkpoint, train: the load once
    replaced self.values by a new Parameter, so the optimizer stepped an orphan."""
    layer, opt, x, y = _trained_pair()
    buffer = io.BytesIO()
    torch.save({"model": layer.state_dict(), "opt": opt.state_dict()}, buffer)
    buffer.seek(0)
    ckpt = torch.load(buffer)
    resumed = SparseLinear(10, 4, pattern=layer.weight.to_torch())
    values = resumed.values
    opt2 = torch.optim.Adam(resumed.parameters(), lr=0.05)
    resumed.load_state_dict(ckpt["model"])
    opt2.load_state_dict(ckpt["opt"])
    assert resumed.values is values
    torch.testing.assert_close(resumed(x), layer(x))
    for model, optimizer in ((layer, opt), (resumed, opt2)):        # one more step each
        optimizer.zero_grad()
        (model(x) - y).pow(2).mean().backward()
        optimizer.step()
    assert not torch.equal(resumed.values, ckpt["model"]["values"])
    torch.testing.assert_close(resumed.values, layer.values)


def test_sparse_linear_refuses_a_checkpoint_of_another_shape_or_pattern():
    torch.manual_seed(0)
    with pytest.raises(RuntimeError, match="size mismatch"):
        SparseLinear(12, 4, density=0.5).load_state_dict(SparseLinear(8, 4, density=0.5).state_dict())
    a = SparseLinear(6, 3, pattern=torch.tensor([[1, 0, 1, 0, 0, 0], [0, 1, 0, 0, 0, 0], [0, 0, 0, 1, 1, 0]]))
    b = SparseLinear(6, 3, pattern=torch.tensor([[1, 1, 0, 0, 0, 0], [0, 1, 0, 0, 0, 0], [0, 0, 0, 0, 1, 1]]))
    before = {k: v.clone() for k, v in a.state_dict().items()}
    with pytest.raises(RuntimeError, match="sparsity pattern mismatch for col_indices"):
        a.load_state_dict(b.state_dict())
    assert torch.equal(a.crow_indices, before["crow_indices"]) and torch.equal(a.col_indices, before["col_indices"])


def test_sparse_linear_refuses_a_malformed_sparse_pattern():
    bad = torch.sparse_csr_tensor(torch.tensor([0, 2, 1]), torch.tensor([0, 1]), torch.ones(2), (2, 3))
    with pytest.raises(ValueError, match="malformed sparse matrix"):
        SparseLinear(3, 2, pattern=bad)
    bad = torch.sparse_coo_tensor(torch.tensor([[0, 1], [0, -1]]), torch.ones(2), (2, 3))
    with pytest.raises(ValueError, match="malformed sparse matrix"):
        SparseLinear(3, 2, pattern=bad)


def test_sparse_linear_after_double_and_a_state_dict_round_trip():
    torch.manual_seed(0)
    layer = SparseLinear(7, 3, density=0.5).double()
    assert layer.values.dtype == layer.bias.dtype == torch.float64
    assert layer.crow_indices.dtype == layer.col_indices.dtype == torch.int64      # indices stay indices
    x = torch.randn(4, 7, dtype=torch.float64)
    torch.testing.assert_close(layer(x), x @ _dense_weight(layer).t() + layer.bias)
    other = SparseLinear(7, 3, pattern=layer.weight.to_torch(), dtype=torch.float64)
    other.load_state_dict(layer.state_dict())
    torch.testing.assert_close(other(x), layer(x))


# ---------------------------------------------------------------- SAGEConv
# 6 nodes: (0 -> 1) given twice, a self loop on 2, node 4 has no in-neighbours, node 5 none at all
SAGE_EDGES = torch.tensor([[0, 1, 2, 3, 3, 0, 2, 2, 5], [1, 2, 3, 0, 1, 1, 2, 1, 3]])
SAGE_AGGRS = ["mean", "max", "sum"]


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
    from torchsparsegradutils.nn import _aggr
    if block is not None:
        monkeypatch.setattr(_aggr, "_BLOCK", block)
    gen = seeded("sage max ties", block)
    x = torch.randint(-2, 3, (30, 4), generator=gen).to(torch.float64)
    ours, theirs, sparse, theirs_on_pattern = _sage_max_grads_like_pyg(x, torch.randint(0, 30, (2, 120), generator=gen))
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-14)
    torch.testing.assert_close(sparse, theirs_on_pattern, rtol=0, atol=1e-14)


def test_max_aggregation_custom_op_passes_opcheck():
    from torchsparsegradutils.nn._aggr import max_aggregation  # noqa: F401 (registers the op)
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


# ---------------------------------------------------------------- sparse input features
def _sparse_features(kind, x):
    if kind == "coo":
        return x.to_sparse()
    if kind == "coo_uncoalesced":
        S = x.to_sparse().coalesce()
        idx, v = S.indices(), S.values()
        return torch.sparse_coo_tensor(torch.cat([idx, idx], 1).flip(1), torch.cat([v / 2, v / 2]).flip(0), x.shape)
    if kind == "csr":
        return x.to_sparse_csr()
    return SparseCSR.from_torch(x.to_sparse_csr())


def _bag_of_words(n, m, gen, dtype=torch.float64):
    return torch.rand(n, m, generator=gen, dtype=dtype) * (torch.rand(n, m, generator=gen) < 0.2)


def _layers():
    torch.manual_seed(0)
    return {"SparseLinear": (SparseLinear(9, 4, density=0.4, dtype=torch.float64), False),
            "GCNConv": (GCNConv(9, 4).double(), True),
            **{f"SAGEConv-{a}": (SAGEConv(9, 4, aggr=a).double(), True) for a in SAGE_AGGRS},
            "SAGEConv-wide": (SAGEConv(9, 12, aggr="mean").double(), True),
            "GATConv": (GATConv(9, 2, heads=3).double(), True)}


@pytest.mark.parametrize("kind", ["coo", "coo_uncoalesced", "csr", "SparseCSR"])
@pytest.mark.parametrize("layer_name", list(_layers()))
def test_sparse_features_give_the_dense_results(layer_name, kind):
    """Each layer on a sparse x: the output and weight gradients of the same x dense; x's
    own gradient (COO/CSR x that requires one) on x's pattern, the dense one there."""
    layer, graph = _layers()[layer_name]
    gen = seeded("sparse features", layer_name, kind)
    x = _bag_of_words(7, 9, gen)
    call = (lambda v: layer(v, SAGE_EDGES[:, :8].remainder(7))) if graph else layer
    xd = x.clone().requires_grad_()
    ref = call(xd)
    G = torch.randn(ref.shape, dtype=torch.float64, generator=gen)
    params = list(layer.parameters())
    want = _grads(ref, [xd, *params], G)
    xs = _sparse_features(kind, x)
    if kind != "SparseCSR":
        xs = xs.requires_grad_()
    out = call(xs)
    torch.testing.assert_close(out, ref)
    got = _grads(out, ([xs] if kind != "SparseCSR" else []) + params, G)
    for g, w in zip(got[-len(params):], want[1:]):
        torch.testing.assert_close(g, w)
    if kind != "SparseCSR":
        gx = got[0]
        assert gx.layout == xs.layout
        dense_gx = gx.to_dense()
        mask = x != 0
        torch.testing.assert_close(dense_gx[mask], want[0][mask])
        assert not dense_gx[~mask].any()


def test_sparse_features_reach_a_sparse_csr_values_leaf():
    gen = seeded("sparse csr features")
    x = _bag_of_words(7, 9, gen)
    S = SparseCSR.from_torch(x.to_sparse_csr())
    v = S.values.clone().requires_grad_()
    conv = SAGEConv(9, 4).double()
    xd = x.clone().requires_grad_()
    conv(xd, SAGE_EDGES[:, :8].remainder(7)).sum().backward()
    conv(S._replace(values=v), SAGE_EDGES[:, :8].remainder(7)).sum().backward()
    torch.testing.assert_close(v.grad, xd.grad[x != 0])


def test_sparse_linear_transpose_structure_is_cached():
    torch.manual_seed(0)
    layer = SparseLinear(9, 4, density=0.4)
    x = torch.rand(5, 9).to_sparse()
    layer(x)
    first = layer._transpose_structure()
    layer(x)
    assert layer._transpose_structure() is first


@pytest.mark.parametrize("kind", ["coo", "coo_uncoalesced", "csr", "SparseCSR"])
def test_dropout_of_sparse_features_is_dense_dropout_at_the_stored_entries(kind):
    """The mask drawn for the stored values, applied to the dense x, is F.dropout's result:
    dropped entries are 0, kept ones scaled by 1/(1-p), x's zeros stay zero; the gradient
    reaches x's values on its pattern, and eval mode hands x back."""
    gen = seeded("dropout", kind)
    x = _bag_of_words(30, 40, gen)
    xs = _sparse_features(kind, x)
    if kind != "SparseCSR":
        xs = xs.requires_grad_()
    torch.manual_seed(0)
    out = dropout(xs, 0.3)
    dense = (out.to_torch() if kind == "SparseCSR" else out).to_dense().detach()
    kept = dense != 0
    assert not kept[x == 0].any()
    assert 0 < kept.sum() < (x != 0).sum()                     # some dropped, some kept
    torch.testing.assert_close(dense[kept], x[kept] / 0.7)
    if kind != "SparseCSR":
        G = torch.randn(x.shape, dtype=x.dtype, generator=gen)
        (out.to_dense() * G).sum().backward()
        torch.testing.assert_close(xs.grad.to_dense(), G * kept / 0.7)
    assert dropout(xs, 0.3, training=False) is xs
    d = torch.rand(5, 6, generator=gen)
    torch.manual_seed(1)
    want = torch.nn.functional.dropout(d, 0.3)
    torch.manual_seed(1)
    torch.testing.assert_close(dropout(d, 0.3), want)
    with pytest.raises(ValueError, match="dropout probability"):
        dropout(xs, 1.5)
