"""Benchmark of the sparse normal's log_prob: ours against the published release's, on the same factor.

    python -m benchmarks.distributions [--quick | --smoke] [--setup-published]

Covariance ``Sigma = L L^T`` with a banded lower-triangular CSR ``L`` (bandwidth
``w``: ``nnz ~ (w + 1) n``), float64, ``S`` samples per call:

* ours: ``SparseMultivariateNormal(loc, scale_tril=L).log_prob`` -- one sparse
  triangular solve and the stored diagonal, O(nnz S) -- forward, and forward +
  backward (gradients w.r.t. L's values and loc).
* ours, the "native" class: ``SparseMultivariateNormalNative.log_prob`` (the same code).
* published 0.2.7: its only log_prob, ``SparseMultivariateNormalNative.log_prob``,
  which densifies L and runs a dense triangular solve (O(n^2) memory, O(n^2 S)
  time; its ``SparseMultivariateNormal`` has no log_prob).  It shares our
  import name, so it runs in its own venv (``benchmarks/.venv-published``, made
  by ``python -m benchmarks.sparse_mm`` or ``--setup-published`` here); cases whose
  dense ``n x n`` matrix would exceed ``--dense-limit-gb`` are recorded as skipped.

Both sides time the same matrices and samples (passed through a file) and the
published result is checked against ours first.  Median and min of the runs
after a warm-up; results in benchmarks/results/distributions_<stamp>.{json,md}.  ``--smoke``
(a check that the script works): one case at n = 200, one timed run, no warm-up.
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

import torch

from torchsparsegradutils.distributions import SparseMultivariateNormal, SparseMultivariateNormalNative

from . import _modes
from ._machine import ensure_published

warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")

# Runs in the published release's venv (python -I: nothing of this repository on sys.path).
_PUBLISHED_CODE = """
import json, statistics, sys, time, warnings
warnings.simplefilter("ignore")
import torch
from torchsparsegradutils.distributions import SparseMultivariateNormalNative
torch.set_num_threads(int(sys.argv[3]))
d = torch.load(sys.argv[1])
L = torch.sparse_csr_tensor(d["crow"], d["col"], d["val"], d["shape"])
dist = SparseMultivariateNormalNative(d["loc"], L, validate_args=False)
lp = dist.log_prob(d["x"])
ok = bool(torch.allclose(lp, d["lp"], rtol=1e-9, atol=1e-6))
ts = []
for _ in range(int(sys.argv[2])):
    t0 = time.perf_counter(); dist.log_prob(d["x"]); ts.append(time.perf_counter() - t0)
print(json.dumps({"ok": ok, "forward": [statistics.median(ts), min(ts)]}))
"""


def banded_lower(n, w, dtype=torch.float64):
    """A lower-triangular CSR L with diagonal 1 + |noise| and w subdiagonals of small entries (well conditioned)."""
    g = torch.Generator().manual_seed(n)
    rows = torch.arange(n).repeat_interleave(w + 1)
    cols = rows - torch.arange(w, -1, -1).repeat(n)
    keep = cols >= 0
    rows, cols = rows[keep], cols[keep]
    vals = 0.3 * torch.randn(rows.numel(), dtype=dtype, generator=g) / (w + 1)
    vals[rows == cols] = 1 + torch.rand(n, dtype=dtype, generator=g)
    crow = torch.zeros(n + 1, dtype=torch.int64)
    crow[1:] = torch.bincount(rows, minlength=n).cumsum(0)
    return torch.sparse_csr_tensor(crow, cols, vals, (n, n))


def timeit(fn, repeats, warmup=True):
    if warmup:
        fn()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), min(ts)


def published_log_prob(py, L, loc, x, lp, repeats):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "case.pt")
        torch.save({"crow": L.crow_indices(), "col": L.col_indices(), "val": L.values(), "shape": tuple(L.shape),
                    "loc": loc, "x": x, "lp": lp}, path)
        r = subprocess.run([py, "-I", "-c", _PUBLISHED_CODE, path, str(repeats), str(torch.get_num_threads())],
                           capture_output=True, text=True, timeout=1800, cwd="/")
    if r.returncode != 0:
        return {"error": r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"}
    res = json.loads(r.stdout.strip().splitlines()[-1])
    if not res.pop("ok"):
        return {"error": "published log_prob disagrees with ours"}
    return res


def bench(n, w, S, repeats, py, dense_limit_gb, warmup=True):
    L = banded_lower(n, w)
    g = torch.Generator().manual_seed(1)
    loc = torch.randn(n, dtype=torch.float64, generator=g)
    x = loc + torch.randn(S, n, dtype=torch.float64, generator=g)
    case = f"n={n} nnz={L.values().numel()} S={S}"
    ours = SparseMultivariateNormal(loc, scale_tril=L, validate_args=False)
    native = SparseMultivariateNormalNative(loc, L, validate_args=False)
    lp = ours.log_prob(x)
    if n <= 2000:   # check against the dense MultivariateNormal where it is cheap
        ref = torch.distributions.MultivariateNormal(loc, scale_tril=L.to_dense()).log_prob(x)
        assert torch.allclose(lp, ref, rtol=1e-9, atol=1e-6), "ours disagrees with the dense MultivariateNormal"

    Lg = L.detach().requires_grad_(True)
    locg = loc.clone().requires_grad_(True)

    def fwd_bwd():
        Lg.grad = locg.grad = None
        SparseMultivariateNormal(locg, scale_tril=Lg, validate_args=False).log_prob(x).sum().backward()

    rows = []
    for name, fn in [("ours log_prob", lambda: ours.log_prob(x)),
                     ("ours Native.log_prob", lambda: native.log_prob(x)),
                     ("ours log_prob forward+backward", fwd_bwd)]:
        med, mn = timeit(fn, repeats, warmup)
        rows.append(dict(case=case, impl=name, median_s=med, min_s=mn))
    dense_gb = n * n * 8 / 1e9
    if py is None:
        rows.append(dict(case=case, impl="published Native.log_prob", skipped="published release venv unavailable"))
    elif dense_gb > dense_limit_gb:
        rows.append(dict(case=case, impl="published Native.log_prob",
                         skipped=f"densifies L: {dense_gb:.0f} GB > --dense-limit-gb {dense_limit_gb}"))
    else:
        pub = published_log_prob(py, L, loc, x, lp, repeats)
        if "error" in pub:
            rows.append(dict(case=case, impl="published Native.log_prob", skipped=pub["error"]))
        else:
            rows.append(dict(case=case, impl="published Native.log_prob", median_s=pub["forward"][0],
                             min_s=pub["forward"][1]))
    return rows


def main():
    ap = argparse.ArgumentParser()
    _modes.add_mode_args(ap)
    ap.add_argument("--setup-published", action="store_true", help="create the published release's venv if missing")
    ap.add_argument("--venv", default=os.path.join(HERE, ".venv-published"))
    ap.add_argument("--dense-limit-gb", type=float, default=4.0)
    ap.add_argument("--out", default=RESULTS)
    args = ap.parse_args()
    smoke = _modes.mode_of(args) == "smoke"
    repeats = _modes.SMOKE_REPS if smoke else 5 if args.quick else 7
    cases = [(1000, 4, 16), (10000, 4, 16)] if args.quick else \
        [(1000, 4, 16), (10000, 4, 16), (100000, 4, 16), (1000000, 4, 16)]
    if smoke:
        cases = [(200, 4, 4)]
    py, why = ensure_published(args.venv, args.setup_published)
    print(f"published: {why}")
    rows = []
    for n, w, S in cases:
        rows += bench(n, w, S, repeats, py, args.dense_limit_gb, warmup=not smoke)
        print(rows[-1], flush=True)
    by_case = {}
    for r in rows:
        by_case.setdefault(r["case"], {})[r["impl"]] = r
    ratios = [dict(case=c, speedup=d["published Native.log_prob"]["median_s"] / d["ours log_prob"]["median_s"])
              for c, d in by_case.items() if "median_s" in d["published Native.log_prob"]]
    stamp = time.strftime("%Y%m%d-%H%M%S")
    meta = dict(torch=torch.__version__, threads=torch.get_num_threads(), machine=platform.machine(),
                processor=platform.processor(), quick=args.quick, repeats=repeats, published=why,
                load_average_at_end=os.getloadavg())
    if smoke:
        meta["smoke"] = True
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"distributions_{stamp}.json"), "w") as f:
        json.dump(dict(meta=meta, rows=rows, speedups=ratios), f, indent=1)
    lines = [f"# log_prob benchmark ({stamp}{', smoke mode: the numbers mean nothing' if smoke else ''})", "",
             f"torch {meta['torch']}, {meta['threads']} threads, float64, banded L (4 subdiagonals), "
             f"median of {repeats} runs after warm-up; load average at the end "
             f"{', '.join(f'{v:.1f}' for v in meta['load_average_at_end'])}; published: {why}", "",
             "| case | implementation | median ms | min ms |", "|---|---|---|---|"]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['case']} | {r['impl']} | skipped: {r['skipped']} | |")
        else:
            lines.append(f"| {r['case']} | {r['impl']} | {1e3 * r['median_s']:.3f} | {1e3 * r['min_s']:.3f} |")
    lines += ["", "| case | published / ours (log_prob forward) |", "|---|---|"]
    lines += [f"| {r['case']} | {r['speedup']:.1f}x |" for r in ratios]
    md = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, f"distributions_{stamp}.md"), "w") as f:
        f.write(md)
    print(md)


if __name__ == "__main__":
    main()
