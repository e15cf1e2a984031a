"""nn.conv.gcn: gcn_norm, gcn_adjacency and GCNConv against PyTorch Geometric's (float64, the
same weights through load_state_dict, outputs and every gradient) and dense references; the
self loops as add_remaining_self_loops, flow, cached, normalize, sparse adjacencies, lazy
in_channels, static batches; the adjacency cache, devices, bad edge_index."""
import inspect

import pytest
import torch

from support.children import child_outcomes

from torchsparsegradutils import SparseCSR
from torchsparsegradutils.nn import GCNConv, gcn_adjacency, gcn_norm

# duplicate edges (1 -> 2 twice), self loops (2 -> 2, 0 -> 0), node 5 isolated, 4 a source only
EDGES = torch.tensor([[0, 1, 1, 1, 2, 4, 3, 0, 2], [1, 0, 2, 2, 2, 1, 0, 0, 3]])
N = 6


def _weights(seed=0, E=EDGES.shape[1]):
    return (torch.rand(E, dtype=torch.float64, generator=torch.Generator().manual_seed(seed)) + 0.5).requires_grad_()


def dense_gcn_adjacency(edge_index, n, w=None, improved=False, add_self_loops=True, flow="source_to_target"):
    """PyG's gcn_norm as a dense matrix, row i the node that aggregates: the self loops of
    add_remaining_self_loops (an explicit loop kept once with its weight, the last listed;
    the others weigh 1, 2 with improved, where w is given), D^-1/2 Â D^-1/2."""
    tgt, src = (edge_index[1], edge_index[0]) if flow == "source_to_target" else (edge_index[0], edge_index[1])
    fill = 2.0 if improved and w is not None else 1.0
    w = torch.ones(edge_index.shape[1], dtype=torch.float64) if w is None else w
    loop = tgt == src
    A = torch.zeros(n, n, dtype=w.dtype).index_put((tgt[~loop], src[~loop]), w[~loop], accumulate=True)
    if add_self_loops:
        diag = torch.full((n,), fill, dtype=w.dtype)
        for e in torch.nonzero(loop).flatten().tolist():
            diag = diag.index_put((tgt[e:e + 1],), w[e:e + 1])
        A = A + torch.diag(diag)
    else:
        A = A.index_put((tgt[loop], src[loop]), w[loop], accumulate=True)
    d = A.sum(1)
    d = torch.where(d > 0, d.clamp(min=1e-300).rsqrt(), torch.zeros_like(d))
    return d[:, None] * A * d[None, :]


def test_gcn_adjacency_keeps_an_explicit_self_loop_once():
    """Ours once added I to an explicit loop (its entry 2): row 0 was [0.667, 0.577]."""
    S = gcn_adjacency(torch.tensor([[0, 1], [0, 0]]), 2, dtype=torch.float64)
    torch.testing.assert_close(S.to_torch().to_dense()[0], torch.tensor([0.5, 0.5 ** 0.5], dtype=torch.float64))
    e, w = gcn_norm(torch.tensor([[0, 1], [0, 0]]), num_nodes=2)
    assert e.tolist() == [[1, 0, 1], [0, 0, 1]]
    torch.testing.assert_close(w, torch.tensor([0.5 ** 0.5, 0.5, 1.0]))


@pytest.mark.parametrize("flow", ["source_to_target", "target_to_source"])
@pytest.mark.parametrize("improved", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("add_self_loops", [True, False])
def test_gcn_norm_and_gcn_adjacency_match_pyg(flow, improved, weighted, add_self_loops):
    pyg = pytest.importorskip("torch_geometric.nn.conv.gcn_conv")
    w = _weights() if weighted else None
    args = dict(num_nodes=N, improved=improved, add_self_loops=add_self_loops, flow=flow, dtype=torch.float64)
    e_ref, v_ref = pyg.gcn_norm(EDGES, w, **args)
    e, v = gcn_norm(EDGES, w, **args)
    assert torch.equal(e, e_ref)
    torch.testing.assert_close(v, v_ref)
    S = gcn_adjacency(EDGES, edge_weight=w, **args)
    tgt, src = (e_ref[1], e_ref[0]) if flow == "source_to_target" else (e_ref[0], e_ref[1])
    dense = torch.zeros(N, N, dtype=torch.float64).index_put((tgt, src), v_ref, accumulate=True)
    torch.testing.assert_close(S.to_torch().to_dense(), dense)
    torch.testing.assert_close(dense, dense_gcn_adjacency(EDGES, N, w, improved, add_self_loops, flow))
    if weighted:
        G = torch.randn(v.shape, dtype=torch.float64)
        torch.testing.assert_close(torch.autograd.grad(v, w, G)[0], torch.autograd.grad(v_ref, w, G, retain_graph=True)[0])
        H = torch.randn(N, N, dtype=torch.float64)
        torch.testing.assert_close(torch.autograd.grad((S.to_torch().to_dense() * H).sum(), w)[0],
                                   torch.autograd.grad((dense * H).sum(), w)[0])


def test_a_self_loop_listed_twice_keeps_the_last_weight_and_only_it_gets_a_gradient():
    """PyG keeps the last listed loop's weight too, but its index_put passes the kept loop's
    gradient to the dropped one as well; ours gives the dropped weight 0 (it is not used)."""
    pyg = pytest.importorskip("torch_geometric.nn.conv.gcn_conv")
    ei = torch.tensor([[0, 0, 1, 0], [0, 0, 0, 1]])
    w = torch.tensor([3.0, 5.0, 1.0, 1.0], dtype=torch.float64, requires_grad=True)
    e, v = gcn_norm(ei, w, 3)
    e_ref, v_ref = pyg.gcn_norm(ei, w, 3)
    assert torch.equal(e, e_ref)
    torch.testing.assert_close(v, v_ref)
    G = torch.arange(1.0, 6.0, dtype=torch.float64)
    g, g_ref = torch.autograd.grad(v, w, G)[0], torch.autograd.grad(v_ref, w, G)[0]
    assert g[0] == 0 and g_ref[0] == g_ref[1]
    torch.testing.assert_close(g[1:], g_ref[1:])


def _pair(**options):
    """A PyG GCNConv (float64) and ours with its weights through load_state_dict."""
    gnn = pytest.importorskip("torch_geometric.nn")
    torch.manual_seed(0)
    theirs = gnn.GCNConv(4, 3, **options).double()
    torch.nn.init.normal_(theirs.bias) if theirs.bias is not None else None
    ours = GCNConv(4, 3, **options).double()
    ours.load_state_dict(theirs.state_dict())
    return ours, theirs


def _assert_same(ours, theirs, x, adjacency, edge_weight=None, ours_adjacency=None):
    """Outputs and the gradients w.r.t. x, edge_weight and every parameter are PyG's."""
    a = theirs(x, adjacency, edge_weight)
    b = ours(x, adjacency if ours_adjacency is None else ours_adjacency, edge_weight)
    torch.testing.assert_close(b, a)
    G = torch.randn_like(a)
    leaves = [x] + ([edge_weight] if edge_weight is not None else [])
    for g, r in zip(torch.autograd.grad(b, leaves + list(ours.parameters()), G),
                    torch.autograd.grad(a, leaves + list(theirs.parameters()), G)):
        torch.testing.assert_close(g, r)


@pytest.mark.parametrize("options", [{}, {"improved": True}, {"normalize": False}, {"add_self_loops": False},
                                     {"bias": False}, {"flow": "target_to_source"},
                                     {"improved": True, "flow": "target_to_source"}], ids=str)
@pytest.mark.parametrize("weighted", [False, True])
def test_gcn_conv_matches_pyg_on_an_edge_index(options, weighted):
    ours, theirs = _pair(**options)
    x = torch.randn(N, 4, dtype=torch.float64, requires_grad=True)
    _assert_same(ours, theirs, x, EDGES, _weights() if weighted else None)


@pytest.mark.parametrize("layout", ["coo", "csr", "csc"])
@pytest.mark.parametrize("options", [{}, {"improved": True}, {"normalize": False}], ids=str)
def test_gcn_conv_matches_pyg_on_a_torch_sparse_adjacency(layout, options):
    """adj_t as PyG's tests give it (to_torch_csc_tensor(edge_index).t(), row i the target),
    its self loops added to the diagonal (PyG's add_self_loops on a sparse matrix)."""
    ours, theirs = _pair(**options)
    w = _weights()
    adj_t = torch.sparse_coo_tensor(EDGES.flip(0), w, (N, N)).coalesce()
    theirs_adj = adj_t.to_sparse_csr()          # PyG's gcn_norm refuses CSC
    mine = {"coo": adj_t, "csr": adj_t.to_sparse_csr(), "csc": adj_t.to_sparse_csc()}[layout]
    x = torch.randn(N, 4, dtype=torch.float64, requires_grad=True)
    a, b = theirs(x, theirs_adj), ours(x, mine)
    torch.testing.assert_close(b, a)
    G = torch.randn_like(a)
    for g, r in zip(torch.autograd.grad(b, [x, w, *ours.parameters()], G, retain_graph=True),
                    torch.autograd.grad(a, [x, w, *theirs.parameters()], G)):
        torch.testing.assert_close(g, r)


def test_gcn_conv_on_a_static_batch_matches_pyg():
    ours, theirs = _pair()
    x = torch.randn(3, N, 4, dtype=torch.float64, requires_grad=True)
    _assert_same(ours, theirs, x, EDGES, _weights())
    assert ours(x, EDGES).shape == (3, N, 3)


def test_gcn_conv_state_dict_moves_both_ways():
    gnn = pytest.importorskip("torch_geometric.nn")
    theirs, ours = gnn.GCNConv(4, 3).double(), GCNConv(4, 3).double()
    torch.nn.init.normal_(ours.bias)
    theirs.load_state_dict(ours.state_dict())
    assert sorted(ours.state_dict()) == sorted(theirs.state_dict()) == ["bias", "lin.weight"]
    x = torch.randn(N, 4, dtype=torch.float64)
    torch.testing.assert_close(ours(x, EDGES), theirs(x, EDGES))


def test_gcn_conv_defaults_are_pygs():
    """Every argument PyG's GCNConv names (bar its MessagePassing **kwargs), with its default."""
    gnn = pytest.importorskip("torch_geometric.nn")
    theirs = {k: p.default for k, p in inspect.signature(gnn.GCNConv.__init__).parameters.items()
              if p.kind is not p.VAR_KEYWORD}
    ours = {k: p.default for k, p in inspect.signature(GCNConv.__init__).parameters.items()}
    assert ours == {**theirs, "flow": "source_to_target"}          # flow: a MessagePassing kwarg in PyG
    fwd = lambda f: {k: p.default for k, p in inspect.signature(f).parameters.items()}  # noqa: E731
    assert fwd(GCNConv.forward) == fwd(gnn.GCNConv.forward)
    assert fwd(gcn_norm) == fwd(pytest.importorskip("torch_geometric.nn.conv.gcn_conv").gcn_norm)


def test_gcn_conv_initialises_as_pyg():
    """glorot weight (uniform within sqrt(6 / (in + out))), zero bias."""
    conv = GCNConv(400, 100)
    bound = (6 / 500) ** 0.5
    assert conv.lin.weight.abs().max() <= bound and conv.lin.weight.abs().max() > 0.95 * bound
    assert not conv.bias.any()


def test_setting_flow_after_construction_takes_effect_or_raises():
    conv = GCNConv(4, 3).double()
    x = torch.randn(N, 4, dtype=torch.float64)
    out = conv(x, EDGES)
    conv.flow = "target_to_source"
    torch.testing.assert_close(conv(x, EDGES.flip(0)), out)
    assert not torch.allclose(conv(x, EDGES), out)
    with pytest.raises(ValueError, match="flow"):
        conv.flow = "sideways"
    with pytest.raises(ValueError, match="target_to_source"):
        conv(x, torch.sparse_coo_tensor(EDGES.flip(0), torch.ones(9), (N, N)).double())
    with pytest.raises(ValueError, match="flow"):
        GCNConv(4, 3, flow="both")


def test_normalize_false_with_self_loops_is_refused_as_pyg():
    with pytest.raises(ValueError, match="does not support adding self-loops"):
        GCNConv(4, 3, normalize=False, add_self_loops=True)
    assert GCNConv(4, 3, normalize=False).add_self_loops is False


def test_cached_keeps_the_first_adjacency_as_pyg():
    ours, theirs = _pair(cached=True)
    x = torch.randn(N, 4, dtype=torch.float64)
    first = ours(x, EDGES)
    other = torch.tensor([[0, 1], [1, 2]])
    torch.testing.assert_close(ours(x, other), first)
    torch.testing.assert_close(theirs(x, EDGES), first)
    torch.testing.assert_close(theirs(x, other), first)
    ours.reset_parameters()
    assert ours._cached_edge_index is None


def test_uncached_adjacency_is_rebuilt_for_new_edges_and_options():
    conv = GCNConv(4, 3).double()
    x = torch.randn(N, 4, dtype=torch.float64)
    for improved, w in ((False, None), (True, _weights().detach()), (False, _weights(1).detach())):
        conv.improved = improved
        e, v = gcn_norm(EDGES, w, N, improved=improved, dtype=torch.float64)
        ref = torch.zeros(N, N, dtype=torch.float64).index_put((e[1], e[0]), v, accumulate=True)
        torch.testing.assert_close(conv(x, EDGES, w), ref @ conv.lin(x) + conv.bias)


def test_lazy_in_channels():
    gnn = pytest.importorskip("torch_geometric.nn")
    conv = GCNConv(-1, 3)
    assert conv(torch.randn(N, 5), EDGES).shape == (N, 3)
    assert conv.lin.weight.shape == (3, 5)
    assert str(conv) == str(gnn.GCNConv(-1, 3)) == "GCNConv(-1, 3)"
    sparse = GCNConv(-1, 3)
    assert sparse(torch.randn(N, 5).to_sparse(), EDGES).shape == (N, 3)


def test_a_sparse_csr_is_the_ready_propagation_matrix():
    """A SparseCSR is used as given (not normalised again): gcn_adjacency's output, for
    torch.compile; with a torch sparse tensor the layer normalises it, as PyG."""
    conv = GCNConv(4, 3).double()
    x = torch.randn(N, 4, dtype=torch.float64)
    S = gcn_adjacency(EDGES, N, dtype=torch.float64)
    torch.testing.assert_close(conv(x, S), conv(x, EDGES))
    with pytest.raises(ValueError, match="edge_weight"):
        conv(x, S, torch.ones(S.values.shape[0], dtype=torch.float64))


def test_gcn_norm_of_a_sparse_matrix_keeps_its_layout_and_gradient():
    w = _weights()
    adj = torch.sparse_coo_tensor(EDGES.flip(0), w, (N, N)).coalesce()
    for A in (adj, adj.to_sparse_csr()):
        out, none = gcn_norm(A)
        assert none is None and out.layout == A.layout and out.requires_grad
    S, _ = gcn_norm(SparseCSR.from_torch(adj.detach().to_sparse_csr()))
    assert isinstance(S, SparseCSR)
    torch.testing.assert_close(S.to_torch().to_dense(), gcn_norm(adj)[0].to_dense())


def test_gcn_norm_refuses_our_old_call_with_a_pointer_to_gcn_adjacency():
    with pytest.raises(TypeError, match="gcn_adjacency"):
        gcn_norm(EDGES, N)


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
    """conv's adjacency for edge_index is that of a fresh gcn_adjacency (no stale cache)."""
    A = conv.adjacency(edge_index, n)
    B = gcn_adjacency(edge_index.clone(), n, dtype=conv.lin.weight.dtype)
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
        Ad = dense_gcn_adjacency(edge_index, 3).to(dtype)
        torch.testing.assert_close(conv(x, edge_index), Ad @ conv.lin(x) + conv.bias)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gcn_conv_after_to_device():
    edge_index = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    conv = GCNConv(3, 2)
    x = torch.randn(3, 3)
    w = torch.rand(4)
    expected = conv(x, edge_index, w)
    conv = conv.to("cuda")
    torch.testing.assert_close(conv(x.cuda(), edge_index.cuda(), w.cuda()).cpu(), expected)
    conv = conv.to("cpu")
    torch.testing.assert_close(conv(x, edge_index, w), expected)


def test_gcn_adjacency_is_differentiable_in_edge_weight():
    """edge_weight.grad once stayed None (the weights were detached)."""
    w = _weights()
    assert torch.autograd.gradcheck(lambda w: gcn_adjacency(EDGES, N, edge_weight=w).values, (w,))
    assert torch.autograd.gradcheck(lambda w: gcn_norm(EDGES, w, N, improved=True)[1], (w,))


def test_gcn_norm_and_conv_refuse_bad_edge_index():
    for f in (lambda e, **k: gcn_adjacency(e, 2, **k), lambda e, **k: gcn_norm(e, num_nodes=2, **k)):
        with pytest.raises(ValueError, match="shape"):
            f(torch.tensor([0, 1]))
        with pytest.raises(TypeError, match="integer"):
            f(torch.tensor([[0.0], [1.0]]))
        with pytest.raises(ValueError, match="edge_weight"):
            f(torch.tensor([[0, 1], [1, 0]]), edge_weight=torch.ones(3))
    for bad in ([[0, 3], [1, 0]], [[0, 1], [1, 2**40]], [[3, 0], [3, 1]]):
        with pytest.raises(ValueError):
            gcn_adjacency(torch.tensor(bad), 3)
        with pytest.raises(ValueError):
            gcn_norm(torch.tensor(bad), num_nodes=3)
    with pytest.raises(ValueError, match="bipartite"):
        GCNConv(2, 2)((torch.randn(3, 2), torch.randn(3, 2)), torch.tensor([[0], [1]]))


def test_negative_node_id_is_a_value_error_not_a_crash():
    """Once a SIGSEGV or glibc 'double free': coalesce() read through the id unchecked."""
    calls = {"gcn_adjacency": "gcn_adjacency(e, 3)", "gcn_conv": "GCNConv(2, 2)(torch.randn(3, 2), e)",
             "weighted": "gcn_adjacency(e, 3, edge_weight=torch.ones(2, requires_grad=True))",
             "gcn_norm": "gcn_norm(e, num_nodes=3)",
             "loop": "gcn_adjacency(torch.tensor([[0, -1], [1, -1]]), 3)"}
    outcomes = child_outcomes({name: "from torchsparsegradutils.nn import GCNConv, gcn_adjacency, gcn_norm\n"
                                     "e = torch.tensor([[0, -1], [1, 0]])\ninputs = [e]\ncall = lambda: " + call
                               for name, call in calls.items()})
    for name, (outcome, message) in outcomes.items():
        assert outcome == "ValueError", (name, outcome, message)
