"""What the GAT and GATv2 tests share: their graphs (a hub pattern; small edge_index
graphs with a self loop, repeated edges, a bipartite one; a random graph with repeats
and edge features) and a layer's comparison with PyG's of the same weights."""
import pytest
import torch

from support.operands import seeded

# 7 nodes: a self loop (3 -> 3), node 6 has no in-edges, node 5 no out-edges
EDGES = torch.tensor([[0, 1, 2, 3, 4, 0, 2, 3, 1, 4, 0],
                      [1, 2, 3, 3, 0, 4, 0, 1, 5, 5, 2]])
# repeats: 0 -> 1 three times, 2 -> 3 twice, and a repeated self loop (removed with loops)
REPEATED = torch.cat([EDGES, torch.tensor([[0, 0, 2, 3], [1, 1, 3, 3]])], 1)
# bipartite: 7 sources, 4 targets; 0 -> 0 twice, source 4 isolated, target 3 without edges
BIP_EDGES = torch.tensor([[0, 1, 2, 3, 6, 5, 0, 0, 1], [0, 0, 1, 1, 2, 2, 2, 0, 1]])


def hub_mask(n, m, gen):
    """A boolean (n, m) pattern: row 0 empty, row 1 full (a hub row), column 0 in every
    row but the first (a hub source), the rest about 30% full."""
    mask = torch.rand(n, m, generator=gen) < 0.3
    mask[:, 0], mask[0], mask[1] = True, False, True
    return mask


def repeated_graph(gen, n=12, edges=60, repeats=10, edge_dim=3):
    """(edge_index, x (n, 5), edge_attr (E, edge_dim)), float64: random edges, self
    loops among them, the first `repeats` given again."""
    ei = torch.randint(0, n, (2, edges), generator=gen)
    ei = torch.cat([ei, ei[:, :repeats]], 1)
    x = torch.randn(n, 5, generator=gen, dtype=torch.float64)
    return ei, x, torch.randn(ei.shape[1], edge_dim, generator=gen, dtype=torch.float64)


def features(name, n, f, *key):
    """x (n, f) float64, requiring grad, drawn from the key (name, n, f, *key)."""
    return torch.randn(n, f, dtype=torch.float64, generator=seeded(name, n, f, *key)).requires_grad_()


def pyg_pair(ours_cls, i, o, seed=0, **kw):
    """(ours, theirs): ours_cls and PyG's layer of the same name with the same weights,
    float64; PyG's zero bias made random (and copied) so that it counts."""
    gnn = pytest.importorskip("torch_geometric.nn")
    torch.manual_seed(seed)
    theirs = getattr(gnn, ours_cls.__name__)(i, o, **kw).double()
    ours = ours_cls(i, o, **kw).double()
    ours.load_state_dict(theirs.state_dict())
    if theirs.bias is not None:
        with torch.no_grad():
            theirs.bias.normal_()
            ours.bias.copy_(theirs.bias)
    return ours, theirs


def assert_same_as_pyg(ours, theirs, x, *args, **kw):
    """ours(x, *args, **kw) equals theirs in the output, the attention weights (PyG's edges
    in PyG's order) and the gradients of x, of every float tensor in args and of every
    parameter (float64, through the output and the weights); a gradient PyG leaves
    unused (None) is unused in ours."""
    inputs = [t for t in (x if isinstance(x, (tuple, list)) else (x,)) if t is not None and t.requires_grad]
    inputs += [a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point() and a.requires_grad]
    out_t, (ei_t, al_t) = theirs(x, *args, **kw, return_attention_weights=True)
    out_o, (ei_o, al_o) = ours(x, *args, **kw, return_attention_weights=True)
    torch.testing.assert_close(out_o, out_t)
    assert torch.equal(ei_o, ei_t)
    torch.testing.assert_close(al_o, al_t)
    gen = seeded(type(ours).__name__, "grads", out_t.shape)
    G = torch.randn(out_t.shape, generator=gen, dtype=out_t.dtype)
    Ga = torch.randn(al_t.shape, generator=gen, dtype=al_t.dtype)
    names = [n for n, _ in theirs.named_parameters()]
    assert names == [n for n, _ in ours.named_parameters()]
    g_t = torch.autograd.grad((out_t * G).sum() + (al_t * Ga).sum(), inputs + list(theirs.parameters()),
                              allow_unused=True)
    g_o = torch.autograd.grad((out_o * G).sum() + (al_o * Ga).sum(), inputs + list(ours.parameters()),
                              allow_unused=True)
    for name, a, b in zip(["input"] * len(inputs) + names, g_o, g_t):
        assert (a is None) == (b is None), name
        if a is not None:
            torch.testing.assert_close(a, b, msg=lambda m, name=name: f"{name}: {m}")
