"""torchsparsegradutils.nn: SparseLinear and GCNConv against dense references."""
import pytest
import torch

from torchsparsegradutils import SparseCSR
from torchsparsegradutils.nn import GCNConv, SparseLinear, gcn_norm


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
    clone = SparseLinear(10, 4, density=0.3)
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
    assert conv.adjacency(edge_index, 3) is first
    edge_index[0, 0] = 2                                                    # edited in place
    assert conv.adjacency(edge_index, 3) is not first
    assert conv.adjacency(edge_index.clone(), 3) is not conv.adjacency(edge_index, 3)
    assert isinstance(first, SparseCSR)
