"""Tests of the sparse helpers in torchsparsegradutils.utils."""
import pytest
import torch

import torchsparsegradutils.utils as U
from torchsparsegradutils.utils import (convert_coo_to_csr, make_spd_sparse, rand_sparse, rand_sparse_tri,
                                        sparse_block_diag, sparse_block_diag_split, sparse_eye, stack_csr)

LAYOUTS = [torch.sparse_coo, torch.sparse_csr]


def test_exports():
    for name in ["rand_sparse", "rand_sparse_tri", "make_spd_sparse", "sparse_eye", "sparse_block_diag",
                 "sparse_block_diag_split", "stack_csr", "convert_coo_to_csr", "linear_cg", "minres",
                 "bicgstab", "lsmr"]:
        assert name in U.__all__ and callable(getattr(U, name))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("size", [(6, 9), (3, 6, 9)])
@pytest.mark.parametrize("itype", [torch.int32, torch.int64])
def test_rand_sparse(layout, size, itype):
    A = rand_sparse(size, 20, layout, indices_dtype=itype, values_dtype=torch.float64)
    assert A.layout == layout and A.shape == size and A.dtype == torch.float64
    D = A.to_dense()
    assert ((D != 0).reshape(-1, size[-2] * size[-1]).sum(1) == 20).all()
    if layout == torch.sparse_csr:
        assert A.crow_indices().dtype == itype
    else:
        assert A.is_coalesced()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_rand_sparse_well_conditioned(layout):
    A = rand_sparse((2, 12, 12), 40, layout, values_dtype=torch.float64, well_conditioned=True, min_diag_value=2.0)
    D = A.to_dense()
    diag = D.diagonal(dim1=-2, dim2=-1)
    assert (diag >= 2.0).all() and (diag > D.abs().sum(-1) - diag).all()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("upper", [True, False])
@pytest.mark.parametrize("strict", [True, False])
def test_rand_sparse_tri(layout, upper, strict):
    n, nnz = 10, 25
    A = rand_sparse_tri((2, n, n), nnz, layout, upper=upper, strict=strict, values_dtype=torch.float64,
                        value_range=(1.0, 2.0))
    D = A.to_dense()
    assert torch.equal(D, D.triu(1 if strict else 0) if upper else D.tril(-1 if strict else 0))
    assert ((D != 0).reshape(2, -1).sum(1) == nnz).all()
    diag = D.diagonal(dim1=-2, dim2=-1)
    assert (diag == 0).all() if strict else (diag != 0).all()


def test_seeded_draws_match_release():
    """Small draws follow the 0.2.7 release's sequence.  The expected matrices are
    the release's own output for these seeds (recorded from 0.2.7)."""
    import random
    random.seed(3), torch.manual_seed(3)
    T = rand_sparse_tri((4, 4), 3, torch.sparse_coo, upper=True, strict=True, values_dtype=torch.float64)
    expected_T = torch.zeros(4, 4, dtype=torch.float64)
    expected_T[0, 1], expected_T[0, 2], expected_T[2, 3] = 0.77291494432858432, 0.28674022672130695, 0.03410819565052048
    assert torch.equal(T.to_dense(), expected_T)
    random.seed(3), torch.manual_seed(3)
    A = rand_sparse((3, 4), 5, torch.sparse_csr, values_dtype=torch.float64)
    expected_A = torch.zeros(3, 4, dtype=torch.float64)
    expected_A[0, 1], expected_A[1, 2], expected_A[1, 3] = 0.03410819565052048, 0.28674022672130695, 0.75536987164589886
    expected_A[2, 0], expected_A[2, 1] = 0.17492702928129467, 0.77291494432858432
    assert torch.equal(A.to_dense(), expected_A)


@pytest.mark.parametrize("batch", [1, 300])  # 300 * 250 entries: past SEEDED_DRAW_LIMIT, the vectorised draw
def test_rand_sparse_tri_well_conditioned_diagonal(batch):
    from torchsparsegradutils.utils.random_sparse import SEEDED_DRAW_LIMIT
    assert (batch * 250 > SEEDED_DRAW_LIMIT) == (batch > 1)
    A = rand_sparse_tri((batch, 40, 40), 250, torch.sparse_csr, upper=False, well_conditioned=True,
                        min_diag_value=2.0, values_dtype=torch.float64, value_range=(-1.0, 1.0))
    D = A.to_dense()
    diag = D.diagonal(dim1=-2, dim2=-1)
    assert ((diag >= 2.0) & (diag < 2.5)).all()
    off = D.tril(-1)
    assert ((off >= -1.0) & (off < 1.0)).all() and torch.equal(D.triu(1), torch.zeros_like(D))
    assert ((D != 0).reshape(batch, -1).sum(1) == 250).all()


def test_rand_errors():
    with pytest.raises(ValueError, match="Unsupported layout"):
        rand_sparse((3, 3), 2, torch.strided)
    with pytest.raises(ValueError, match="nnz must be in"):
        rand_sparse((3, 3), 10)
    with pytest.raises(ValueError, match="strict=True: nnz must be in"):
        rand_sparse_tri((4, 4), 7, strict=True)
    with pytest.raises(ValueError, match="strict=False: nnz must be in"):
        rand_sparse_tri((4, 4), 2)
    with pytest.raises(ValueError, match="square"):
        rand_sparse_tri((4, 5), 4)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("nz", [None, 10])
def test_make_spd_sparse(layout, nz):
    A, D = make_spd_sparse(20, layout, torch.float64, torch.int32, torch.device("cpu"), sparsity_ratio=0.8, nz=nz)
    assert A.layout == layout and A.shape == (20, 20)
    torch.testing.assert_close(A.to_dense(), D)
    torch.testing.assert_close(D, D.T)
    assert torch.linalg.eigvalsh(D).min() > 0
    if layout == torch.sparse_csr:
        assert A.crow_indices().dtype == torch.int32


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("size", [(4, 4), (3, 4, 4)])
def test_sparse_eye(layout, size):
    I = sparse_eye(size, layout=layout, values_dtype=torch.float32, requires_grad=True)
    assert I.layout == layout and I.requires_grad and I.dtype == torch.float32
    torch.testing.assert_close(I.detach().to_dense(), torch.eye(4).expand(size))
    with pytest.raises(ValueError, match="square"):
        sparse_eye((3, 4), layout=layout)
    with pytest.raises(ValueError, match="values_dtype"):
        sparse_eye((3, 3), values_dtype=torch.int32)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_block_diag_roundtrip(layout):
    parts = [rand_sparse(s, k, layout, values_dtype=torch.float64) for s, k in [((3, 4), 5), ((2, 2), 0), ((5, 1), 3)]]
    BD = sparse_block_diag(*parts)
    assert BD.layout == layout
    torch.testing.assert_close(BD.to_dense(), torch.block_diag(*[p.to_dense() for p in parts]))
    back = sparse_block_diag_split(BD, *[p.shape for p in parts])
    for p, q in zip(parts, back):
        assert q.layout == layout
        torch.testing.assert_close(p.to_dense(), q.to_dense())


def test_block_diag_errors():
    with pytest.raises(ValueError, match="same layout"):
        sparse_block_diag(torch.eye(2).to_sparse(), torch.eye(2).to_sparse_csr())
    with pytest.raises(ValueError, match="at least one"):
        sparse_block_diag()
    with pytest.raises(ValueError, match="do not add up"):
        sparse_block_diag_split(torch.eye(4).to_sparse(), (2, 2), (1, 1))
    with pytest.raises(ValueError, match="outside the diagonal blocks"):
        sparse_block_diag_split(torch.ones(4, 4).to_sparse(), (2, 2), (2, 2))


def test_stack_csr_and_convert():
    As = [rand_sparse((5, 6), 7, torch.sparse_csr, values_dtype=torch.float64) for _ in range(3)]
    S = stack_csr(As)
    assert S.shape == (3, 5, 6) and S.crow_indices().shape == (3, 6)
    torch.testing.assert_close(S.to_dense(), torch.stack([a.to_dense() for a in As]))
    with pytest.raises(TypeError, match="list"):
        stack_csr(As[0])
    with pytest.raises(ValueError, match="empty"):
        stack_csr([])
    with pytest.raises(ValueError, match="same shape"):
        stack_csr([As[0], torch.eye(3).to_sparse_csr()])
    C = rand_sparse((3, 5, 6), 7, torch.sparse_coo, values_dtype=torch.float64)
    for X in (C, C[0]):
        R = convert_coo_to_csr(X)
        assert R.layout == torch.sparse_csr
        torch.testing.assert_close(R.to_dense(), X.to_dense())
    with pytest.raises(ValueError, match="COO"):
        convert_coo_to_csr(torch.eye(3))


def test_random_generators_use_memory_of_nnz_not_n_times_m():
    """rand_sparse / rand_sparse_tri on a 10^6 x 10^6 pattern: O(nnz) memory, distinct entries."""
    from torchsparsegradutils.utils import rand_sparse, rand_sparse_tri
    A = rand_sparse((1_000_000, 1_000_000), 20_000)
    idx = A.coalesce().indices()
    assert idx.shape[1] == 20_000 and A._nnz() == 20_000
    T = rand_sparse_tri((1_000_000, 1_000_000), 1_020_000, upper=False)
    i, j = T.coalesce().indices()
    assert T._nnz() == 1_020_000 and bool((j <= i).all())
    assert int((i == j).sum()) == 1_000_000          # the full diagonal, as strict=False promises


def test_strict_lower_position_matches_enumeration():
    from torchsparsegradutils.utils.random_sparse import _strict_lower_position
    n = 700
    i, j = _strict_lower_position(torch.arange(n * (n - 1) // 2))
    ref = torch.tril_indices(n, n, offset=-1)
    assert torch.equal(i, ref[0]) and torch.equal(j, ref[1])
    t = torch.tensor([10**12 - 1, 4 * 10**11 + 7])
    i, j = _strict_lower_position(t)
    assert torch.equal(i * (i - 1) // 2 + j, t) and bool(((j >= 0) & (j < i)).all())


def test_release_names_exported():
    for name in ["convert_coo_to_csr_indices_values", "mean_hotelling_t2_test", "cov_nagao_test",
                 "generate_random_sparse_coo_matrix", "generate_random_sparse_csr_matrix",
                 "generate_random_sparse_strictly_triangular_coo_matrix",
                 "generate_random_sparse_strictly_triangular_csr_matrix",
                 "generate_random_sparse_triangular_coo_matrix", "generate_random_sparse_triangular_csr_matrix"]:
        assert name in U.__all__ and callable(getattr(U, name))


@pytest.mark.parametrize("rows", [2, 3])
def test_sort_coo_indices_against_numpy_lexsort(rows):
    np = pytest.importorskip("numpy")
    from torchsparsegradutils.utils.utils import _sort_coo_indices
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, 4, (rows, 50), generator=g)          # with repeated columns
    sorted_idx, perm = _sort_coo_indices(idx)
    ref = np.lexsort(idx.numpy()[::-1])          # stable; the last key is the primary one
    assert torch.equal(perm, torch.from_numpy(ref)) and torch.equal(sorted_idx, idx[:, perm])
    big = torch.tensor([[2**40, 0, 2**40], [1, 5, 0]])           # no overflow from large indices
    assert _sort_coo_indices(big)[1].tolist() == [1, 2, 0]


@pytest.mark.parametrize("batch", [None, 3])
def test_convert_coo_to_csr_indices_values_against_scipy(batch):
    sp = pytest.importorskip("scipy.sparse")
    from torchsparsegradutils.utils import convert_coo_to_csr_indices_values
    torch.manual_seed(0)
    A = rand_sparse((batch, 7, 5) if batch else (7, 5), 12, values_dtype=torch.float64)
    shuffle = torch.randperm(A._nnz())
    idx, vals = A.indices()[:, shuffle], A.values()[shuffle]
    crow, col, v = convert_coo_to_csr_indices_values(idx, 7, vals)
    _, _, perm = convert_coo_to_csr_indices_values(idx, 7)
    torch.testing.assert_close(vals[perm].reshape(v.shape), v)
    items = range(batch) if batch else [None]
    for b in items:
        sel = idx[0] == b if batch else slice(None)
        r, c = idx[-2][sel].numpy(), idx[-1][sel].numpy()
        S = sp.coo_matrix((vals[sel].numpy(), (r, c)), shape=(7, 5)).tocsr()
        S.sort_indices()
        k = b if batch else slice(None)
        assert crow[k].tolist() == S.indptr.tolist() and col[k].tolist() == S.indices.tolist()
        assert v[k].tolist() == S.data.tolist()
    with pytest.raises(ValueError, match="num_rows"):
        convert_coo_to_csr_indices_values(idx, 3)


def test_compress_and_decompress_rows():
    from torchsparsegradutils.utils.utils import _compress_row_indices, _demcompress_crow_indices
    rows = torch.tensor([0, 0, 2, 2, 2, 4], dtype=torch.int32)
    crow = _compress_row_indices(rows, 5)
    assert crow.tolist() == [0, 2, 2, 5, 5, 6] and crow.dtype == torch.int32
    assert torch.equal(_demcompress_crow_indices(crow, 5), rows)
    with pytest.raises(ValueError, match="row_indices must lie"):
        _compress_row_indices(rows, 4)
    with pytest.raises(TypeError, match="int32 or int64"):
        _compress_row_indices(rows.float(), 5)


def test_generator_names_and_checks():
    from torchsparsegradutils.utils import random_sparse as R
    L = R.generate_random_sparse_triangular_csr_matrix((2, 6, 6), 10, upper=False, indices_dtype=torch.int32)
    D = L.to_dense()
    assert torch.equal(D, D.tril()) and (D.diagonal(dim1=-2, dim2=-1) != 0).all()
    S = R.generate_random_sparse_strictly_triangular_coo_matrix((6, 6), 7, value_range=(2.0, 3.0)).to_dense()
    assert torch.equal(S, S.triu(1)) and ((S == 0) | ((S >= 2) & (S < 3))).all()
    with pytest.raises(ValueError, match="indices_dtype"):
        R.generate_random_sparse_coo_matrix((4, 4), 3, indices_dtype=torch.int16)
    # well_conditioned applies to square matrices only; a non-square one is drawn as usual
    A = rand_sparse((4, 6), 10, well_conditioned=True)
    assert A.shape == (4, 6) and A._nnz() == 10
