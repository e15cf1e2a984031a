"""The Triton kernels of the row softmax and log-softmax (single and multi-head (nnz, H)
values) and their gradient, forced on CPU tensors under Triton's interpreter, against
the C route: values and gradients with an empty row and a hub row longer than a block,
batched COO, 16-bit; ±inf against torch.sparse.softmax (a row holding +inf is NaN
throughout, a row of -inf only NaN).  Skipped without triton; `pytest -k triton`."""
import pytest
import torch
from support.operands import HALF_DTYPES, seeded
from support.routes import both_routes

import torchsparsegradutils as tsgu
from torchsparsegradutils import SparseCSR

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"),
              pytest.mark.filterwarnings("ignore::RuntimeWarning")]   # the interpreter's numpy on inf - inf

TOL = {torch.float32: dict(rtol=1e-5, atol=1e-6), torch.float64: dict(rtol=1e-12, atol=1e-12),
       torch.float16: dict(rtol=2e-3, atol=2e-3), torch.bfloat16: dict(rtol=1e-2, atol=1e-2)}


def _pattern(n, m, gen):
    """A CSR pattern (n, m): row 0 empty, row 1 full (a hub), the rest about 40% full."""
    keep = torch.rand(n, m, generator=gen) < 0.4
    keep[0], keep[1] = False, True
    return keep.to(torch.float64).to_sparse_csr()


def _fn(S, log):
    fn = tsgu.sparse_log_softmax if log else tsgu.sparse_softmax

    def run(v):
        return fn(SparseCSR(S.crow_indices(), S.col_indices(), v, S.shape), -1).values
    return run


def _check(c, t, tol):
    for a, b in zip(c, t):
        torch.testing.assert_close(b, a, equal_nan=True, **tol)


@pytest.mark.parametrize("dtype,heads", [(torch.float64, 1), (torch.float64, 4), (torch.float32, 1),
                                         (torch.float32, 3)])
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_triton_softmax_matches_c(triton_route, log, dtype, heads):
    gen = seeded("triton_softmax", log, str(dtype), heads)
    S = _pattern(7, 36, gen)
    shape = S.col_indices().shape + ((heads,) if heads > 1 else ())
    v = (torch.randn(shape, generator=gen, dtype=torch.float64) * 3).to(dtype)
    c, t = both_routes(triton_route, _fn(S, log), [v.requires_grad_()])
    _check(c, t, TOL[dtype])


def test_triton_softmax_batched_coo(triton_route):
    gen = seeded("triton_softmax_coo")
    D = torch.randn(2, 5, 20, generator=gen, dtype=torch.float64) * (torch.rand(2, 5, 20, generator=gen) < 0.5)
    D[:, 0] = 0
    A = D.to_sparse().coalesce()

    def run(v):
        return tsgu.sparse_softmax(tsgu.sparse_coo_tensor(A.indices(), v, A.shape), -1)._values()
    c, t = both_routes(triton_route, run, [A.values().requires_grad_()])
    _check(c, t, TOL[torch.float64])


@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_triton_softmax_16bit(triton_route, dtype):
    gen = seeded("triton_softmax_half", str(dtype))
    S = _pattern(6, 30, gen)
    v = torch.randn(S.col_indices().shape + (2,), generator=gen).to(dtype)
    c, t = both_routes(triton_route, _fn(S, False), [v.requires_grad_()])
    _check(c, t, TOL[dtype])


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_triton_softmax_infinities_like_torch(triton_route, log):
    """Row 1 holds +inf (NaN throughout), row 2 only -inf (NaN), row 3 a -inf beside
    finite values (0, log: -inf), row 4 finite: as torch.sparse.softmax gives them."""
    inf = float("inf")
    idx = torch.tensor([[1, 1, 1, 2, 2, 3, 3, 3, 4, 4], [0, 2, 5, 1, 3, 0, 1, 4, 2, 5]])
    v = torch.tensor([1.0, inf, -2.0, -inf, -inf, -inf, 0.5, 2.0, 3.0, -1.0], dtype=torch.float64)
    A = torch.sparse_coo_tensor(idx, v, (5, 6)).coalesce()
    want = (torch.sparse.log_softmax if log else torch.sparse.softmax)(A, 1)._values()
    triton_route(True)
    got = (tsgu.sparse_log_softmax if log else tsgu.sparse_softmax)(A, -1)._values()
    torch.testing.assert_close(got, want, equal_nan=True, rtol=1e-12, atol=0)


def test_triton_softmax_coo_leaf_gradient_flagged_coalesced(triton_route):
    """On the Triton route too a COO leaf's gradient comes back flagged coalesced (the
    CUDA failure of test_sparse_softmax.test_cuda_matches_cpu[coo]): A.grad.values() works
    and equals the C route's."""
    gen = seeded("triton_softmax_flag")
    A = (torch.randn(2, 5, 8, generator=gen, dtype=torch.float64) * (torch.rand(2, 5, 8, generator=gen) < 0.5)
         ).to_sparse().coalesce()
    grads = []
    for on in (False, True):
        triton_route(on)
        leaf = A.detach().requires_grad_()
        (tsgu.sparse_log_softmax(leaf, -1).values() ** 2).sum().backward()
        assert leaf.grad.is_coalesced()
        grads.append(leaf.grad.values())
    torch.testing.assert_close(grads[1], grads[0], **TOL[torch.float64])
