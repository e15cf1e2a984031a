"""sparse_csr_tensor and sparse_coo_tensor: sparse tensors built from a learnable values
tensor, whose backward into the values stays sparse (never a dense n x m gradient), against
dense PyTorch autograd."""
import pytest
import torch
from conftest import random_dense
from test_sparse_mm import dense_reference, make_case

from torchsparsegradutils import sparse_coo_tensor, sparse_csr_tensor, sparse_mm


def test_sparse_csr_tensor_never_densifies():
    """Our CSR constructor's backward maps the gradient onto values without to_dense."""
    D = random_dense(1, 50, 40, 100, torch.float64, torch.Generator().manual_seed(3))[0]
    S = D.to_sparse_csr()
    v = S.values().clone().requires_grad_()
    B = torch.randn(40, 4, dtype=torch.float64)
    with torch.autograd.profiler.profile() as prof:
        sparse_mm(sparse_csr_tensor(S.crow_indices(), S.col_indices(), v, S.shape), B).sum().backward()
    names = {e.name for e in prof.function_events}
    assert not any("to_dense" in nm for nm in names), names
    ref = dense_reference(D, B, torch.ones(50, 4, dtype=torch.float64))[1]
    torch.testing.assert_close(v.grad, ref[D != 0])


@pytest.mark.parametrize("order", ["sorted", "shuffled", "duplicates"])
@pytest.mark.parametrize("batched", [False, True])
def test_sparse_coo_tensor_values_gradient(order, batched):
    """Our COO constructor: values.grad equals dense autograd's for sorted, unsorted and
    repeated positions (each repeat gets its matrix entry's gradient), 2-D and batched."""
    gen = torch.Generator().manual_seed(8)
    D = random_dense(2 if batched else 1, 9, 7, 20, torch.float64, gen)
    D = D if batched else D[0]
    idx = D.to_sparse().coalesce().indices()
    if order != "sorted":
        if order == "duplicates":
            idx = torch.cat([idx, idx[:, :5]], 1)
        idx = idx[:, torch.randperm(idx.shape[1], generator=gen)]
    v = torch.randn(idx.shape[1], dtype=torch.float64, generator=gen, requires_grad=True)
    B = torch.randn(*D.shape[:-2], 7, 3, dtype=torch.float64, generator=gen)
    G = torch.randn(*D.shape[:-1], 3, dtype=torch.float64, generator=gen)
    sparse_mm(sparse_coo_tensor(idx, v, D.shape), B).backward(G)
    v_ref = v.detach().clone().requires_grad_()
    dense = torch.zeros(D.shape, dtype=torch.float64).index_put(tuple(idx), v_ref, accumulate=True)
    (dense @ B).backward(G)
    torch.testing.assert_close(v.grad, v_ref.grad)
    Bl = B.clone().requires_grad_()
    f = lambda v, B: sparse_mm(sparse_coo_tensor(idx, v, D.shape), B) ** 2  # noqa: E731
    assert torch.autograd.gradgradcheck(f, (v.detach().requires_grad_(), Bl))


def test_sparse_coo_tensor_same_pattern_is_not_searched(monkeypatch):
    """On a sorted, unique index array (an edge list), sparse_mm's gradient comes back on
    the same indices and the constructor hands its values over without any look-up;
    a dense gradient or another pattern goes through the look-up."""
    import torchsparsegradutils._core.view as st
    A, B, _, D = make_case("coo", False, 30, 20, 4, 80, torch.float64, torch.int64, seed=5)
    idx = A._indices()
    v = A._values().clone().requires_grad_()

    def no_lookup(*args):
        raise AssertionError("looked up a gradient that came back on the same pattern")
    with monkeypatch.context() as mp:
        mp.setattr(st, "_values_at", no_lookup)
        sparse_mm(sparse_coo_tensor(idx, v, A.shape), B).sum().backward()
    ref = dense_reference(D, B, torch.ones(30, 4, dtype=torch.float64))[1]
    torch.testing.assert_close(v.grad, ref[D != 0])
    v.grad = None
    W = torch.randn(D.shape, dtype=torch.float64)
    (sparse_coo_tensor(idx, v, A.shape).to_dense() * W).sum().backward()
    torch.testing.assert_close(v.grad, W[D != 0])
    v.grad = None
    Wsp = (W * (torch.rand(D.shape) < 0.5)).to_sparse()   # another sparse pattern
    got = st._values_at(Wsp, list(idx))
    torch.testing.assert_close(got, Wsp.to_dense()[D != 0])
    assert torch.equal(st._values_at(torch.zeros(D.shape).to_sparse(), list(idx)), torch.zeros(idx.shape[1]))


def test_sparse_csr_tensor_with_other_gradients():
    """A gradient that arrives dense, or on another sparse pattern, is gathered at the pattern."""
    from torchsparsegradutils._core.view import values_at_pattern
    A, _, _, D = make_case("csr", False, 5, 6, 2, 8, torch.float64, torch.int64, seed=4)
    v = A.values().clone().requires_grad_()
    S = sparse_csr_tensor(A.crow_indices(), A.col_indices(), v, A.shape)
    W = torch.randn(D.shape, dtype=torch.float64)
    (S.to_dense() * W).sum().backward()
    torch.testing.assert_close(v.grad, W[D != 0])
    assert torch.autograd.gradcheck(
        lambda v: sparse_csr_tensor(A.crow_indices(), A.col_indices(), v, A.shape).to_dense(), (v,))
    # batched pattern (torch cannot differentiate to_dense of batched CSR; call the mapping directly)
    Ab, _, _, Db = make_case("csr", True, 5, 6, 2, 8, torch.float64, torch.int64, seed=4)
    Wb = torch.randn(Db.shape, dtype=torch.float64)
    got = values_at_pattern(Wb, Ab.crow_indices(), Ab.col_indices())
    torch.testing.assert_close(got, Wb[Db != 0].reshape(Ab.values().shape))
    Wsp = (Wb * (torch.rand(Db.shape) < 0.5)).to_sparse()   # another sparse pattern
    got = values_at_pattern(Wsp, Ab.crow_indices(), Ab.col_indices())
    torch.testing.assert_close(got, Wsp.to_dense()[Db != 0].reshape(Ab.values().shape))
