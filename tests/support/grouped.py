"""gather_mm's and segment_mm's operands, looped reference and shared checks."""
import pytest
import torch

HAS_CUDA = torch.cuda.is_available()
DTYPES = [torch.float32, torch.float64]
TOL = {torch.float32: dict(atol=1e-4, rtol=1e-4), torch.float64: dict(atol=1e-10, rtol=1e-10)}
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
