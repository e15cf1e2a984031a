"""Tests of the iterative solvers (linear_cg, minres, bicgstab, lsmr) against dense torch.linalg."""
import pytest
import torch

from torchsparsegradutils.utils import (BICGSTABSettings, ConvergenceWarning, LinearCGSettings, MINRESSettings,
                                        bicgstab, linear_cg, lsmr, make_spd_sparse, minres, rand_sparse)

HAS_CUDA = torch.cuda.is_available()
DEV = [pytest.param("cpu"), pytest.param("cuda", marks=pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device"))]
F64 = dict(rtol=1e-7, atol=1e-8)


def spd(n, layout, device="cpu", seed=0):
    torch.manual_seed(seed)
    A, D = make_spd_sparse(n, layout, torch.float64, torch.int64, torch.device("cpu"), sparsity_ratio=0.7)
    return A.to(device), D.to(device)


def indefinite(n, seed=1):
    """Symmetric indefinite sparse: an SPD matrix minus a shift inside its spectrum."""
    A, D = spd(n, torch.sparse_coo, seed=seed)
    ev = torch.linalg.eigvalsh(D)
    shift = float((ev[n // 2] + ev[n // 2 + 1]) / 2)
    D = D - shift * torch.eye(n, dtype=D.dtype)
    return D.to_sparse(), D


def ill_conditioned_spd(n, cond=1e6, seed=2):
    torch.manual_seed(seed)
    Q, _ = torch.linalg.qr(torch.randn(n, n, dtype=torch.float64))
    D = Q @ torch.diag(torch.logspace(0, torch.log10(torch.tensor(cond)).item(), n, dtype=torch.float64)) @ Q.T
    D = (D + D.T) / 2
    return D.to_sparse(), D


def nonsymmetric(n, seed=3):
    torch.manual_seed(seed)
    A = rand_sparse((n, n), 5 * n, torch.sparse_csr, values_dtype=torch.float64, well_conditioned=True)
    return A, A.to_dense()


SOLVERS_SPD = {
    "linear_cg": lambda A, B: linear_cg(A, B, tolerance=1e-11),
    "minres": lambda A, B: minres(A, B, settings=MINRESSettings(minres_tolerance=1e-11)),
    "bicgstab": lambda A, B: bicgstab(A, B, settings=BICGSTABSettings(reltol=1e-11, abstol=0)),
    "lsmr": lambda A, B: lsmr(A, B, atol=1e-12, btol=1e-12, maxiter=500)[0],
}


@pytest.mark.parametrize("device", DEV)
@pytest.mark.parametrize("layout", [torch.sparse_coo, torch.sparse_csr])
@pytest.mark.parametrize("name", sorted(SOLVERS_SPD))
def test_spd(name, layout, device):
    A, D = spd(40, layout, device)
    B = torch.randn(40, 3, dtype=torch.float64, device=device)
    X = SOLVERS_SPD[name](A, B)
    torch.testing.assert_close(X, torch.linalg.solve(D, B), **F64)


@pytest.mark.parametrize("name", sorted(SOLVERS_SPD))
def test_vector_rhs_and_callable_operator(name):
    A, D = spd(30, torch.sparse_csr)
    b = torch.randn(30, dtype=torch.float64)
    if name == "lsmr":
        x = lsmr(lambda v: D @ v, b, Armat=lambda v: D.T @ v, n=30, atol=1e-12, btol=1e-12, maxiter=500)[0]
    else:
        x = SOLVERS_SPD[name](lambda v: D @ v, b)
    assert x.shape == (30,)
    torch.testing.assert_close(x, torch.linalg.solve(D, b), **F64)


@pytest.mark.parametrize("name", ["bicgstab", "lsmr"])
def test_nonsymmetric(name):
    A, D = nonsymmetric(50)
    B = torch.randn(50, 2, dtype=torch.float64)
    torch.testing.assert_close(SOLVERS_SPD[name](A, B), torch.linalg.solve(D, B), **F64)


def test_minres_symmetric_indefinite():
    A, D = indefinite(30)
    B = torch.randn(30, 2, dtype=torch.float64)
    X = minres(A, B, settings=MINRESSettings(minres_tolerance=1e-11, max_cg_iterations=2000))
    torch.testing.assert_close(X, torch.linalg.solve(D, B), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", ["linear_cg", "minres", "lsmr"])
def test_ill_conditioned(name):
    A, D = ill_conditioned_spd(40, cond=1e6)
    B = torch.randn(40, 1, dtype=torch.float64)
    with _no_warning():
        if name == "linear_cg":
            X = linear_cg(A, B, tolerance=1e-10, max_iter=2000)
        elif name == "minres":
            X = minres(A, B, settings=MINRESSettings(minres_tolerance=1e-8, max_cg_iterations=2000))
        else:
            X = lsmr(A, B, atol=1e-14, btol=1e-14, conlim=1e12, maxiter=2000)[0]
    # residual small; error bounded by cond * residual
    res = torch.linalg.norm(D @ X - B) / torch.linalg.norm(B)
    assert res < 1e-7
    torch.testing.assert_close(X, torch.linalg.solve(D, B), rtol=1e-3, atol=1e-3)


class _no_warning:
    def __enter__(self):
        import warnings
        self._cm = warnings.catch_warnings()
        self._cm.__enter__()
        warnings.simplefilter("error", ConvergenceWarning)

    def __exit__(self, *a):
        return self._cm.__exit__(*a)


@pytest.mark.parametrize("name, run", [
    ("linear_cg", lambda A, B: linear_cg(A, B, tolerance=1e-12, max_iter=3)),
    ("linear_cg", lambda A, B: linear_cg(A, B, settings=LinearCGSettings(max_cg_iterations=3, cg_tolerance=1e-12))),
    ("minres", lambda A, B: minres(A, B, max_iter=3, settings=MINRESSettings(minres_tolerance=1e-12))),
    ("bicgstab", lambda A, B: bicgstab(A, B, settings=BICGSTABSettings(matvec_max=4, reltol=1e-12))),
    ("lsmr", lambda A, B: lsmr(A, B, atol=1e-14, btol=1e-14, maxiter=3)),
])
def test_non_convergence_is_reported(name, run):
    A, D = ill_conditioned_spd(40, cond=1e6)
    B = torch.randn(40, 1, dtype=torch.float64)
    with pytest.warns(ConvergenceWarning, match=rf"{name} did not converge within \d+ iterations: relative residual"):
        run(A, B)


def test_linear_cg_info_and_batched_rhs():
    A, D = spd(20, torch.sparse_coo)
    B = torch.randn(20, 4, dtype=torch.float64)
    X, info = linear_cg(A, B, tolerance=1e-10, return_info=True)
    assert info.reason == "converged" and bool(info.converged.all()) and info.iterations > 0
    assert info.true_relative_residual.shape == (4,)
    torch.testing.assert_close(X, torch.linalg.solve(D, B), **F64)
    # batched dense operator, (b, n, k) right-hand sides
    Db = torch.stack([D, D + torch.eye(20, dtype=torch.float64)])
    Bb = torch.randn(2, 20, 3, dtype=torch.float64)
    torch.testing.assert_close(linear_cg(Db, Bb, tolerance=1e-11), torch.linalg.solve(Db, Bb), **F64)


def test_zero_rhs_and_minres_shifts():
    A, D = spd(15, torch.sparse_csr)
    B = torch.zeros(15, 2, dtype=torch.float64)
    for X in (linear_cg(A, B), minres(A, B), bicgstab(A, B)):
        assert torch.equal(X, B)
    b = torch.randn(15, dtype=torch.float64)
    Xs = minres(A, b, shifts=torch.tensor([0.0, 2.0], dtype=torch.float64),
                settings=MINRESSettings(minres_tolerance=1e-11))
    for k, s in enumerate((0.0, 2.0)):
        torch.testing.assert_close(Xs[k], torch.linalg.solve(D + s * torch.eye(15, dtype=torch.float64), b), **F64)


def test_float32():
    A, D = spd(30, torch.sparse_csr)
    A = A.to(torch.float32)
    B = torch.randn(30, 2)
    X = linear_cg(A, B, tolerance=1e-5)
    torch.testing.assert_close(X, torch.linalg.solve(D.float(), B), rtol=1e-3, atol=1e-4)


def test_operator_errors():
    with pytest.raises(TypeError, match="tensor or a callable"):
        linear_cg("nope", torch.ones(3))
    with pytest.raises(TypeError, match="Armat"):
        lsmr(lambda v: v, torch.ones(3), n=3)
    with pytest.raises(TypeError, match="n \\(the number of columns"):
        lsmr(lambda v: v, torch.ones(3), Armat=lambda v: v)
    with pytest.raises(ValueError, match="n_tridiag must be in"):
        linear_cg(torch.eye(3), torch.ones(3), n_tridiag=2)
    with pytest.raises(RuntimeError, match="max_tridiag_iter"):
        linear_cg(torch.eye(3), torch.ones(3), n_tridiag=1, max_iter=2, max_tridiag_iter=3)
    with pytest.raises(ValueError, match="initial_guess must share"):
        linear_cg(torch.eye(3), torch.ones(3), initial_guess=torch.ones(3, dtype=torch.float64))
    # not a tensor nor a callable: a TypeError, and a RuntimeError as the release raised
    for solver in (lambda op: linear_cg(op, torch.ones(3)), lambda op: bicgstab(op, torch.ones(3))):
        with pytest.raises(TypeError):
            solver(object())
        with pytest.raises(RuntimeError, match="matmul_closure must be a tensor"):
            solver(object())


def _lanczos(A, v, steps):
    """Reference Lanczos tridiagonal matrix of A from v, with full reorthogonalization."""
    Q = [v / torch.linalg.norm(v)]
    alphas, betas = [], []
    for k in range(steps):
        w = A @ Q[-1]
        alphas.append(torch.dot(Q[-1], w))
        for q in Q:                                   # full reorthogonalization (twice is enough)
            w = w - torch.dot(q, w) * q
        for q in Q:
            w = w - torch.dot(q, w) * q
        if k + 1 < steps:
            betas.append(torch.linalg.norm(w))
            Q.append(w / betas[-1])
    return torch.diag(torch.stack(alphas)) + torch.diag(torch.stack(betas), 1) + torch.diag(torch.stack(betas), -1)


@pytest.mark.parametrize("layout", [torch.sparse_coo, torch.sparse_csr])
def test_linear_cg_tridiagonal_is_the_lanczos_matrix(layout):
    A, D = spd(12, layout, seed=5)
    B = torch.randn(12, 4, dtype=torch.float64)
    steps = 6
    X, T = linear_cg(A, B, n_tridiag=3, max_tridiag_iter=steps, tolerance=1e-11)
    assert T.shape == (3, steps, steps)
    for j in range(3):
        torch.testing.assert_close(T[j], _lanczos(D, B[:, j], steps), rtol=1e-8, atol=1e-10)
    torch.testing.assert_close(X, torch.linalg.solve(D, B), **F64)


def test_linear_cg_tridiagonal_batched_preconditioned_and_full_size():
    torch.manual_seed(6)
    M = torch.randn(2, 8, 8, dtype=torch.float64)
    D = M @ M.mT + 8 * torch.eye(8, dtype=torch.float64)
    B = torch.randn(2, 8, 3, dtype=torch.float64)
    d = D.diagonal(dim1=-2, dim2=-1).unsqueeze(-1)
    X, T = linear_cg(D, B, n_tridiag=2, max_tridiag_iter=8, tolerance=1e-12, max_iter=8,
                     preconditioner=lambda r: r / d)
    assert T.shape == (2, 2, 8, 8)
    # the full Lanczos matrix of M^{-1} A has its spectrum: that of M^{-1/2} A M^{-1/2}
    s = d.squeeze(-1).rsqrt()
    ref = torch.linalg.eigvalsh(s.unsqueeze(-1) * D * s.unsqueeze(-2))
    for j in range(2):
        torch.testing.assert_close(torch.linalg.eigvalsh(T[j]), ref, rtol=1e-7, atol=1e-9)
    torch.testing.assert_close(X, torch.linalg.solve(D, B), **F64)


def test_linear_cg_tridiagonal_stops_growing_when_a_probe_converges():
    # three distinct eigenvalues: CG (and Lanczos) end after three steps
    torch.manual_seed(7)
    Q, _ = torch.linalg.qr(torch.randn(10, 10, dtype=torch.float64))
    ev = torch.tensor([1.0, 2.0, 5.0], dtype=torch.float64).repeat_interleave(torch.tensor([3, 3, 4]))
    D = Q @ torch.diag(ev) @ Q.T
    b = torch.randn(10, dtype=torch.float64)
    x, T, info = linear_cg(D, b, n_tridiag=1, max_tridiag_iter=10, tolerance=1e-10, return_info=True)
    assert T.shape == (1, 3, 3) and info.reason == "converged" and info.iterations == 3
    torch.testing.assert_close(torch.linalg.eigvalsh(T[0]), torch.tensor([1.0, 2.0, 5.0], dtype=torch.float64))


def test_linear_cg_sparse_operator_on_batched_rhs():
    A, D = spd(10, torch.sparse_csr, seed=8)
    B = torch.randn(3, 10, 2, dtype=torch.float64)
    torch.testing.assert_close(linear_cg(A, B, tolerance=1e-11), torch.linalg.solve(D, B), **F64)


def test_bicgstab_budget_precon_and_breakdown():
    A, D = nonsymmetric(30)
    B = torch.randn(30, 3, dtype=torch.float64)
    calls = []

    def op(x):
        calls.append(x.shape)
        return D @ x
    with pytest.warns(ConvergenceWarning) as caught:
        bicgstab(op, B, settings=BICGSTABSettings(matvec_max=5, reltol=1e-14, abstol=0))
    assert len(caught) == 1                               # one warning for all the columns
    assert len(calls) == 3 * 5 and set(calls) == {(30,)}  # the budget is per column, on (n,) vectors
    # a tensor preconditioner (the inverse diagonal) applies M^{-1}
    Minv = torch.diag(1 / D.diagonal())
    X = bicgstab(A, B, settings=BICGSTABSettings(reltol=1e-12, abstol=0, precon=Minv.to_sparse()))
    torch.testing.assert_close(X, torch.linalg.solve(D, B), **F64)
    # rhat^T A p = 0 at the first step: a breakdown is reported, never NaN
    swap = torch.tensor([[0.0, 1.0], [1.0, 0.0]], dtype=torch.float64)
    with pytest.warns(ConvergenceWarning, match="bicgstab did not converge"):
        x = bicgstab(swap, torch.tensor([1.0, 0.0], dtype=torch.float64))
    assert bool(torch.isfinite(x).all())


@pytest.mark.parametrize("sparse", [False, True])
def test_lsmr_complex_matches_scipy(sparse):
    sla = pytest.importorskip("scipy.sparse.linalg")
    g = torch.Generator().manual_seed(9)
    D = torch.complex(torch.randn(12, 7, dtype=torch.float64, generator=g),
                      torch.randn(12, 7, dtype=torch.float64, generator=g))
    b = torch.complex(torch.randn(12, dtype=torch.float64, generator=g), torch.randn(12, dtype=torch.float64,
                                                                                    generator=g))
    x, _ = lsmr(D.to_sparse() if sparse else D, b, atol=1e-12, btol=1e-12, maxiter=100)
    ref = sla.lsmr(D.numpy(), b.numpy(), atol=1e-12, btol=1e-12, maxiter=100)[0]
    torch.testing.assert_close(x, torch.from_numpy(ref), rtol=1e-8, atol=1e-10)
    # the least-squares optimality condition A^H (b - A x) = 0 (A^T would not vanish)
    assert float(torch.linalg.norm(D.mH @ (b - D @ x))) < 1e-9


def test_lsmr_row_rhs():
    A, D = nonsymmetric(10)
    b = torch.randn(1, 10, dtype=torch.float64)
    x, _ = lsmr(A, b, atol=1e-12, btol=1e-12, maxiter=200)
    assert x.shape == (1, 10)
    torch.testing.assert_close(x[0], torch.linalg.solve(D, b[0]), **F64)


# ---------------------------------------------------------------- the C loops (csrc/cg.c, minres.c)
def _both_paths(monkeypatch, run):
    """run() on the C loop (a sparse CPU operator) and on the torch loop (forced with
    _backends.force_torch_ops, which sends the products through torch ops instead)."""
    from torchsparsegradutils import _backends
    c = run()
    monkeypatch.setattr(_backends, "force_torch_ops", True)
    t = run()
    monkeypatch.setattr(_backends, "force_torch_ops", False)
    return c, t


@pytest.mark.parametrize("layout", [torch.sparse_coo, torch.sparse_csr])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("reduction", ["all", "mean"])
def test_linear_cg_c_loop_matches_torch_loop(monkeypatch, layout, dtype, k, reduction):
    A, D = spd(60, layout, seed=4)
    A, D = A.to(dtype), D.to(dtype)
    B = torch.randn(60, k, dtype=dtype)
    B[:, -1] *= 0 if k > 1 else 1                   # a zero column: its solution is zero
    x0 = torch.randn(60, k, dtype=dtype)
    tol = 1e-10 if dtype == torch.float64 else 1e-5
    (Xc, ic), (Xt, it) = _both_paths(monkeypatch, lambda: linear_cg(
        A, B, tolerance=tol, initial_guess=x0, convergence_reduction=reduction, min_iter=2, return_info=True))
    assert (ic.iterations, ic.matvecs, ic.reason) == (it.iterations, it.matvecs, it.reason)
    assert torch.equal(ic.converged, it.converged)
    tols = F64 if dtype == torch.float64 else dict(rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(Xc, Xt, **tols)
    torch.testing.assert_close(ic.true_relative_residual, it.true_relative_residual, rtol=0.5, atol=tol / 10)
    torch.testing.assert_close(Xc, torch.linalg.solve(D, B), **tols)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize("shift, value", [(None, None), (0.5, 2.0)])
def test_minres_c_loop_matches_torch_loop(monkeypatch, dtype, k, shift, value):
    A, D = indefinite(50)
    A, D = A.to(dtype), D.to(dtype)
    B = torch.randn(50, k, dtype=dtype)
    tol = 1e-10 if dtype == torch.float64 else 1e-5
    settings = MINRESSettings(minres_tolerance=tol)
    Xc, Xt = _both_paths(monkeypatch, lambda: minres(A, B, shifts=shift, value=value, settings=settings))
    M = (value or 1) * D + (shift or 0) * torch.eye(50, dtype=dtype)
    tols = F64 if dtype == torch.float64 else dict(rtol=1e-3, atol=1e-4)
    torch.testing.assert_close(Xc, Xt, **tols)
    torch.testing.assert_close(Xc, torch.linalg.solve(M, B), **tols)


def test_krylov_c_loops_match_scipy():
    import scipy.sparse as sp
    import scipy.sparse.linalg as spla
    A, D = spd(200, torch.sparse_csr, seed=5)
    b = torch.randn(200, dtype=torch.float64)
    As = sp.csr_matrix((A.values().numpy(), A.col_indices().numpy(), A.crow_indices().numpy()), shape=A.shape)
    x, info = linear_cg(A, b, tolerance=1e-10, return_info=True)
    xs, _ = spla.cg(As, b.numpy(), rtol=1e-10, maxiter=1000)
    torch.testing.assert_close(x, torch.from_numpy(xs), **F64)
    assert info.reason == "converged"
    xm = minres(A, b, settings=MINRESSettings(minres_tolerance=1e-10))
    xs, _ = spla.minres(As, b.numpy(), rtol=1e-10, maxiter=1000)
    torch.testing.assert_close(xm, torch.from_numpy(xs), **F64)


@pytest.mark.parametrize("solver", ["cg", "minres"])
@pytest.mark.parametrize("k", [1, 2])
def test_krylov_c_loops_thread_count_same_bits(solver, k):
    """Large enough for the products to split over threads: the bits do not change."""
    from support.checks import num_threads
    n = 700000                                      # 1-D Laplacian plus 1: 2.1M entries, threads
    i = torch.arange(n)
    idx = torch.cat([torch.stack([i, i]), torch.stack([i[1:], i[:-1]]), torch.stack([i[:-1], i[1:]])], 1)
    vals = torch.cat([torch.full((n,), 3.0), -torch.ones(2 * (n - 1))]).double()
    A = torch.sparse_coo_tensor(idx, vals, (n, n)).coalesce().to_sparse_csr()
    B = torch.randn(n, k, dtype=torch.float64)
    run = (lambda: linear_cg(A, B, tolerance=1e-9)) if solver == "cg" else \
        (lambda: minres(A, B, settings=MINRESSettings(minres_tolerance=1e-9)))
    with num_threads(1):
        X1 = run()
    with num_threads(3):                            # products on 2 (k = 1) or 3 (k = 2) threads
        X3 = run()
    assert torch.equal(X1, X3)
    torch.testing.assert_close(torch.sparse.mm(A, X1), B, rtol=0, atol=1e-7)


@pytest.mark.parametrize("itype", [torch.int32, torch.int64])
@pytest.mark.parametrize("crow, col, match", [
    ([0, 2, 3], [1, 0, 1], "column indices must be sorted"),
    ([0, 2, 3], [0, 0, 1], "column indices must be sorted"),       # repeated
    ([0, 2, 3], [0, 2, 1], "column index is negative or not less"),
    ([0, 2, 3], [-1, 0, 1], "column index is negative or not less"),
    ([0, 4, 3], [0, 1, 1], "must be non-decreasing"),             # a pointer past nnz
])
def test_krylov_c_loops_malformed(itype, crow, col, match):
    """The structure is checked once, before the loop reads it unchecked."""
    A = torch.sparse_csr_tensor(torch.tensor(crow, dtype=itype), torch.tensor(col, dtype=itype),
                                torch.ones(3, dtype=torch.float64), (2, 2))
    for run in (linear_cg, minres):
        with pytest.raises(ValueError, match=match):
            run(A, torch.ones(2, dtype=torch.float64))


def test_linear_cg_c_loop_breakdown():
    neg = torch.sparse_csr_tensor(torch.tensor([0, 1, 2]), torch.tensor([0, 1]),
                                  torch.tensor([1.0, -1.0], dtype=torch.float64), (2, 2))
    with pytest.raises(RuntimeError, match="p\\^T A p must be finite and at least eps"):
        linear_cg(neg, torch.tensor([0.0, 1.0], dtype=torch.float64))


def test_krylov_torch_loop_when_a_gradient_is_recorded():
    """With rhs requiring grad the solvers keep the torch loop, so autograd records the
    iterations (the C loop would return a tensor without a graph)."""
    A, D = spd(30, torch.sparse_csr, seed=6)
    b = torch.randn(30, dtype=torch.float64, requires_grad=True)
    for x in (linear_cg(A, b, tolerance=1e-12), minres(A, b, settings=MINRESSettings(minres_tolerance=1e-12))):
        assert x.grad_fn is not None
        torch.testing.assert_close(x.detach(), torch.linalg.solve(D, b.detach()), **F64)
        g, = torch.autograd.grad(x.sum(), b)
        assert bool(torch.isfinite(g).all())
