"""nn.conv.gcn: gcn_norm and GCNConv against dense references; the adjacency cache, devices,
the gradient in edge_weight, bad edge_index."""
import pytest
import torch

from conftest import child_outcomes

from torchsparsegradutils import SparseCSR
from torchsparsegradutils.nn import GCNConv, gcn_norm


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
