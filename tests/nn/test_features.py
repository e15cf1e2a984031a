"""The layers on sparse input features (nn._features): COO, CSR and SparseCSR x give the dense
results, x's gradient on its pattern; nn.functional.dropout of sparse features."""
import pytest
import torch

from support.operands import seeded
from support.references import SAGE_AGGRS

from torchsparsegradutils import SparseCSR
from torchsparsegradutils.nn import GATConv, GCNConv, GINConv, SAGEConv, SparseLinear, dropout

# 7 nodes, (0 -> 1) given twice, a self loop on 2, node 4 without in-neighbours
EDGES = torch.tensor([[0, 1, 2, 3, 3, 0, 2, 2], [1, 2, 3, 0, 1, 1, 2, 1]])


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
            "GATConv": (GATConv(9, 2, heads=3).double(), True),
            "GINConv": (GINConv(torch.nn.Linear(9, 4)).double(), True)}


@pytest.mark.parametrize("kind", ["coo", "coo_uncoalesced", "csr", "SparseCSR"])
@pytest.mark.parametrize("layer_name", list(_layers()))
def test_sparse_features_give_the_dense_results(layer_name, kind):
    """Each layer on a sparse x: the output and weight gradients of the same x dense; x's
    own gradient (COO/CSR x that requires one) on x's pattern, the dense one there."""
    layer, graph = _layers()[layer_name]
    gen = seeded("sparse features", layer_name, kind)
    x = _bag_of_words(7, 9, gen)
    call = (lambda v: layer(v, EDGES)) if graph else layer
    xd = x.clone().requires_grad_()
    ref = call(xd)
    G = torch.randn(ref.shape, dtype=torch.float64, generator=gen)
    params = list(layer.parameters())
    want = torch.autograd.grad(ref, [xd, *params], G)
    xs = _sparse_features(kind, x)
    if kind != "SparseCSR":
        xs = xs.requires_grad_()
    out = call(xs)
    torch.testing.assert_close(out, ref)
    got = torch.autograd.grad(out, ([xs] if kind != "SparseCSR" else []) + params, G)
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
    conv(xd, EDGES).sum().backward()
    conv(S._replace(values=v), EDGES).sum().backward()
    torch.testing.assert_close(v.grad, xd.grad[x != 0])


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
