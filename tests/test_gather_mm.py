"""Tests of gather_mm against a looped PyTorch reference with autograd, and gradcheck.

Reference: out[i] = a[i] @ b[idx_b[i]] row by row in plain PyTorch; gradients
from autograd through that loop.  The helpers here serve test_segment_mm too.
"""
import pytest
import torch

from torchsparsegradutils import _C, gather_mm

HAS_CUDA = torch.cuda.is_available()
DTYPES = [torch.float32, torch.float64]
TOL = {torch.float32: dict(atol=1e-4, rtol=1e-4), torch.float64: dict(atol=1e-10, rtol=1e-10)}

# (N, R, D1, D2): widths on and off the 6-row x 2-vector tiles, an N below one tile,
# more relations than rows (empty relations), a single relation
SHAPES = [(37, 5, 7, 10), (200, 8, 19, 37), (64, 3, 16, 32), (5, 9, 6, 16), (50, 1, 13, 1), (120, 4, 1, 20)]


def looped_reference(a, b, rel):
    """out[i] = a[i] @ b[rel[i]], one row at a time (autograd-differentiable)."""
    rows = [a[i:i + 1] @ b[int(rel[i])] for i in range(a.shape[0])]
    return torch.cat(rows) if rows else a[:0] @ b.sum(0)   # empty, still on the graph


def check_against_reference(op, a, b, groups, rel, dtype):
    """op(a, b, groups) and its gradients equal the looped reference's."""
    a1, b1 = a.clone().requires_grad_(), b.clone().requires_grad_()
    a2, b2 = a.clone().requires_grad_(), b.clone().requires_grad_()
    out = op(a1, b1, groups)
    ref = looped_reference(a2, b2, rel)
    torch.testing.assert_close(out, ref, **TOL[dtype])
    G = torch.randn_like(ref)
    out.backward(G)
    ref.backward(G)
    torch.testing.assert_close(a1.grad, a2.grad, **TOL[dtype])
    torch.testing.assert_close(b1.grad, b2.grad, **TOL[dtype])


def random_operands(N, R, D1, D2, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(N, D1, generator=gen, dtype=dtype), torch.randn(R, D1, D2, generator=gen, dtype=dtype),
            gen)


def check_thread_bits(op, a, b, groups):
    """Forward and both gradients have the same bits on 1, 2 and 5 threads."""
    results = []
    old = torch.get_num_threads()
    try:
        for nt in (1, 2, 5):
            torch.set_num_threads(nt)
            a1, b1 = a.clone().requires_grad_(), b.clone().requires_grad_()
            out = op(a1, b1, groups)
            out.backward(torch.ones_like(out) + torch.arange(out.numel(), dtype=out.dtype).reshape(out.shape) / 7)
            results.append((out, a1.grad, b1.grad))
    finally:
        torch.set_num_threads(old)
    for other in results[1:]:
        for x, y in zip(results[0], other):
            assert torch.equal(x, y)


def check_inplace_detected(op, a, b, groups):
    """An in-place edit of a or b between forward and backward raises autograd's error."""
    for edit in ("a", "b"):
        a1, b1 = a.clone().requires_grad_(), b.clone().requires_grad_()
        x, y = a1 * 1, b1 * 1
        out = op(x, y, groups)
        with torch.no_grad():
            (x if edit == "a" else y).add_(1)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            out.sum().backward()


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
