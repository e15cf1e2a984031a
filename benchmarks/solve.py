"""Benchmark of the solves: ours against PyTorch's and SciPy's, on the same matrices.

    python -m benchmarks.solve [--quick | --smoke]

* Triangular solve, forward and forward+backward: sparse_triangular_solve (C
  kernels) against torch.triangular_solve with a CSR A (PyTorch's own sparse
  triangular solve; it works on CPU in 2.x, but has no autograd for a sparse A,
  so its forward+backward is timed as forward + the transposed solve for grad_B)
  and scipy.sparse.linalg.spsolve_triangular (forward only).
* The published torchsparsegradutils release's sparse_triangular_solve on the
  same matrices, forward and forward+backward, run in its own venv
  (benchmarks/.venv-published, made by benchmarks.sparse_mm) since it shares
  our import name; recorded as unavailable when that venv does not exist.
* Iterative solves, forward: our linear_cg / minres / lsmr against
  scipy.sparse.linalg cg / minres / lsmr with matching tolerances (n = 100 to
  4000 from make_spd_sparse, n = 100000 a sparse diagonally dominant SPD matrix
  of about 10 entries a row; LSMR up to n = 2000).

Correctness is checked before timing; each time is the median (and min) of
>= 5 runs after a warm-up.  Results: benchmarks/results/solve_<stamp>.{json,md}.
``--smoke`` (CI's check that the script works): one tiny triangular case, the
iterative solves at n = 100 (make_spd_sparse, with LSMR) and n = 300 (sparse_spd),
one timed run each without a warm-up.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import tempfile
import time
import warnings

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
import torch

from torchsparsegradutils import sparse_triangular_solve
from torchsparsegradutils.utils import (ConvergenceWarning, MINRESSettings, linear_cg, lsmr, make_spd_sparse, minres,
                                        rand_sparse, rand_sparse_tri)

from . import _modes

warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
warnings.filterwarnings("ignore", category=ConvergenceWarning)
RESULTS = os.path.join(os.path.dirname(__file__), "results")
PUBLISHED_PY = os.path.join(os.path.dirname(__file__), ".venv-published", "bin", "python")

# Runs in the published release's venv (python -I: nothing of this repository on sys.path).
_PUBLISHED_CODE = """
import json, statistics, sys, time, warnings
warnings.simplefilter("ignore")
import torch
from torchsparsegradutils import sparse_triangular_solve
torch.set_num_threads(int(sys.argv[3]))
d = torch.load(sys.argv[1])
A = torch.sparse_csr_tensor(d["crow"], d["col"], d["val"], d["shape"])
B, X_ours, reps = d["B"], d["X"], int(sys.argv[2])
X = sparse_triangular_solve(A, B, upper=False)
ok = bool(torch.allclose(X, X_ours, rtol=1e-8, atol=1e-10))
Ag = A.detach().requires_grad_(True)
Bg = B.clone().requires_grad_(True)
def fb():
    Ag.grad = Bg.grad = None
    sparse_triangular_solve(Ag, Bg, upper=False).sum().backward()
out = {"ok": ok}
for name, fn in [("forward", lambda: sparse_triangular_solve(A, B, upper=False)), ("forward+backward", fb)]:
    fn(); ts = []
    for _ in range(reps):
        t0 = time.perf_counter(); fn(); ts.append(time.perf_counter() - t0)
    out[name] = [statistics.median(ts), min(ts)]
print(json.dumps(out))
"""


def published_triangular(A, B, X, repeats):
    """{"forward": (median, min), "forward+backward": ...} of the published release, or {"error": why}."""
    if not os.path.exists(PUBLISHED_PY):
        return {"error": "published release venv not found (run python -m benchmarks.sparse_mm once to make it)"}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "case.pt")
        torch.save({"crow": A.crow_indices(), "col": A.col_indices(), "val": A.values(), "shape": tuple(A.shape),
                    "B": B, "X": X}, path)
        r = subprocess.run([PUBLISHED_PY, "-I", "-c", _PUBLISHED_CODE, path, str(repeats),
                            str(torch.get_num_threads())], capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        return {"error": r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"}
    res = json.loads(r.stdout.strip().splitlines()[-1])
    if not res.pop("ok"):
        return {"error": "published result disagrees with ours"}
    return res


def timeit(fn, repeats, warmup=True):
    if warmup:
        fn()                                        # warm-up
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), min(ts)


def to_scipy(A):
    A = A.to_sparse_csr()
    return sp.csr_matrix((A.values().numpy(), A.col_indices().numpy(), A.crow_indices().numpy()), shape=A.shape)


def bench_triangular(n, nnz, p, repeats, warmup=True):
    A = rand_sparse_tri((n, n), nnz, torch.sparse_csr, upper=False, values_dtype=torch.float64,
                        well_conditioned=True)
    B = torch.randn(n, p, dtype=torch.float64)
    As = to_scipy(A)
    X = sparse_triangular_solve(A, B, upper=False)
    Xt = torch.triangular_solve(B, A, upper=False).solution
    assert torch.allclose(X, Xt, rtol=1e-8, atol=1e-10), "ours and torch.triangular_solve disagree"

    Ag = A.detach().requires_grad_(True)
    Bg = B.clone().requires_grad_(True)

    def ours_fb():
        Ag.grad = Bg.grad = None
        sparse_triangular_solve(Ag, Bg, upper=False).sum().backward()

    def torch_fb():                                 # forward + the grad_B solve (no sparse autograd there)
        Y = torch.triangular_solve(B, A, upper=False).solution
        torch.triangular_solve(torch.ones_like(Y), A, upper=False, transpose=True)

    rows = []
    pub = published_triangular(A, B, X, repeats)
    for kind in ("forward", "forward+backward"):
        if kind in pub:
            rows.append(dict(op="triangular", case=f"n={n} nnz={nnz} p={p}", impl=f"published {kind}",
                             median_s=pub[kind][0], min_s=pub[kind][1]))
    if "error" in pub:
        print(f"published release unavailable: {pub['error']}")
    for name, fn in [("ours forward", lambda: sparse_triangular_solve(A, B, upper=False)),
                     ("torch.triangular_solve(CSR) forward", lambda: torch.triangular_solve(B, A, upper=False)),
                     ("scipy spsolve_triangular forward",
                      lambda: spla.spsolve_triangular(As, B.numpy(), lower=True)),
                     ("ours forward+backward (grad_A and grad_B)", ours_fb),
                     ("torch forward + grad_B solve (no grad_A)", torch_fb)]:
        med, mn = timeit(fn, repeats, warmup)
        rows.append(dict(op="triangular", case=f"n={n} nnz={nnz} p={p}", impl=name, median_s=med, min_s=mn))
    return rows


def sparse_spd(n, per_row, seed=0):
    """A sparse SPD (n, n) CSR matrix without a dense n x n step: S + S^T for a random S of
    about per_row/2 entries a row, made strictly diagonally dominant (so SPD)."""
    torch.manual_seed(seed)
    S = rand_sparse((n, n), max(1, n * per_row // 2), torch.sparse_coo, values_dtype=torch.float64)
    S = (S + S.t()).coalesce()
    i, v = S.indices(), S.values()
    off = torch.zeros(n, dtype=torch.float64).index_add_(0, i[0], v.abs())
    d = torch.arange(n)
    A = torch.sparse_coo_tensor(torch.cat([i, torch.stack([d, d])], 1), torch.cat([v, off + 1]), (n, n))
    return A.coalesce().to_sparse_csr()


def bench_iterative(n, repeats, warmup=True, dense_up_to=4000):
    """CG and MINRES on an SPD A (make_spd_sparse up to n = dense_up_to, sparse_spd beyond),
    LSMR on a tall rand_sparse up to n = 2000; the error is the relative residual
    ||A x - b|| / ||b|| (for LSMR the distance to the dense least-squares solution)."""
    torch.manual_seed(0)
    if n <= dense_up_to:
        A, _ = make_spd_sparse(n, torch.sparse_csr, torch.float64, torch.int64, torch.device("cpu"),
                               sparsity_ratio=0.98)
    else:
        A = sparse_spd(n, 10)
    As = to_scipy(A)
    b = torch.randn(n, dtype=torch.float64)
    bn = b.numpy()
    tol = 1e-8
    rows = []
    case = f"SPD n={n} nnz={A.values().numel()}"
    cases = [
        ("cg", lambda: linear_cg(A, b, tolerance=tol, max_iter=5000), lambda: spla.cg(As, bn, rtol=tol, maxiter=5000)),
        ("minres", lambda: minres(A, b, settings=MINRESSettings(minres_tolerance=tol, max_cg_iterations=5000)),
         lambda: spla.minres(As, bn, rtol=tol, maxiter=5000)),
    ]
    m = 2 * n
    if n <= 2000:
        T = rand_sparse((m, n), 4 * m, torch.sparse_csr, values_dtype=torch.float64)
        Ts = to_scipy(T)
        bt = torch.randn(m, dtype=torch.float64)
        cases.append(("lsmr", lambda: lsmr(T, bt, atol=tol, btol=tol, maxiter=5000),
                      lambda: spla.lsmr(Ts, bt.numpy(), atol=tol, btol=tol, maxiter=5000)))
        lsq = np.linalg.lstsq(T.to_dense().numpy(), bt.numpy(), rcond=None)[0]
    for name, ours, theirs in cases:
        xo = ours()
        xo = (xo[0] if isinstance(xo, tuple) else xo).numpy()
        xs = theirs()[0]
        if name == "lsmr":
            err_o, err_s = (float(np.abs(x - lsq).max() / np.abs(lsq).max()) for x in (xo, xs))
        else:
            err_o, err_s = (float(np.linalg.norm(As @ x - bn) / np.linalg.norm(bn)) for x in (xo, xs))
        for impl, fn, err in [(f"ours {name}", ours, err_o), (f"scipy {name}", theirs, err_s)]:
            med, mn = timeit(fn, repeats, warmup)
            rows.append(dict(op=name, case=case if name != "lsmr" else f"tall {m}x{n} nnz={4 * m}", impl=impl,
                             median_s=med, min_s=mn, rel_err=err))
    return rows


def ratios(rows):
    """speedup of ours, other / ours, for each (op, case): > 1 means ours is faster."""
    out = []
    by = {}
    for r in rows:
        by.setdefault((r["op"], r["case"]), []).append(r)
    for (op, case), rs in by.items():
        ours = {r["impl"]: r["median_s"] for r in rs if r["impl"].startswith("ours")}
        for r in rs:
            if r["impl"].startswith("ours"):
                continue
            if op == "triangular":
                both = "grad_B" in r["impl"] or "backward" in r["impl"]
                key = "ours forward+backward (grad_A and grad_B)" if both else "ours forward"
            else:
                key = f"ours {op}"
            out.append(dict(op=op, case=case, other=r["impl"], speedup=r["median_s"] / ours[key]))
    return out


def main():
    ap = argparse.ArgumentParser()
    _modes.add_mode_args(ap)
    ap.add_argument("--out", default=RESULTS, help="folder for the JSON and markdown results")
    args = ap.parse_args()
    smoke = _modes.mode_of(args) == "smoke"
    repeats = _modes.SMOKE_REPS if smoke else 5 if args.quick else 10
    tri_cases = [(1000, 10000, 1), (10000, 100000, 1), (2000, 20000, 16)] if args.quick else \
        [(1000, 10000, 1), (10000, 100000, 1), (100000, 1000000, 1), (1000000, 10000000, 1),
         (2000, 20000, 16), (20000, 200000, 16), (100000, 1000000, 4)]
    it_sizes = [100, 1000] if args.quick else [100, 1000, 4000, 100000]
    dense_up_to = 4000
    if smoke:        # one case of each kind; n = 300 through sparse_spd (the full mode's n = 1e5 path)
        tri_cases, it_sizes, dense_up_to = [(200, 1000, 2)], [100, 300], 100
    rows = []
    for n, nnz, p in tri_cases:
        rows += bench_triangular(n, nnz, p, repeats, warmup=not smoke)
    for n in it_sizes:
        rows += bench_iterative(n, repeats, warmup=not smoke, dense_up_to=dense_up_to)
    rat = ratios(rows)
    os.makedirs(args.out, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    meta = dict(torch=torch.__version__, scipy=__import__("scipy").__version__, threads=torch.get_num_threads(),
                machine=platform.machine(), processor=platform.processor(), quick=args.quick, repeats=repeats)
    if smoke:
        meta["smoke"] = True
    with open(os.path.join(args.out, f"solve_{stamp}.json"), "w") as f:
        json.dump(dict(meta=meta, rows=rows, speedups=rat), f, indent=1)
    lines = [f"# Solve benchmarks ({stamp}{', smoke mode: the numbers mean nothing' if smoke else ''})", "",
             f"torch {meta['torch']}, scipy {meta['scipy']}, "
             f"{meta['threads']} threads, median of {repeats} runs after warm-up", "",
             "| op | case | implementation | median ms | min ms | rel. error |", "|---|---|---|---|---|---|"]
    for r in rows:
        err = f"{r['rel_err']:.1e}" if "rel_err" in r else ""
        lines.append(f"| {r['op']} | {r['case']} | {r['impl']} | {1e3 * r['median_s']:.3f} | "
                     f"{1e3 * r['min_s']:.3f} | {err} |")
    lines += ["", "| op | case | vs | speedup of ours (other / ours) |", "|---|---|---|---|"]
    for r in rat:
        lines.append(f"| {r['op']} | {r['case']} | {r['other']} | {r['speedup']:.2f}x |")
    md = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, f"solve_{stamp}.md"), "w") as f:
        f.write(md)
    print(md)


if __name__ == "__main__":
    main()
