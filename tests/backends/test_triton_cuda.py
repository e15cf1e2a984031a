"""Every Triton kernel compiled and run on a real GPU (CUDA tensors take the Triton route),
against the C route on the CPU: sparse_mm's reduce (sum, mean, amax, amin) with its
gradients, edge softmax and log-softmax, sparse @ sparse and its masked backward, the
triangular solve and its backward (a long chain of rows, NaN in B), fused graph attention (dropout's mask is the counter
hash of the torch-ops route for the seed drawn on the GPU; with an edge_score) and a
GATConv step (with edge features and repeated edges too).  The
interpreter tests beside this one check the same kernels' logic on the CPU; these check
what only a GPU shows (compilation for the chip, real memory, 16-bit).  Skipped without
CUDA or triton; `pytest -k "triton or cuda"` selects them."""
import importlib

import pytest
import torch
from support.operands import seeded, tri_dense

import torchsparsegradutils as tsgu
from torchsparsegradutils import _backends
from torchsparsegradutils.nn import GATConv

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"),
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

DEVICE = "cuda"           # the device under test
TOL = {torch.float32: dict(rtol=1e-4, atol=1e-5), torch.float64: dict(rtol=1e-10, atol=1e-10)}


@pytest.fixture(autouse=True)
def _triton_on_cuda():
    pytest.importorskip("triton")
    assert _backends.triton_enabled and not _backends.force_torch_ops


def _on(device, t):
    return t.detach().to(device).requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor) else t


def cpu_and_cuda(fn, inputs, seed=0):
    """[outputs..., gradients of the floating inputs that require grad] of fn(*inputs)
    for one random upstream gradient, on the CPU (the C route) and on CUDA (Triton),
    both returned on the CPU."""
    results = []
    for device in ("cpu", DEVICE):
        leaves = [_on(device, x) for x in inputs]
        outs = fn(*leaves)
        outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
        diff = [o for o in outs if o.requires_grad]
        wanted = [x for x in leaves if isinstance(x, torch.Tensor) and x.requires_grad]
        gen = seeded("cpu_and_cuda", seed)
        ups = [torch.randn(o.shape, generator=gen, dtype=torch.float64).to(o.dtype).to(device) for o in diff]
        grads = list(torch.autograd.grad(diff, wanted, ups)) if diff else []
        results.append([t.detach().cpu() for t in outs + grads])
    return results


def _assert_close(c, g, tol):
    assert len(c) == len(g)
    for a, b in zip(c, g):
        torch.testing.assert_close(b, a, equal_nan=True, **tol)


def _adjacency(n, m, gen, density=0.3):
    """(n, m) CSR pattern: row 0 empty, row 1 full (a hub row, longer than a block), column
    0 in every row but the first (a hub source)."""
    keep = torch.rand(n, m, generator=gen) < density
    keep[:, 0], keep[0], keep[1] = True, False, True
    return keep.to(torch.float64).to_sparse_csr()


def _csr_fn(S, op):
    crow, col = S.crow_indices(), S.col_indices()
    return lambda v, *rest: op(tsgu.sparse_csr_tensor(crow.to(v.device), col.to(v.device), v, S.shape), *rest)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("reduce", ["sum", "mean", "amax", "amin"])
def test_reduce_on_cuda_matches_c(reduce, dtype):
    gen = seeded("cuda_reduce", reduce, str(dtype))
    S = _adjacency(300, 700, gen)
    v = torch.randn(S.values().shape, generator=gen, dtype=dtype).requires_grad_()
    B = torch.randn(700, 48, generator=gen, dtype=dtype).requires_grad_()
    c, g = cpu_and_cuda(_csr_fn(S, lambda A, X: tsgu.sparse_mm(A, X, reduce)), [v, B])
    _assert_close(c, g, TOL[dtype])


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_softmax_on_cuda_matches_c(log):
    gen = seeded("cuda_softmax", log)
    S = _adjacency(400, 900, gen)
    v = (torch.randn(S.values().shape, generator=gen, dtype=torch.float32) * 30).requires_grad_()
    op = tsgu.sparse_log_softmax if log else tsgu.sparse_softmax

    def fn(v):
        return _csr_fn(S, op)(v).values()
    # scores spread over +-100: the GPU's exp (ex2.approx) and another order of the row's
    # sums leave a few float32 ulps of the upstream gradient's scale in y (g - sum y g)
    _assert_close(*cpu_and_cuda(fn, [v]), dict(rtol=1e-4, atol=1e-4))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_spgemm_on_cuda_matches_c(dtype):
    gen = seeded("cuda_spgemm", str(dtype))
    SA, SB = _adjacency(200, 300, gen, 0.05), _adjacency(300, 250, gen, 0.05)
    va = torch.randn(SA.values().shape, generator=gen, dtype=dtype).requires_grad_()
    vb = torch.randn(SB.values().shape, generator=gen, dtype=dtype).requires_grad_()
    W = torch.randn(200, 250, generator=gen, dtype=dtype)

    def fn(va, vb, W):
        A = tsgu.sparse_csr_tensor(SA.crow_indices().to(va.device), SA.col_indices().to(va.device), va, SA.shape)
        B = tsgu.sparse_csr_tensor(SB.crow_indices().to(vb.device), SB.col_indices().to(vb.device), vb, SB.shape)
        C = tsgu.sparse_mm(A, B)
        dense = torch.zeros(200, 250, dtype=dtype, device=va.device).index_put(
            (torch.repeat_interleave(torch.arange(200, device=va.device), C.crow_indices().diff()),
             C.col_indices()), C.values())
        return (dense * W).sum()
    c, g = cpu_and_cuda(fn, [va, vb, W])
    _assert_close(c, g, TOL[dtype])


@pytest.mark.parametrize("upper,transpose", [(False, False), (True, False), (False, True)])
def test_trisolve_on_cuda_matches_c(upper, transpose):
    gen = seeded("cuda_trisolve", upper, transpose)
    D = tri_dense(1, 500, upper, False, torch.float64, gen, density=0.02)[0]
    S = D.to_sparse_csr()
    v = S.values().clone().requires_grad_()
    B = torch.randn(500, 16, generator=gen, dtype=torch.float64).requires_grad_()
    fn = _csr_fn(S, lambda A, X: tsgu.sparse_triangular_solve(A, X, upper=upper, transpose=transpose))
    _assert_close(*cpu_and_cuda(fn, [v, B]), TOL[torch.float64])


def test_trisolve_on_cuda_chain_and_nan():
    """A bidiagonal A of 20000 rows (each row waits for the one before, across every
    program of the launch) and B with NaN, one of them the kernel's sentinel bits."""
    tri = importlib.import_module("torchsparsegradutils._backends.triton.trisolve")   # the module, not the op
    gen = seeded("cuda_trisolve_chain")
    n = 20000
    D = torch.sparse_coo_tensor(torch.stack([torch.cat([torch.arange(n), torch.arange(1, n)]),
                                             torch.cat([torch.arange(n), torch.arange(n - 1)])]),
                                torch.cat([2 + torch.rand(n, generator=gen, dtype=torch.float64),
                                           torch.randn(n - 1, generator=gen, dtype=torch.float64) * 0.5]),
                                (n, n)).coalesce().to_sparse_csr()
    B = torch.randn(n, 3, generator=gen, dtype=torch.float64)
    itype, bits = tri._SENTINEL[torch.float64]
    B[n // 2, 0] = torch.tensor(bits, dtype=itype).view(torch.float64)
    B[n - 5, 1] = float("nan")
    v = D.values().clone().requires_grad_()
    fn = _csr_fn(D, lambda A, X: tsgu.sparse_triangular_solve(A, X, upper=False))
    c, g = cpu_and_cuda(fn, [v, B])
    assert torch.equal(c[0].isnan(), g[0].isnan()) and bool(c[0][:, 2].isfinite().all())
    _assert_close(c, g, TOL[torch.float64])


@pytest.mark.parametrize("dtype,H,F", [(torch.float32, 1, 16), (torch.float32, 8, 8), (torch.float64, 3, 5)])
def test_gat_on_cuda_matches_c(dtype, H, F):
    gen = seeded("cuda_gat", str(dtype), H, F)
    S = _adjacency(300, 400, gen)
    x = torch.randn(400, H, F, generator=gen, dtype=dtype).requires_grad_()
    s = torch.randn(400, H, generator=gen, dtype=dtype).requires_grad_()
    d = torch.randn(300, H, generator=gen, dtype=dtype).requires_grad_()

    def fn(x, s, d):
        A = S.to(x.device)
        return tsgu.graph_attention(A, x, s, d, return_attention=True)
    _assert_close(*cpu_and_cuda(fn, [x, s, d]), TOL[dtype])


def test_gat_dropout_mask_on_cuda_is_the_counter_hash():
    gen = seeded("cuda_gat_mask")
    S = _adjacency(200, 300, gen).to(DEVICE)
    x = torch.randn(300, 4, 8, generator=gen).to(DEVICE)
    s, d = torch.randn(300, 4, generator=gen).to(DEVICE), torch.randn(200, 4, generator=gen).to(DEVICE)
    torch.manual_seed(11)
    _, alpha = tsgu.graph_attention(S, x, s, d, dropout=0.5, return_attention=True)
    torch.manual_seed(11)
    seed = torch.randint(-2**63, 2**63 - 1, (1,), dtype=torch.int64, device=DEVICE)
    dropped = _backends.gat_dropped(seed, *alpha.shape, round(0.5 * 2**24))
    assert torch.equal(alpha == 0, dropped) and 0 < int(dropped.sum()) < dropped.numel()


def test_gatconv_step_on_cuda_matches_cpu():
    gen = seeded("cuda_gatconv")
    S = _adjacency(500, 500, gen, 0.02)
    feats = torch.randn(500, 32, generator=gen)
    results = []
    for device in ("cpu", DEVICE):
        torch.manual_seed(3)
        layer = GATConv(32, 8, heads=4).to(device)
        out = layer(feats.to(device), S.to(device))
        out.square().sum().backward()
        results.append([out.detach().cpu()] + [p.grad.cpu() for p in layer.parameters()])
    _assert_close(*results, TOL[torch.float32])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_gat_edge_score_on_cuda_matches_c(dtype):
    gen = seeded("cuda_gat_edge", str(dtype))
    S = _adjacency(300, 400, gen)
    H, F = 4, 8
    x = torch.randn(400, H, F, generator=gen, dtype=dtype).requires_grad_()
    s = torch.randn(400, H, generator=gen, dtype=dtype).requires_grad_()
    d = torch.randn(300, H, generator=gen, dtype=dtype).requires_grad_()
    e = torch.randn(S._nnz(), H, generator=gen, dtype=dtype).requires_grad_()

    def fn(x, s, d, e):
        A = S.to(x.device)
        return tsgu.graph_attention(A, x, s, d, return_attention=True, edge_score=e)
    _assert_close(*cpu_and_cuda(fn, [x, s, d, e]), TOL[dtype])


def test_gatconv_edge_features_on_cuda_matches_cpu():
    gen = seeded("cuda_gatconv_edges")
    ei = torch.randint(0, 400, (2, 4000), generator=gen)
    ei = torch.cat([ei, ei[:, :500]], 1)                            # repeated edges
    feats = torch.randn(400, 16, generator=gen, dtype=torch.float64)
    ea = torch.randn(ei.shape[1], 6, generator=gen, dtype=torch.float64)
    results = []
    for device in ("cpu", DEVICE):
        torch.manual_seed(3)
        layer = GATConv(16, 8, heads=4, edge_dim=6, residual=True).double().to(device)
        out, (_, alpha) = layer(feats.to(device), ei.to(device), ea.to(device), return_attention_weights=True)
        (out.square().sum() + alpha.square().sum()).backward()
        results.append([out.detach().cpu(), alpha.detach().cpu()] + [p.grad.cpu() for p in layer.parameters()])
    _assert_close(*results, TOL[torch.float64])
