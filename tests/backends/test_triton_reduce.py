"""The Triton kernels of sparse_mm's products (sum, mean) and extremes (amax, amin, with
their arg-routed backward), forced on CPU tensors under Triton's interpreter, against
the C route: values and gradients, with an empty row, a hub row longer than a block of
entries, batches and COO, ties (bit for bit: the first of a tie, as the C kernel),
±inf and NaN products, and 16-bit values.  Skipped without triton (conftest's
triton_route); `pytest -k triton` selects them."""
import pytest
import torch
from support.operands import HALF_DTYPES, seeded
from support.routes import both_routes

import torchsparsegradutils as tsgu

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

TOL = {torch.float32: dict(rtol=1e-5, atol=1e-6), torch.float64: dict(rtol=1e-12, atol=1e-12),
       torch.float16: dict(rtol=2e-3, atol=2e-3), torch.bfloat16: dict(rtol=1e-2, atol=1e-2)}


def _dense(n, m, dtype, gen, batch=None, ints=False):
    """(n, m) (or (batch, n, m)) with row 0 empty, row 1 full (a hub: more entries than a
    block), the rest about a third full; ints: values in {-2..2} \\ {0} (ties everywhere)."""
    shape = (batch, n, m) if batch else (n, m)
    vals = torch.randint(-2, 3, shape, generator=gen).to(dtype) if ints else torch.randn(shape, generator=gen,
                                                                                         dtype=dtype)
    vals = torch.where(vals == 0, torch.ones_like(vals), vals)
    keep = torch.rand(shape, generator=gen) < 0.35
    keep[..., 0, :], keep[..., 1, :] = False, True
    return vals * keep


def _run(route, D, B, reduce, layout="csr"):
    """C route and Triton route results of sparse_mm(A, B, reduce) and its gradients
    w.r.t. A's values and B."""
    if layout == "csr":
        S = D.to_sparse_csr()
        pattern = (S.crow_indices(), S.col_indices())

        def fn(v, X):
            return tsgu.sparse_mm(tsgu.sparse_csr_tensor(*pattern, v, D.shape), X, reduce)
    else:
        S = D.to_sparse().coalesce()
        pattern = S.indices()

        def fn(v, X):
            return tsgu.sparse_mm(tsgu.sparse_coo_tensor(pattern, v, D.shape), X, reduce)
    return both_routes(route, fn, [S.values().requires_grad_(), B.requires_grad_()])


def _assert_same(c, t, tol, exact=False):
    """exact: the outputs bit for bit (NaN where NaN), the gradients (sums in another
    order) to tol, or also exactly where tol is None."""
    for k, (a, b) in enumerate(zip(c, t)):
        if exact and (k == 0 or tol is None):
            assert torch.equal(a.nan_to_num(7.0), b.nan_to_num(7.0)) and torch.equal(a.isnan(), b.isnan())
        else:
            torch.testing.assert_close(b, a, equal_nan=True, **tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("reduce", ["sum", "mean", "amax", "amin"])
def test_triton_reduce_matches_c(triton_route, reduce, dtype):
    gen = seeded("triton_reduce", reduce, str(dtype))
    D = _dense(9, 40, dtype, gen)
    B = torch.randn(40, 5, generator=gen, dtype=dtype)
    c, t = _run(triton_route, D, B, reduce)
    _assert_same(c, t, TOL[dtype], exact=reduce in ("amax", "amin"))


@pytest.mark.parametrize("reduce", ["mean", "amax"])
def test_triton_reduce_batched_coo(triton_route, reduce):
    gen = seeded("triton_reduce_batched", reduce)
    D = _dense(6, 20, torch.float64, gen, batch=2)
    B = torch.randn(2, 20, 3, generator=gen, dtype=torch.float64)
    c, t = _run(triton_route, D, B, reduce, layout="coo")
    _assert_same(c, t, TOL[torch.float64])


@pytest.mark.parametrize("reduce", ["amax", "amin"])
def test_triton_reduce_ties_bit_for_bit(triton_route, reduce):
    """Integer values: most rows' products tie; the gradient goes to the first of a tie."""
    gen = seeded("triton_reduce_ties", reduce)
    D = _dense(8, 36, torch.float32, gen, ints=True)
    B = torch.randint(-1, 2, (36, 4), generator=gen).float()
    c, t = _run(triton_route, D, B, reduce)
    _assert_same(c, t, None, exact=True)


@pytest.mark.parametrize("reduce", ["amax", "amin"])
def test_triton_reduce_inf_nan(triton_route, reduce):
    """±inf and NaN in B: a NaN product is taken (the last NaN of a row), a row of
    products that never beat the start value keeps it with no arg (zero gradient)."""
    gen = seeded("triton_reduce_inf", reduce)
    D = _dense(7, 24, torch.float64, gen).abs()
    B = torch.randn(24, 6, generator=gen, dtype=torch.float64)
    B[3, 0], B[5, 1], B[7, 2] = float("inf"), float("-inf"), float("nan")
    B[:, 3] = float("-inf") if reduce == "amax" else float("inf")     # never beats the start value
    B[11, 4] = float("nan")
    c, t = _run(triton_route, D, B, reduce)
    _assert_same(c, t, TOL[torch.float64], exact=True)


@pytest.mark.parametrize("dtype", HALF_DTYPES)
@pytest.mark.parametrize("reduce", ["mean", "amax"])
def test_triton_reduce_16bit(triton_route, reduce, dtype):
    """amax in float16 bit for bit; bfloat16 to a unit in the last place (Triton's
    interpreter truncates float32 to bfloat16 where a GPU rounds to nearest)."""
    gen = seeded("triton_reduce_half", reduce, str(dtype))
    D = _dense(8, 30, torch.float32, gen).to(dtype)
    B = torch.randn(30, 4, generator=gen).to(dtype)
    c, t = _run(triton_route, D, B, reduce)
    _assert_same(c, t, TOL[dtype], exact=reduce == "amax" and dtype == torch.float16)


def test_triton_compiled_fullgraph(triton_route):
    """torch.compile(fullgraph=True) traces the custom ops (their fake implementations)
    and runs the Triton kernels under them: amax and mean of a SparseCSR, with gradients."""
    gen = seeded("triton_reduce_compile")
    S = _dense(6, 20, torch.float64, gen).to_sparse_csr()
    B = torch.randn(20, 3, generator=gen, dtype=torch.float64)
    crow, col, shape = S.crow_indices().clone(), S.col_indices().clone(), tuple(S.shape)   # no sparse S in f

    def f(v, X):
        A = tsgu.SparseCSR(crow, col, v, shape)
        return tsgu.sparse_mm(A, X, "amax") + tsgu.sparse_mm(A, X, "mean")
    torch._dynamo.reset()
    try:
        c, t = both_routes(triton_route, torch.compile(f, fullgraph=True, backend="aot_eager"),
                           [S.values().requires_grad_(), B.requires_grad_()])
    finally:
        torch._dynamo.reset()
    _assert_same(c, t, TOL[torch.float64])


def test_triton_missing_the_package_imports_and_routes_without_it():
    """Without triton the package imports, the CPU route runs, and the Triton route is
    absent (None), forcing it raising ImportError: in a child process where triton
    cannot be imported."""
    import subprocess
    import sys
    code = """if True:
        import sys
        sys.modules["triton"] = None                       # import triton raises ImportError
        import torch
        import torchsparsegradutils as tsgu
        from torchsparsegradutils import _backends
        A = torch.eye(3).to_sparse_csr()
        assert torch.equal(tsgu.sparse_mm(A, torch.ones(3, 2), "mean"), torch.ones(3, 2))
        assert _backends._triton_backend() is None
        _backends.force_triton = True
        try:
            tsgu.sparse_mm(A, torch.ones(3, 2), "mean")
        except ImportError:
            print("ok")
    """
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "ok", out.stderr


@pytest.mark.parametrize("cuda_kernels", [True, False])
def test_triton_enabled_switch_routes_cuda_tensors(monkeypatch, cuda_kernels):
    """_backends.triton_enabled = False sends CUDA tensors of an op with a Triton kernel to
    torch_ops (so CUDA tests that turn our kernels off cover that route where triton is
    installed), as a machine without triton does; True sends them to Triton.  Tensor
    stand-ins on "CUDA": the choice alone, no kernel runs."""
    pytest.importorskip("triton")
    from types import SimpleNamespace

    from torchsparsegradutils import _backends
    from torchsparsegradutils._core import native
    t = SimpleNamespace(is_cpu=False, is_cuda=True)
    monkeypatch.setattr(native, "cuda_enabled", cuda_kernels)
    triton_backend = _backends._triton_backend(required=True)
    for enabled in (True, False):
        monkeypatch.setattr(_backends, "triton_enabled", enabled)
        assert _backends._backend(False, t, t, has_triton=True) is (triton_backend if enabled else _backends.torch_ops)
        assert _backends._backend(False, t, has_triton=False) is _backends.torch_ops
