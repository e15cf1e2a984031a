"""The CPU structure cache of COO index arrays that are not sorted and unique: reused while
the array holds the same content, never stale after an in-place edit or a new tensor in
old memory, bounded, and keeping no tensor alive (_core/structures.py); and the CUDA
products' plan, whose torch ops run on the CPU too."""
import pytest
import torch
from support.operands import random_dense, seeded, to_sparse

from torchsparsegradutils import sparse_mm


def _unsorted_coo_indices(n, m, nnz, seed):
    """A (2, nnz) index array in random order, a quarter of its positions repeated."""
    g = seeded(f"unsorted{seed}")
    key = torch.randperm(n * m, generator=g)[:nnz]
    q = nnz // 4
    key[:q] = key[q:2 * q]
    key = key[torch.randperm(nnz, generator=g)]
    return torch.stack([key // m, key % m])


def _check_coo_product(idx, vals, B, shape):
    """sparse_mm of torch.sparse_coo_tensor(idx, vals) (vals a leaf) against dense
    autograd: the product and the gradients of vals and B."""
    A = torch.sparse_coo_tensor(idx, vals, shape)
    Bx = B.clone().requires_grad_()
    C = sparse_mm(A, Bx)
    G = torch.randn(C.shape, generator=seeded("G"), dtype=C.dtype)
    gv, gB = torch.autograd.grad(C, (vals, Bx), G)
    D = A.detach().to_dense().requires_grad_()
    Cr = D @ B
    gD, = torch.autograd.grad(Cr, (D,), G)
    torch.testing.assert_close(C, Cr)
    torch.testing.assert_close(gB, D.detach().t() @ G)
    torch.testing.assert_close(gv, gD[tuple(idx)])


@pytest.fixture
def structures():
    """The cache of coalesced structures, emptied before and after the test."""
    from torchsparsegradutils._core.structures import CPU_STRUCTURES
    CPU_STRUCTURES.entries.clear()
    yield CPU_STRUCTURES.entries
    CPU_STRUCTURES.entries.clear()


def test_unflagged_sorted_coo_needs_no_structure(structures):
    """A COO not flagged coalesced whose entries are sorted and unique is read as it
    is: no sort, nothing cached, the gradient on its own indices."""
    D = random_dense((9, 7), torch.float64, seeded("unflagged"), nnz=20)
    A = to_sparse(D, "coo_unflagged").requires_grad_()
    assert not A.is_coalesced()
    B = torch.randn(7, 3, dtype=torch.float64, generator=seeded("B"))
    sparse_mm(A, B).sum().backward()
    assert len(structures) == 0
    assert torch.equal(A.grad._indices(), A._indices())
    torch.testing.assert_close(A.grad.to_dense(), (torch.ones(9, 3, dtype=torch.float64) @ B.t()) * (D != 0))


def test_unsorted_coo_structure_is_reused_and_follows_in_place_edits(structures):
    """An unsorted COO's coalesced structure is derived once and reused while its
    indices hold the same content.  An in-place edit of the user's index tensor
    (which moves no version counter the sparse tensor can see) gets a new one."""
    n, m = 30, 20
    idx = _unsorted_coo_indices(n, m, 120, 0)
    vals = torch.randn(120, dtype=torch.float64, generator=seeded("v"), requires_grad=True)
    B = torch.randn(m, 4, dtype=torch.float64, generator=seeded("B"))
    _check_coo_product(idx, vals, B, (n, m))
    assert len(structures) == 1
    first = next(iter(structures.values()))
    _check_coo_product(idx, vals, B, (n, m))
    assert next(iter(structures.values())) is first                     # reused
    A = torch.sparse_coo_tensor(idx, vals, (n, m))
    version = A._indices()._version
    idx[1, :7] = (idx[1, :7] + 3) % m                                   # edit through the user's tensor
    assert A._indices()._version == version                             # invisible to A's counter
    _check_coo_product(idx, vals, B, (n, m))
    assert len(structures) == 1 and next(iter(structures.values())) is not first
    torch.testing.assert_close(sparse_mm(A, B), A.detach().to_dense() @ B)   # the old A sees the edit too


def test_unsorted_coo_new_tensor_in_old_memory(structures):
    """A new index tensor in the memory of a freed one (same address, shape and
    strides: the cache key) with other content is not served the old structure."""
    n, m, nnz = 25, 25, 80
    buf = torch.empty(2, nnz, dtype=torch.int64)
    B = torch.randn(m, 2, dtype=torch.float64, generator=seeded("B"))
    for seed in range(3):
        buf.copy_(_unsorted_coo_indices(n, m, nnz, seed))
        idx = buf.view(2, nnz)                 # a new tensor object each time, same memory
        vals = torch.randn(nnz, dtype=torch.float64, generator=seeded(f"v{seed}"), requires_grad=True)
        _check_coo_product(idx, vals, B, (n, m))
        del idx
    assert len(structures) == 1


def test_malformed_unsorted_coo_still_raises_with_a_structure_cached(structures):
    """A cached structure never stands in for the checks: an index array out of
    range raises, whether it is another tensor or the cached one edited in place."""
    n, m = 12, 10
    idx = _unsorted_coo_indices(n, m, 40, 1)
    vals = torch.randn(40, dtype=torch.float64)
    B = torch.randn(m, 2, dtype=torch.float64)
    sparse_mm(torch.sparse_coo_tensor(idx, vals, (n, m)), B)
    assert len(structures) == 1
    bad = idx.clone()
    bad[1, 5] = m                                                       # column out of range
    with pytest.raises(ValueError, match="malformed sparse matrix"):
        sparse_mm(torch.sparse_coo_tensor(bad, vals, (n, m), check_invariants=False), B)
    A = torch.sparse_coo_tensor(idx, vals, (n, m))
    idx[0, 3] = -1                                                      # the cached array, edited
    with pytest.raises(ValueError, match="malformed sparse matrix"):
        sparse_mm(A, B)
    idx[0, 3] = n
    with pytest.raises(ValueError, match="malformed sparse matrix"):
        sparse_mm(A, B)


def test_structure_cache_keeps_nothing_alive_and_stays_bounded(structures):
    """The cache holds private tensors only: the user's index tensor and sparse tensor
    die when the user drops them, the entry goes at the next look-up, and no more
    than _MAX_STRUCTURES entries are ever kept."""
    import gc
    import weakref

    from torchsparsegradutils._core.structures import CPU_STRUCTURES
    n, m = 20, 20
    B = torch.randn(m, 2, dtype=torch.float64)
    idx = _unsorted_coo_indices(n, m, 50, 2)
    A = torch.sparse_coo_tensor(idx, torch.randn(50, dtype=torch.float64), (n, m))
    sparse_mm(A, B)
    refs = [weakref.ref(idx), weakref.ref(A)]
    del idx, A
    gc.collect()
    assert all(r() is None for r in refs)
    alive = [_unsorted_coo_indices(n, m, 50, 10 + k) for k in range(3 * CPU_STRUCTURES.size)]
    for k, ix in enumerate(alive):
        sparse_mm(torch.sparse_coo_tensor(ix, torch.randn(50, dtype=torch.float64), (n, m)), B)
        assert len(structures) <= CPU_STRUCTURES.size
        assert all(not r.expired() for refs, _ in structures.values() for r in refs)


@pytest.mark.parametrize("itype", [torch.int32, torch.int64])
def test_product_plan(monkeypatch, itype):
    """The CUDA products' plan of global row pointers: the rows past LONG_ROW in pieces
    of at most LONG_ROW, and, where the lengths' standard deviation exceeds ROW_ORDER_CV
    times their mean, every row by decreasing length (ties in row order); None where
    neither."""
    from torchsparsegradutils._core import structures as S
    monkeypatch.setattr(S, "LONG_ROW", 3)
    lengths = [2, 0, 7, 1, 0, 0, 1, 3]                       # mean 1.75, deviation 2.22; longest 7 (3 pieces)
    ptr = torch.tensor([0] + lengths, dtype=itype).cumsum(0).to(itype)
    plan = S._plan(ptr)
    assert plan.long_rows.tolist() == [2] and plan.piece_off.tolist() == [0, 3]
    assert plan.piece_long.tolist() == [0, 0, 0]
    assert plan.order.tolist() == [2, 7, 0, 3, 6, 1, 4, 5]
    monkeypatch.setattr(S, "ROW_ORDER_CV", 1.3)              # 2.22 > 1.3 * 1.75 fails: pieces only
    assert S._plan(ptr).order is None and S._plan(ptr).long_rows.tolist() == [2]
    monkeypatch.setattr(S, "LONG_ROW", 256)                  # neither
    assert S._plan(ptr) is None
    monkeypatch.setattr(S, "ROW_ORDER_CV", 0.0)              # ordered wherever lengths differ ...
    assert S._plan(ptr).order.tolist() == [2, 7, 0, 3, 6, 1, 4, 5] and S._plan(ptr).long_rows.numel() == 0
    for same in ([0, 4, 8, 12], [0], [0, 0, 0]):             # ... which equal ones and no rows never do
        assert S._plan(torch.tensor(same, dtype=itype)) is None
