"""What the GAT and GATv2 tests share: their graphs (a hub pattern; small edge_index
graphs with a self loop, repeated edges, a bipartite one; a random graph with repeats
and edge features), a layer's comparison with PyG's of the same weights, and the two ops
(graph_attention, graph_attention_v2) as the tests common to both call them (GAT, GATV2)."""
from typing import Callable, NamedTuple

import pytest
import torch

from support.operands import seeded

from torchsparsegradutils import SparseCSR, graph_attention, graph_attention_v2

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


def attention_mask(n, m, density=0.4, seed=0, hub=False):
    """A boolean (n, m) pattern, row 1 and column 2 empty (a target with no sources, a
    source nobody attends to); with hub, row 0 full (every source)."""
    mask = torch.rand(n, m, generator=torch.Generator().manual_seed(seed)) < density
    if n > 2 and m > 2:
        mask[1, :] = False
        mask[:, 2] = False
        if hub:
            mask[0, :] = True
    return mask


def as_adjacency(mask, layout, itype=torch.int64):
    """The boolean pattern mask as an adjacency: "coo", "csr" (torch's) or "sparse_csr"
    (ours), of index type itype."""
    D = mask.double()
    if layout == "coo":
        return D.to_sparse()
    A = D.to_sparse_csr()
    ptr, col = A.crow_indices().to(itype), A.col_indices().to(itype)
    if layout == "csr":
        return torch.sparse_csr_tensor(ptr, col, A.values(), D.shape)
    return SparseCSR(ptr, col, A.values(), tuple(D.shape))


def _leaves(shapes, dtype, seed):
    gen = torch.Generator().manual_seed(seed + 1)
    return [torch.randn(s, generator=gen, dtype=dtype).requires_grad_() for s in shapes]


def gat_leaves(mask, H, F, dtype=torch.float64, seed=0, edge=False):
    """graph_attention's leaves for the (n, m) pattern mask, requiring grad: x (m, H, F),
    score_src (m, H), score_dst (n, H), and with edge an edge_score (nnz, H)."""
    (n, m), nnz = mask.shape, int(mask.sum())
    return _leaves([(m, H, F), (m, H), (n, H)] + ([(nnz, H)] if edge else []), dtype, seed)


def gatv2_leaves(mask, H, C, dtype=torch.float64, seed=0, edge=False):
    """graph_attention_v2's leaves for the (n, m) pattern mask, requiring grad: x_src
    (m, H, C), x_dst (n, H, C), att (H, C), and with edge an edge_term (nnz, H, C) and an
    edge_score (nnz, H)."""
    (n, m), nnz = mask.shape, int(mask.sum())
    return _leaves([(m, H, C), (n, H, C), (H, C)] + ([(nnz, H, C), (nnz, H)] if edge else []), dtype, seed)


class Attention(NamedTuple):
    """One of the two ops as the tests common to both call it: leaves(mask, H, F, dtype,
    seed, edge) as gat_leaves; call(A, leaves, **kw) the op on them, the edge leaves (if
    any, or their first) by name; hub, its tests' attention_mask's."""
    leaves: Callable
    call: Callable
    hub: bool


def _gat(A, ins, **kw):
    x, s, d, e = [*ins, None][:4]
    return graph_attention(A, x, s, d, edge_score=e, **kw)


def _gatv2(A, ins, **kw):
    xl, xr, att, et, b = [*ins, None, None][:5]
    return graph_attention_v2(A, xl, xr, att, edge_term=et, edge_score=b, **kw)


GAT, GATV2 = Attention(gat_leaves, _gat, False), Attention(gatv2_leaves, _gatv2, True)
