"""PairwiseEncoder and calc_pairwise_coo_indices_nd against a dense construction by loops over sites and offsets."""
import itertools
import warnings

import pytest
import torch

from torchsparsegradutils.encoders import PairwiseEncoder, calc_pairwise_coo_indices_nd
from torchsparsegradutils.encoders.pairwise_encoder import _gen_offsets_nd

CASES = [  # radius, volume_shape, diag, upper, relation
    (1.0, (1, 5), False, None, "indep"),
    (1.5, (2, 3, 4), True, None, "inter"),
    (1.5, (3, 4, 3), True, False, "intra"),
    (2.0, (2, 3, 3, 2), False, True, "inter"),
    (1.0, (2, 2, 2, 2, 2), True, None, "intra"),
    (3.0, (1, 2, 2), True, None, "indep"),           # radius larger than the volume
]


def dense_reference(values, offsets, shape):
    """M[p, p - o_k] = values[k, p] by explicit loops over sites and offsets."""
    V = values[0].numel()
    M = torch.zeros(V, V, dtype=values.dtype)
    sites = list(itertools.product(*[range(s) for s in shape]))
    lin = {p: i for i, p in enumerate(sites)}
    for k, o in enumerate(offsets):
        for p in sites:
            q = tuple(a - b for a, b in zip(p, o))
            if q in lin:
                M[lin[p], lin[q]] = values[k][p]
    return M


@pytest.mark.parametrize("layout", [torch.sparse_coo, torch.sparse_csr], ids=["COO", "CSR"])
@pytest.mark.parametrize("radius,shape,diag,upper,relation", CASES)
def test_matches_dense_loops(radius, shape, diag, upper, relation, layout):
    enc = PairwiseEncoder(radius, shape, diag, upper, relation, layout, torch.int32)
    assert enc.offsets == ([(0,) * len(shape)] if diag else []) + _gen_offsets_nd(
        radius, len(shape) - 1, upper, shape[0], relation)
    g = torch.Generator().manual_seed(0)
    values = torch.randn(2, len(enc.offsets), *shape, dtype=torch.float64, generator=g)
    out = enc(values)
    assert out.layout == layout and out.shape == (2, enc.volume_numel, enc.volume_numel)
    for b in range(2):
        ref = dense_reference(values[b], enc.offsets, shape)
        torch.testing.assert_close(out[b].to_dense() if layout == torch.sparse_csr else out.to_dense()[b], ref)
        torch.testing.assert_close(enc(values[b]).to_dense(), ref)
    if layout == torch.sparse_coo:
        assert out.is_coalesced()
        assert torch.equal(out.indices(), out.coalesce().indices())
    else:
        assert out.crow_indices().dtype == torch.int32
        # the pattern is the nonzero pattern of the dense reference (values are nonzero a.s.)
        assert out.values().shape[-1] == int((dense_reference(values[0], enc.offsets, shape) != 0).sum())


@pytest.mark.parametrize("layout", [torch.sparse_coo, torch.sparse_csr], ids=["COO", "CSR"])
def test_gradient_w_r_t_values(layout):
    """d sum(M * G) / d values[k, p] = G[p, p - o_k] where stored, 0 elsewhere."""
    shape = (2, 3, 3)
    enc = PairwiseEncoder(1.5, shape, diag=True, channel_voxel_relation="inter", layout=layout)
    values = torch.randn(len(enc.offsets), *shape, dtype=torch.float64, requires_grad=True)
    G = torch.randn(enc.volume_numel, enc.volume_numel, dtype=torch.float64)
    out = enc(values)
    assert out.layout == layout
    if layout == torch.sparse_coo:   # differentiable: the same tensor as without grad
        assert out.is_coalesced() and torch.equal(out.indices(), enc.indices)
        torch.testing.assert_close(out.values(), enc(values.detach()).values())
    (out.to_sparse_coo() * G).sum().backward() if layout == torch.sparse_csr else torch.sparse.sum(out * G).backward()
    vd = values.detach().clone().requires_grad_()
    (dense_reference(vd, enc.offsets, shape) * G).sum().backward()
    torch.testing.assert_close(values.grad, vd.grad)


@pytest.mark.parametrize("layout", [torch.sparse_coo, torch.sparse_csr], ids=["COO", "CSR"])
def test_batched_output_backpropagates_through_sparse_mm(layout):
    """Batched COO output once failed in backward: "conversion from Sparse to SparseCsr
    ... sparse_dim()!=2" (it was converted from a batched CSR tensor)."""
    from torchsparsegradutils import sparse_mm
    shape = (2, 3, 3)
    enc = PairwiseEncoder(1.5, shape, diag=True, channel_voxel_relation="inter", layout=layout)
    g = torch.Generator().manual_seed(1)
    values = torch.randn(2, len(enc.offsets), *shape, dtype=torch.float64, generator=g, requires_grad=True)
    X = torch.randn(2, enc.volume_numel, 4, dtype=torch.float64, generator=g, requires_grad=True)
    G = torch.randn(2, enc.volume_numel, 4, dtype=torch.float64, generator=g)
    sparse_mm(enc(values), X).backward(G)
    vd, Xd = values.detach().clone().requires_grad_(), X.detach().clone().requires_grad_()
    M = torch.stack([dense_reference(vd[b], enc.offsets, shape) for b in range(2)])
    (M @ Xd).backward(G)
    torch.testing.assert_close(values.grad, vd.grad)
    torch.testing.assert_close(X.grad, Xd.grad)


@pytest.mark.parametrize("radius,shape,diag,upper,relation", CASES)
def test_calc_pairwise_coo_indices_nd(radius, shape, diag, upper, relation):
    idx = calc_pairwise_coo_indices_nd(radius, shape, diag, upper, relation, dtype=torch.int32)
    sites = list(itertools.product(*[range(s) for s in shape]))
    lin = {p: i for i, p in enumerate(sites)}
    for o, pairs in idx.items():
        assert pairs.dtype == torch.int32
        expected = [(lin[p], lin[tuple(a - b for a, b in zip(p, o))]) for p in sites
                    if tuple(a - b for a, b in zip(p, o)) in lin]
        assert sorted(map(tuple, pairs.t().tolist())) == sorted(expected)


def test_to_device_moves_the_pattern_and_errors():
    enc = PairwiseEncoder(1.0, (2, 3, 3), layout=torch.sparse_csr)
    assert enc.to("cpu").device == torch.device("cpu") and enc.csr_permutation is enc.value_index
    with pytest.raises(ValueError, match="at least 2 positive integers"):
        PairwiseEncoder(1.0, (3,))
    with pytest.raises(ValueError, match="radius"):
        PairwiseEncoder(0.5, (1, 3))
    with pytest.raises(ValueError, match="indices_dtype"):
        PairwiseEncoder(1.0, (1, 3), indices_dtype=torch.int16)
    with pytest.raises(ValueError, match="layout"):
        PairwiseEncoder(1.0, (1, 3), layout=torch.strided)
    with pytest.raises(ValueError, match="'indep' when number of channels is 1"):
        PairwiseEncoder(1.0, (1, 3), channel_voxel_relation="inter")
    with pytest.raises(ValueError, match="number of offsets"):
        enc(torch.randn(len(enc.offsets) + 1, 2, 3, 3))
    with pytest.raises(ValueError, match="volume shape"):
        enc(torch.randn(len(enc.offsets), 2, 3, 4))
    with pytest.raises(ValueError, match="float32 or torch.float64"):
        enc(torch.randn(len(enc.offsets), 2, 3, 3).half())


def test_deprecated_names():
    import torchsparsegradutils.encoders as encoders
    with pytest.warns(DeprecationWarning, match="calc_pairwise_coo_indices is deprecated"):
        f = encoders.calc_pairwise_coo_indices
    with pytest.warns(DeprecationWarning, match="PairwiseVoxelEncoder is deprecated"):
        old = encoders.PairwiseVoxelEncoder(1.0, (2, 3, 3, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert f(1.0, (2, 3, 3, 3)).keys() == calc_pairwise_coo_indices_nd(1.0, (2, 3, 3, 3)).keys()
        with pytest.raises(ValueError, match="4D"):
            encoders.PairwiseVoxelEncoder(1.0, (2, 3, 3))
    assert old.offsets == PairwiseEncoder(1.0, (2, 3, 3, 3)).offsets
