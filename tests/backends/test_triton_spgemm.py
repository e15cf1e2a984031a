"""sparse @ sparse on the Triton route (_backends/triton/spgemm.py), forced on CPU tensors
under Triton's interpreter, against the C route: the forward (PyTorch's CSR @ CSR:
values, pattern, layout; a cancelling sum still an entry) and the masked-SpGEMM
backward in Triton (gradients at A's and B's stored entries for a dense upstream
gradient, one on the product's pattern, one on another pattern), batches, a
hypersparse COO (kept rows), a hub row and column longer than a block, 16-bit values
(the forward's products in float32), the same bits on every run.  Skipped without
triton (conftest.py's triton_route fixture); `pytest -k triton` selects them."""
import pytest
import torch
from support.operands import seeded, shared_pattern_dense
from support.spgemm import operand, pattern_product

import torchsparsegradutils as tsgu
from torchsparsegradutils import SparseCSR

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float64: dict(rtol=1e-12, atol=1e-12),
       torch.float16: dict(rtol=4e-3, atol=4e-3), torch.bfloat16: dict(rtol=3e-2, atol=3e-2)}


def _pair(n, l, m, batch, dtype, key):
    """(DA, DB): A's row 1 and B's column 0 full (longer than a block of entries)."""
    gen = seeded("triton_spgemm", n, l, m, batch, str(dtype), key)
    DA = shared_pattern_dense(batch or 1, n, l, int(0.3 * n * l), torch.float64, gen)
    DB = shared_pattern_dense(batch or 1, l, m, int(0.3 * l * m), torch.float64, gen, empty_rows=False)
    DA[:, 1] = torch.randn(l, generator=gen, dtype=torch.float64)
    DB[:, :, 0] = torch.randn(l, generator=gen, dtype=torch.float64)
    if not batch:
        DA, DB = DA[0], DB[0]
    return DA.to(dtype), DB.to(dtype)


def _values(C):
    """A product's (index arrays..., values), whatever its layout."""
    if isinstance(C, SparseCSR):
        return [C.crow_indices, C.col_indices, C.values]
    if C.layout == torch.sparse_csr:
        return [C.crow_indices(), C.col_indices(), C.values()]
    return [C._indices(), C._values()]


def _run(route, DA, DB, la, lb, upstream="dense"):
    """C route and Triton route: C's arrays and the gradients of (C * W).sum() w.r.t.
    A's and B's leaf values, W dense or on a pattern."""
    gen = seeded("triton_spgemm_W", tuple(DA.shape), la, lb, upstream)
    W = torch.randn(*DA.shape[:-1], DB.shape[-1], generator=gen, dtype=torch.float64).to(DA.dtype)
    if upstream == "product_pattern":
        W = W * pattern_product(DA.double(), DB.double()).to(W.dtype)
    elif upstream == "other_pattern":
        W = W * (torch.rand(W.shape, generator=gen) < 0.4).to(W.dtype)
    results = []
    for on in (False, True):
        route(on)
        A, va = operand(DA, la)
        B, vb = operand(DB, lb)
        C = tsgu.sparse_mm(A, B)
        if isinstance(C, SparseCSR):
            (C.to_torch().to_dense() * W).sum().backward()
        elif upstream == "dense":
            torch.autograd.backward(C, W)
        else:
            torch.autograd.backward(C, W.to_sparse() if C.layout == torch.sparse_coo else W.to_sparse_csr())
        results.append([t.detach() for t in _values(C)] + [va.grad, vb.grad])
    route(False)
    return results


def _check(c, t, tol):
    for a, b in zip(c, t):
        if a.is_floating_point():
            torch.testing.assert_close(b, a, **tol)
        else:
            assert torch.equal(a, b)


@pytest.mark.parametrize("upstream", ["dense", "product_pattern", "other_pattern"])
@pytest.mark.parametrize("la, lb", [("coo", "coo"), ("csr", "csr"), ("coo_uncoalesced", "csr")])
def test_triton_spgemm_matches_c(triton_route, la, lb, upstream):
    DA, DB = _pair(9, 20, 8, None, torch.float64, 0)
    c, t = _run(triton_route, DA, DB, la, lb, upstream)
    _check(c, t, TOL[torch.float64])


@pytest.mark.parametrize("la, lb", [("coo", "coo"), ("csr", "csr"), ("SparseCSR", "coo")])
def test_triton_spgemm_batched(triton_route, la, lb):
    DA, DB = _pair(6, 18, 5, 2, torch.float64, 1)
    c, t = _run(triton_route, DA, DB, la, lb)
    _check(c, t, TOL[torch.float64])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_triton_spgemm_dtypes(triton_route, dtype):
    DA, DB = _pair(7, 18, 6, None, dtype, 2)
    c, t = _run(triton_route, DA, DB, "csr", "csr")
    _check(c, t, TOL[dtype])


def test_triton_spgemm_hypersparse_coo(triton_route):
    """A COO A of 2**20 rows and a few entries: multiplied through its kept rows."""
    n = 2 ** 20
    idx = torch.tensor([[0, 0, 5, n - 1], [0, 3, 1, 2]])
    DB = torch.randn(4, 3, generator=seeded("triton_spgemm_hyper"), dtype=torch.float64)
    B0 = DB.to_sparse()
    results = []
    for on in (False, True):
        triton_route(on)
        va = torch.tensor([1.0, -2.0, 0.5, 3.0], dtype=torch.float64, requires_grad=True)
        vb = B0.values().clone().requires_grad_()
        A = tsgu.sparse_coo_tensor(idx, va, (n, 4), is_coalesced=True)
        C = tsgu.sparse_mm(A, tsgu.sparse_coo_tensor(B0.indices(), vb, B0.shape, is_coalesced=True))
        torch.autograd.backward(C, C.detach() * 2)
        results.append([C._indices(), C._values().detach(), va.grad, vb.grad])
    triton_route(False)
    _check(*results, TOL[torch.float64])


def test_triton_spgemm_cancelling_sum_is_an_entry(triton_route):
    triton_route(True)
    A = torch.sparse_coo_tensor(torch.tensor([[0, 0], [0, 1]]), torch.tensor([1.0, -1.0]), (1, 2)).coalesce()
    B = torch.sparse_coo_tensor(torch.tensor([[0, 1], [0, 0]]), torch.tensor([1.0, 1.0]), (2, 1)).coalesce()
    C = tsgu.sparse_mm(A, B)
    assert C._nnz() == 1 and C._values().item() == 0


def test_triton_spgemm_gradients_same_bits(triton_route):
    DA, DB = _pair(8, 20, 7, None, torch.float32, 3)
    triton_route(True)
    runs = []
    for _ in range(2):
        A, va = operand(DA, "csr")
        B, vb = operand(DB, "csr")
        torch.autograd.backward(tsgu.sparse_mm(A, B), torch.ones(8, 7).to_sparse_csr())
        runs.append((va.grad, vb.grad))
    assert all(torch.equal(x, y) for x, y in zip(*runs))
