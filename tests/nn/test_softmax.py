"""nn.functional.softmax: PyTorch Geometric's grouped softmax (torch_geometric.utils.softmax)
on the sparse softmax kernels: outputs and gradients equal PyG's (float64) by index and by
ptr, for 1-D, multi-head (E, H) and other dims, unsorted groups, empty groups; errors."""
import inspect

import pytest
import torch

from torchsparsegradutils.nn import softmax
from torchsparsegradutils.nn.functional import softmax as softmax_from_functional

INDEX = torch.tensor([3, 0, 0, 2, 3, 3, 0, 5])      # unsorted, groups 1 and 4 empty
N = 6


def _pyg():
    return pytest.importorskip("torch_geometric.utils").softmax


def _assert_same(src, *args, **kwargs):
    src = src.detach().requires_grad_()
    ref = src.detach().clone().requires_grad_()
    y, r = softmax(src, *args, **kwargs), _pyg()(ref, *args, **kwargs)
    torch.testing.assert_close(y, r)
    G = torch.randn_like(y)
    torch.testing.assert_close(torch.autograd.grad(y, src, G)[0], torch.autograd.grad(r, ref, G)[0])


@pytest.mark.parametrize("shape", [(8,), (8, 3), (8, 2, 5)], ids=str)
def test_softmax_by_index_matches_pyg(shape):
    src = torch.randn(shape, dtype=torch.float64)
    _assert_same(src, INDEX)
    _assert_same(src, INDEX, num_nodes=N + 2)
    _assert_same(src, INDEX.sort().values)                                # sorted: no permutation


@pytest.mark.parametrize("shape", [(8,), (8, 3)], ids=str)
def test_softmax_by_ptr_matches_pyg(shape):
    index = INDEX.sort().values
    ptr = torch.zeros(N + 1, dtype=torch.long)
    ptr[1:] = torch.bincount(index, minlength=N).cumsum(0)
    src = torch.randn(shape, dtype=torch.float64)
    _assert_same(src, None, ptr)
    torch.testing.assert_close(softmax(src, ptr=ptr), softmax(src, index))


@pytest.mark.parametrize("dim", [1, -1, 2])
def test_softmax_along_another_dim_matches_pyg(dim):
    src = torch.randn({1: (3, 8, 4), -1: (3, 4, 8), 2: (3, 2, 8)}[dim], dtype=torch.float64)
    _assert_same(src, INDEX, dim=dim)


def test_softmax_is_the_dense_softmax_of_each_group():
    src = torch.randn(4, 16, dtype=torch.float64)
    torch.testing.assert_close(softmax(src, torch.zeros(4, dtype=torch.long)), src.softmax(0))
    assert softmax(torch.ones(4), torch.tensor([0, 0, 1, 2])).tolist() == [0.5, 0.5, 1.0, 1.0]


def test_softmax_is_differentiable_twice():
    src = torch.randn(8, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradgradcheck(lambda s: softmax(s, INDEX), (src,))


def test_softmax_signature_is_pygs_and_it_is_exported():
    assert softmax is softmax_from_functional
    sig = lambda f: [(k, p.default) for k, p in inspect.signature(f).parameters.items()]  # noqa: E731
    assert sig(softmax) == sig(_pyg())


def test_softmax_errors():
    src = torch.randn(4)
    with pytest.raises(NotImplementedError, match="index"):
        softmax(src)
    with pytest.raises(ValueError):
        softmax(src, torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError):
        softmax(src, torch.tensor([0, 1, 2, 3]), num_nodes=2)
    with pytest.raises(ValueError):
        softmax(src, torch.tensor([0, -1, 2, 3]))
    with pytest.raises(ValueError, match="ptr"):
        softmax(src, ptr=torch.tensor([0, 2, 3]))
    with pytest.raises(IndexError):
        softmax(src, torch.tensor([0, 0, 1, 1]), dim=1)
