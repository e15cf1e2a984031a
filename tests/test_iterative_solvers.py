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
    with pytest.raises(ValueError, match="n_tridiag"):
        linear_cg(torch.eye(3), torch.ones(3), n_tridiag=2)
