"""nn.conv.gin: GINConv against PyTorch Geometric's (float64, the same weights through
load_state_dict, outputs and every gradient) on duplicate edges, self loops, isolated nodes,
bipartite pairs, sparse adjacencies and sparse x; eps and train_eps; defaults."""
import inspect

import pytest
import torch

from torchsparsegradutils import SparseCSR
from torchsparsegradutils.nn import GINConv

# duplicate edges (1 -> 2 twice), self loops (2 -> 2, 0 -> 0), node 5 isolated
EDGES = torch.tensor([[0, 1, 1, 1, 2, 4, 3, 0], [1, 0, 2, 2, 2, 1, 0, 0]])
N = 6


def _mlp():
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))


def _pair(**options):
    gnn = pytest.importorskip("torch_geometric.nn")
    torch.manual_seed(0)
    theirs = gnn.GINConv(_mlp(), **options).double()
    ours = GINConv(_mlp(), **options).double()
    ours.load_state_dict(theirs.state_dict())
    return ours, theirs


def _assert_same(ours, theirs, xs, ours_args, theirs_args):
    """ours(*ours_args) == theirs(*theirs_args), and their gradients w.r.t. xs and every parameter."""
    a, b = theirs(*theirs_args), ours(*ours_args)
    torch.testing.assert_close(b, a)
    G = torch.randn_like(a)
    for g, r in zip(torch.autograd.grad(b, [*xs, *ours.parameters()], G, allow_unused=True),
                    torch.autograd.grad(a, [*xs, *theirs.parameters()], G, allow_unused=True)):
        assert (g is None) == (r is None)
        if g is not None:
            torch.testing.assert_close(g, r)


@pytest.mark.parametrize("options", [{}, {"eps": 0.3}, {"train_eps": True}, {"eps": -0.5, "train_eps": True}],
                         ids=str)
def test_gin_conv_matches_pyg_on_an_edge_index(options):
    ours, theirs = _pair(**options)
    x = torch.randn(N, 4, dtype=torch.float64, requires_grad=True)
    _assert_same(ours, theirs, [x], (x, EDGES), (x, EDGES))
    assert ("eps" in dict(ours.named_parameters())) == options.get("train_eps", False)


@pytest.mark.parametrize("layout", ["coo", "csr", "csc", "SparseCSR"])
def test_gin_conv_matches_pyg_on_a_sparse_adjacency(layout):
    """adj_t (n_target, n_source), its values weighting the messages, as in PyG."""
    ours, theirs = _pair(train_eps=True)
    w = torch.rand(EDGES.shape[1], dtype=torch.float64, requires_grad=True)
    adj_t = torch.sparse_coo_tensor(EDGES.flip(0), w, (N, N)).coalesce()
    mine = {"coo": lambda: adj_t, "csr": adj_t.to_sparse_csr, "csc": adj_t.to_sparse_csc,
            "SparseCSR": lambda: SparseCSR.from_torch(adj_t.to_sparse_csr())}[layout]()
    x = torch.randn(N, 4, dtype=torch.float64, requires_grad=True)
    leaves = [x] if layout == "SparseCSR" else [x, w]
    a, b = theirs(x, adj_t.to_sparse_csr()), ours(x, mine)
    torch.testing.assert_close(b, a)
    G = torch.randn_like(a)
    for g, r in zip(torch.autograd.grad(b, [*leaves, *ours.parameters()], G, retain_graph=True),
                    torch.autograd.grad(a, [*leaves, *theirs.parameters()], G)):
        torch.testing.assert_close(g, r)


def test_gin_conv_bipartite_matches_pyg():
    ours, theirs = _pair(train_eps=True)
    edges = torch.tensor([[0, 1, 2, 3, 3, 4], [0, 0, 1, 1, 1, 2]])       # target 3 isolated, 3 -> 1 twice
    xs, xd = (torch.randn(n, 4, dtype=torch.float64, requires_grad=True) for n in (5, 4))
    _assert_same(ours, theirs, [xs, xd], ((xs, xd), edges), ((xs, xd), edges))
    _assert_same(ours, theirs, [xs], ((xs, None), edges, (5, 4)), ((xs, None), edges, (5, 4)))
    adj_t = torch.sparse_coo_tensor(edges.flip(0), torch.ones(6, dtype=torch.float64), (4, 5)).coalesce()
    _assert_same(ours, theirs, [xs, xd], ((xs, xd), adj_t), ((xs, xd), adj_t.to_sparse_csr()))


def test_gin_conv_on_sparse_x_and_a_static_batch():
    ours, theirs = _pair(eps=0.2)
    x = torch.randn(N, 4, dtype=torch.float64)
    x[x.abs() < 0.7] = 0
    leaf = x.to_sparse_csr().requires_grad_()
    a, b = theirs(x.requires_grad_(), EDGES), ours(leaf, EDGES)
    torch.testing.assert_close(b, a)
    G = torch.randn_like(a)
    g, = torch.autograd.grad(b, leaf, G)
    r, = torch.autograd.grad(a, x, G)
    torch.testing.assert_close(g.to_dense(), r * (x != 0))                 # the gradient on x's pattern
    xb = torch.randn(3, N, 4, dtype=torch.float64, requires_grad=True)
    _assert_same(ours, theirs, [xb], (xb, EDGES), (xb, EDGES))


def test_gin_conv_state_dict_moves_both_ways():
    gnn = pytest.importorskip("torch_geometric.nn")
    for train_eps in (False, True):
        ours, theirs = GINConv(_mlp(), eps=0.7, train_eps=train_eps), gnn.GINConv(_mlp(), train_eps=train_eps)
        theirs.load_state_dict(ours.state_dict())
        assert sorted(ours.state_dict()) == sorted(theirs.state_dict())
        assert float(theirs.eps.detach()) == pytest.approx(0.7)


def test_gin_conv_defaults_are_pygs():
    gnn = pytest.importorskip("torch_geometric.nn")
    sig = lambda f: {k: p.default for k, p in inspect.signature(f).parameters.items()  # noqa: E731
                     if p.kind is not p.VAR_KEYWORD}
    assert sig(GINConv.__init__) == sig(gnn.GINConv.__init__)
    assert sig(GINConv.forward) == sig(gnn.GINConv.forward)
    assert str(GINConv(torch.nn.Linear(2, 2))) == str(gnn.GINConv(torch.nn.Linear(2, 2)))


def test_gin_conv_reset_parameters_restores_eps():
    conv = GINConv(_mlp(), eps=0.25, train_eps=True)
    with torch.no_grad():
        conv.eps.fill_(3.0)
    conv.reset_parameters()
    assert float(conv.eps) == 0.25


def test_gin_conv_refuses_bad_edge_index():
    conv = GINConv(_mlp())
    with pytest.raises(ValueError, match="shape"):
        conv(torch.randn(3, 4), torch.tensor([0, 1]))
    with pytest.raises(ValueError):
        conv(torch.randn(3, 4), torch.tensor([[0, 5], [1, 0]]))
    with pytest.raises(ValueError):
        conv(torch.randn(3, 4), torch.tensor([[0, -1], [1, 0]]))
