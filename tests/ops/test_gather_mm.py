"""Tests of gather_mm against a looped PyTorch reference with autograd, and gradcheck.

Reference: out[i] = a[i] @ b[idx_b[i]] row by row in plain PyTorch; gradients
from autograd through that loop.  The reference and checks are in support/grouped.py.
"""
import pytest
import torch

from torchsparsegradutils import _C, gather_mm
from support.grouped import DTYPES, HAS_CUDA, SHAPES, check_against_reference, check_inplace_detected, check_thread_bits, looped_reference, random_operands

# (N, R, D1, D2): widths on and off the 6-row x 2-vector tiles, an N below one tile,
# more relations than rows (empty relations), a single relation
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("itype", [torch.int32, torch.int64], ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_matches_looped_reference(path, dtype, itype, shape):
    N, R, D1, D2 = shape
    a, b, gen = random_operands(N, R, D1, D2, dtype)
    idx = torch.randint(0, R, (N,), generator=gen).to(itype)
    check_against_reference(gather_mm, a, b, idx, idx, dtype)


def test_skewed_and_unused_relations(path):
    a, b, gen = random_operands(300, 6, 12, 24, torch.float64, seed=1)
    idx = torch.where(torch.rand(300, generator=gen) < 0.9, 4, 1)   # relations 0, 2, 3, 5 unused
    check_against_reference(gather_mm, a, b, idx, idx, torch.float64)


def test_no_rows(path):
    a, b, _ = random_operands(0, 3, 4, 5, torch.float64)
    check_against_reference(gather_mm, a, b, torch.zeros(0, dtype=torch.int64), [], torch.float64)


def test_gradcheck(path):
    a, b, gen = random_operands(23, 4, 7, 9, torch.float64, seed=2)
    idx = torch.randint(0, 4, (23,), generator=gen)
    assert torch.autograd.gradcheck(lambda x, y: gather_mm(x, y, idx),
                                    (a.requires_grad_(), b.requires_grad_()))


def test_non_contiguous_operands(path):
    a, b, gen = random_operands(40, 3, 10, 12, torch.float64, seed=3)
    at = a.t().contiguous().t()                   # column-major a
    bt = b.transpose(1, 2).contiguous().transpose(1, 2)
    idx = torch.randint(0, 3, (40,), generator=gen)
    torch.testing.assert_close(gather_mm(at, bt, idx), looped_reference(a, b, idx))
    torch.testing.assert_close(gather_mm(a[::2], b, idx[::2]), looped_reference(a[::2], b, idx[::2]))


def test_gradient_only_where_asked():
    a, b, gen = random_operands(30, 3, 5, 6, torch.float64)
    idx = torch.randint(0, 3, (30,), generator=gen)
    a1 = a.clone().requires_grad_()
    gather_mm(a1, b, idx).sum().backward()
    assert a1.grad is not None and b.grad is None
    b1 = b.clone().requires_grad_()
    gather_mm(a, b1, idx).sum().backward()
    assert b1.grad is not None and a.grad is None


def test_same_bits_for_any_thread_count():
    a, b, gen = random_operands(3000, 5, 40, 36, torch.float32, seed=4)   # above the threading threshold
    check_thread_bits(gather_mm, a, b, torch.randint(0, 5, (3000,), generator=gen))


def test_inplace_edit_detected(path):
    a, b, gen = random_operands(20, 3, 4, 5, torch.float64)
    check_inplace_detected(gather_mm, a, b, torch.randint(0, 3, (20,), generator=gen))


def test_inputs_unchanged():
    a, b, gen = random_operands(50, 4, 6, 7, torch.float32)
    idx = torch.randint(0, 4, (50,), generator=gen, dtype=torch.int32)
    copies = [t.clone() for t in (a, b, idx)]
    gather_mm(a, b, idx)
    for t, c in zip((a, b, idx), copies):
        assert torch.equal(t, c)


def test_errors():
    a, b = torch.randn(4, 3), torch.randn(2, 3, 5)
    idx = torch.tensor([0, 1, 1, 0])
    with pytest.raises(ValueError, match="instances of torch.Tensor"):
        gather_mm(a.numpy(), b, idx)
    with pytest.raises(ValueError, match="unexpected dimensions"):
        gather_mm(a, b[0], idx)
    with pytest.raises(ValueError, match="unexpected dimensions"):
        gather_mm(a, b, idx[:, None])
    with pytest.raises(ValueError, match="Incompatible size"):
        gather_mm(a, torch.randn(2, 4, 5), idx)
    with pytest.raises(ValueError, match="Incompatible size"):
        gather_mm(a, b, idx[:3])
    with pytest.raises(ValueError, match=r"idx_b must lie in \[0, R\)"):
        gather_mm(a, b, torch.tensor([0, 2, 1, 0]))
    with pytest.raises(ValueError, match=r"idx_b must lie in \[0, R\)"):
        gather_mm(a, b, torch.tensor([0, -1, 1, 0]))
    with pytest.raises(ValueError, match="dense"):
        gather_mm(a.to_sparse(), b, idx)
    with pytest.raises(TypeError, match="float32 and float64"):
        gather_mm(a.half(), b.half(), idx)
    with pytest.raises(TypeError, match="same dtype"):
        gather_mm(a, b.double(), idx)
    with pytest.raises(TypeError, match="int32 or int64"):
        gather_mm(a, b, idx.float())
    with pytest.raises(TypeError, match="int32 or int64"):
        gather_mm(a, b, idx.to(torch.int16))


def test_kernels_check_their_indices():
    """Called directly with a bad grouping, the kernels raise instead of reading out of bounds."""
    a, b, out = torch.randn(4, 3), torch.randn(2, 3, 5), torch.empty(4, 5)
    off = torch.tensor([0, 2, 4])
    for bad_off in (torch.tensor([0, 3, 2]), torch.tensor([0, 2, 5]), torch.tensor([1, 2, 4])):
        with pytest.raises(ValueError, match="malformed grouping"):
            _C.grouped_mm(bad_off, None, a, b, out, 1)
        with pytest.raises(ValueError, match="malformed grouping"):
            _C.grouped_mm_tn(bad_off, None, a, out, torch.empty(2, 3, 5), 1)
    for bad_perm in (torch.tensor([0, 1, 2, 4]), torch.tensor([0, -1, 2, 3])):
        with pytest.raises(ValueError, match="malformed grouping"):
            _C.grouped_mm(off, bad_perm, a, b, out, 1)
        with pytest.raises(ValueError, match="malformed grouping"):
            _C.grouped_mm_tn(off, bad_perm, a, out, torch.empty(2, 3, 5), 1)
    with pytest.raises(ValueError, match="malformed grouping"):
        _C.group_rows(torch.tensor([0, 2, 1, 1]), 2, torch.empty(3, dtype=torch.int64),
                      torch.empty(4, dtype=torch.int64))
    with pytest.raises(ValueError, match="shape"):
        _C.grouped_mm(off, None, a, torch.randn(3, 3, 5), out, 1)


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_cuda_matches_cpu():
    a, b, gen = random_operands(300, 6, 12, 24, torch.float64, seed=5)
    idx = torch.randint(0, 6, (300,), generator=gen)
    check_against_reference(lambda x, y, i: gather_mm(x.cuda(), y.cuda(), i.cuda()).cpu(), a, b, idx, idx,
                            torch.float64)
