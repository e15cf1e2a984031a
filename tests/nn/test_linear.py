"""nn.linear: SparseLinear against torch.nn.Linear on its dense weight; its state_dict,
checkpoints, compile and the cached transpose structure for sparse x."""
import io

import pytest
import torch

from torchsparsegradutils.nn import SparseLinear


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


def test_sparse_linear_transpose_structure_is_cached():
    torch.manual_seed(0)
    layer = SparseLinear(9, 4, density=0.4)
    x = torch.rand(5, 9).to_sparse()
    layer(x)
    first = layer._transpose_structure()
    layer(x)
    assert layer._transpose_structure() is first
