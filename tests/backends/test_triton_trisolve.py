"""The sync-free Triton triangular solve (_backends/triton/trisolve.py), forced on
CPU tensors under Triton's interpreter, against the C route: values and gradients
(A's values and B) for upper and lower, unit and stored diagonals, transposed, batched
(CSR and COO), a hub row longer than a block of entries and a chain of dependencies
(a row waits for the one before), NaN in B (stored canonical, never the sentinel the
kernel waits on); the plan made once per structure (cached), the kernel's
errors, and SparseCSR's custom op under torch.compile(fullgraph=True).  Skipped
without triton (conftest.py's triton_route fixture); `pytest -k triton` selects them."""
import importlib

import pytest
import torch
from support.operands import seeded, tri_dense
from support.routes import both_routes

import torchsparsegradutils as tsgu
from torchsparsegradutils._core import structures

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

TOL = {torch.float32: dict(rtol=1e-4, atol=1e-5), torch.float64: dict(rtol=1e-10, atol=1e-11)}


def _tri(batch, n, upper, unit, dtype, gen, hub=True):
    """(batch, n, n) triangular (one pattern for the batch), with a hub: the row (upper:
    0, lower: n-1) holding every entry on its side, more than a block."""
    D = tri_dense(batch, n, upper, unit, dtype, gen, density=0.3)
    if hub:
        r = 0 if upper else n - 1
        full = torch.randn(batch, n, generator=gen, dtype=dtype) * 0.3
        side = torch.arange(n) > r if upper else torch.arange(n) < r
        D[:, r] = torch.where(side, full, D[:, r])
    return D


def _solve_fn(D, layout, upper, unit, transpose):
    """fn(values, B) solving with A built on D's pattern from the leaf values."""
    if layout == "csr":
        S = (D if D.shape[0] > 1 else D[0]).to_sparse_csr()
        crow, col = S.crow_indices(), S.col_indices()

        def fn(v, B):
            return tsgu.sparse_triangular_solve(tsgu.sparse_csr_tensor(crow, col, v, S.shape), B, upper=upper,
                                                unitriangular=unit, transpose=transpose)
    else:
        S = (D if D.shape[0] > 1 else D[0]).to_sparse().coalesce()

        def fn(v, B):
            return tsgu.sparse_triangular_solve(tsgu.sparse_coo_tensor(S.indices(), v, S.shape, is_coalesced=True),
                                                B, upper=upper, unitriangular=unit, transpose=transpose)
    return S, fn


def _check(c, t, tol):
    for a, b in zip(c, t):
        torch.testing.assert_close(b, a, **tol)


@pytest.mark.parametrize("transpose", [False, True], ids=["plain", "transposed"])
@pytest.mark.parametrize("unit", [False, True], ids=["diag", "unit"])
@pytest.mark.parametrize("upper", [False, True], ids=["lower", "upper"])
def test_triton_trisolve_matches_c(triton_route, upper, unit, transpose):
    gen = seeded("triton_trisolve", upper, unit, transpose)
    D = _tri(1, 24, upper, unit, torch.float64, gen)
    S, fn = _solve_fn(D, "csr", upper, unit, transpose)
    B = torch.randn(24, 3, generator=gen, dtype=torch.float64)
    c, t = both_routes(triton_route, fn, [S.values().requires_grad_(), B.requires_grad_()])
    _check(c, t, TOL[torch.float64])


@pytest.mark.parametrize("layout", ["csr", "coo"])
def test_triton_trisolve_batched(triton_route, layout):
    gen = seeded("triton_trisolve_batched", layout)
    D = _tri(2, 12, False, False, torch.float64, gen)
    S, fn = _solve_fn(D, layout, False, False, layout == "coo")
    B = torch.randn(2, 12, 5, generator=gen, dtype=torch.float64)
    c, t = both_routes(triton_route, fn, [S.values().requires_grad_(), B.requires_grad_()])
    _check(c, t, TOL[torch.float64])


@pytest.mark.parametrize("transpose", [False, True], ids=["plain", "transposed"])
def test_triton_trisolve_float32_chain(triton_route, transpose):
    """A bidiagonal A: every row waits for the one before, one right-hand side."""
    gen = seeded("triton_trisolve_chain", transpose)
    n = 10
    D = torch.diag(2 + torch.rand(n, generator=gen)) + torch.diag(torch.randn(n - 1, generator=gen), -1)
    S, fn = _solve_fn(D[None], "csr", False, False, transpose)
    B = torch.randn(n, 1, generator=gen)
    c, t = both_routes(triton_route, fn, [S.values().requires_grad_(), B.requires_grad_()])
    _check(c, t, TOL[torch.float32])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_triton_trisolve_nan_in_b(triton_route, dtype):
    """A NaN in B, also one with the bits of the kernel's sentinel, gives the C route's
    NaN rows (and the rows after them, which read them)."""
    tri = importlib.import_module("torchsparsegradutils._backends.triton.trisolve")
    gen = seeded("triton_trisolve_nan", str(dtype))
    D = _tri(1, 12, False, False, torch.float64, gen, hub=False)[0].to(dtype)
    S, fn = _solve_fn(D[None], "csr", False, False, False)
    B = torch.randn(12, 3, generator=gen, dtype=dtype)
    itype, bits = tri._SENTINEL[dtype]
    B[2, 0] = torch.tensor(bits, dtype=itype).view(dtype)
    B[7, 1] = float("nan")
    c, t = both_routes(triton_route, fn, [S.values(), B])
    assert bool(c[0].isnan().any())
    assert torch.equal(c[0].isnan(), t[0].isnan())
    assert not bool((t[0].view(itype) == bits).any())
    torch.testing.assert_close(t[0], c[0], equal_nan=True, **TOL[dtype])


def test_triton_trisolve_plan_made_once(triton_route, monkeypatch):
    """The plan (structure checks, the transpose's pattern) of one structure and flags is
    made once, whatever its values; a new structure, or the other flags (the backward's
    transposed solve), makes another."""
    tri = importlib.import_module("torchsparsegradutils._backends.triton.trisolve")   # the module, not the op
    calls = []
    real = tri._plan
    monkeypatch.setattr(tri, "_plan", lambda *a: calls.append(1) or real(*a))
    monkeypatch.setattr(structures, "DERIVED", structures._Cache(16))
    gen = seeded("triton_trisolve_cache")
    S = _tri(1, 9, True, False, torch.float64, gen)[0].to_sparse_csr()
    B = torch.randn(9, 2, generator=gen, dtype=torch.float64)
    triton_route(True)
    for k in range(3):
        v = (S.values() * (k + 1)).requires_grad_()
        A = tsgu.sparse_csr_tensor(S.crow_indices(), S.col_indices(), v, S.shape)
        tsgu.sparse_triangular_solve(A, B, upper=True).sum().backward()
    assert len(calls) == 2                      # the forward's solve and the backward's transposed one
    A = tsgu.sparse_csr_tensor(S.crow_indices().clone(), S.col_indices().clone(), S.values(), S.shape)
    tsgu.sparse_triangular_solve(A, B, upper=True)
    assert len(calls) == 3


@pytest.mark.parametrize("crow, col, vals, kwargs, match", [
    ([0, 1, 2], [0, 1], [0.0, 1.0], {}, "diagonal entry is zero or not stored"),
    ([0, 1, 2], [1, 1], [1.0, 1.0], {}, "diagonal entry is zero or not stored"),
    ([0, 1, 3], [0, 0, 1], [1.0, 2.0, 1.0], {"upper": True}, "not triangular on the requested side"),
    ([0, 2, 3], [0, 1, 1], [1.0, 2.0, 1.0], {"unitriangular": True}, "unitriangular=True, but A stores"),
])
def test_triton_trisolve_errors(triton_route, crow, col, vals, kwargs, match):
    triton_route(True)
    A = torch.sparse_csr_tensor(torch.tensor(crow), torch.tensor(col), torch.tensor(vals), (2, 2))
    with pytest.raises(ValueError, match=match):
        tsgu.sparse_triangular_solve(A, torch.ones(2, 1), **kwargs)


def test_triton_trisolve_compiled_sparse_csr(triton_route):
    """SparseCSR through the custom op tsgu::trisolve under torch.compile(fullgraph=True):
    outputs and gradients as the C route's."""
    gen = seeded("triton_trisolve_compile")
    S = _tri(1, 10, False, False, torch.float64, gen)[0].to_sparse_csr()
    crow, col, shape = S.crow_indices().clone(), S.col_indices().clone(), tuple(S.shape)

    def f(v, B):
        return tsgu.sparse_triangular_solve(tsgu.SparseCSR(crow, col, v, shape), B, upper=False, transpose=True)
    B = torch.randn(10, 2, generator=gen, dtype=torch.float64)
    torch._dynamo.reset()
    try:
        c, t = both_routes(triton_route, torch.compile(f, fullgraph=True, backend="aot_eager"),
                           [S.values().requires_grad_(), B.requires_grad_()])
    finally:
        torch._dynamo.reset()
    _check(c, t, TOL[torch.float64])
