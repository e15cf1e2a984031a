"""Benchmark of the per-call cost: what every call on a small matrix pays, beyond its arithmetic.

    python -m benchmarks.per_call --smoke                  # seconds: CI's check that it works
    python -m benchmarks.per_call --quick                  # about 10 s (a minute with --baseline)
    python -m benchmarks.per_call                          # more calls and rounds
    python -m benchmarks.per_call --baseline /path/to/other/checkout   # before / after, side by side

(a) sparse_mm at 4 x 4 (p = 4) and 64 x 64 (p = 16): forward without grad, and
    forward + backward, for ours (COO, CSR, SparseCSR) against ``torch.sparse.mm``
    (COO, CSR): the cases of benchmarks/training_loop.py (b), whose code runs them.
(b) sparse_triangular_solve of a 2-D lower-triangular CSR A (about 5 entries a row),
    n = 3, 30, 300, p = 1, 2, float64, without grad: ours (CSR, SparseCSR) against
    ``torch.triangular_solve(B, A_csr, upper=False)``.

Each time is a loop of many calls divided by their number; the methods take turns
(interleaved loops) and the median is reported.  Every method is checked against a
dense float64 reference first.  With ``--baseline DIR`` every measurement runs in
worker processes, alternating between this checkout and DIR (e.g. a clone of main,
built in place) round by round; ratios are medians over the rounds of each round's
ratio.  The smoke mode (a few calls, one loop, no warm-up) measures this checkout in
one such worker.  Results: benchmarks/results/per_call_{smoke,quick,full}.{json,md}.
Timings are never asserted on.
"""
import importlib.util
import os
import subprocess
import sys
import time
import warnings

# Passive OpenMP waiting on a shared machine (see benchmarks/sparse_mm.py); before torch loads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")
warnings.filterwarnings("ignore", message=".*[Ss]parse.*")


def _load(name):
    """benchmarks/<name>.py by path: a worker runs with another checkout on sys.path."""
    spec = importlib.util.spec_from_file_location(f"_per_call_{name}", os.path.join(HERE, f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


TL = _load("training_loop")   # its per-call cases of sparse_mm, and the rounds' statistics

CASES = {
    "full": {"mm": {"sizes": [(4, 2, 4), (64, 8, 16)], "calls": 3000, "reps": 9},
             "trisolve": {"sizes": [(3, 1), (3, 2), (30, 1), (30, 2), (300, 1), (300, 2)], "calls": 2000, "reps": 9}},
    "quick": {"mm": {"sizes": [(4, 2, 4), (64, 8, 16)], "calls": 1000, "reps": 7},
              "trisolve": {"sizes": [(3, 1), (30, 2), (300, 1)], "calls": 500, "reps": 7}},
    "smoke": {"mm": {"sizes": [(4, 2, 4), (64, 8, 16)], "calls": 4, "reps": 1, "warmup": 0},
              "trisolve": {"sizes": [(3, 1), (30, 2)], "calls": 2, "reps": 1, "warmup": 0}},
}
PARTS = ("mm", "trisolve")
MM_METHODS = TL.CALL_METHODS
TRI_METHODS = ["ours CSR", "ours SparseCSR", "torch CSR"]


# --------------------------------------------------------------------------- (b) triangular solve

def _tri_setups(tsgu, n, p):
    gen = torch.Generator().manual_seed(5)
    keep = torch.rand(n, n, generator=gen) < min(1.0, 4.0 / n)
    D = (torch.randn(n, n, generator=gen, dtype=torch.float64) * keep).tril(-1) * 0.5
    D.diagonal().copy_(1.0 + torch.rand(n, generator=gen, dtype=torch.float64))
    B = torch.randn(n, p, generator=gen, dtype=torch.float64)
    A = D.to_sparse_csr()
    S = tsgu.SparseCSR(A.crow_indices(), A.col_indices(), A.values(), (n, n))
    fns = {"ours CSR": lambda: tsgu.sparse_triangular_solve(A, B, upper=False),
           "ours SparseCSR": lambda: tsgu.sparse_triangular_solve(S, B, upper=False),
           "torch CSR": lambda: torch.triangular_solve(B, A, upper=False).solution}
    ref = torch.linalg.solve_triangular(D, B, upper=False)
    for method, fn in fns.items():
        err = (fn() - ref).abs().max().item()
        if err > 1e-9 * max(ref.abs().max().item(), 1.0):
            raise AssertionError(f"{method} at n={n}, p={p}: error {err:.2e}")
    return fns


def measure_trisolve(tsgu, cfg):
    res = {}
    with torch.no_grad():
        for n, p in cfg["sizes"]:
            fns = _tri_setups(tsgu, n, p)
            times = {k: [] for k in fns}
            warm = cfg.get("warmup", 1)
            for r in range(warm + cfg["reps"]):       # the first round warms up
                for method, fn in fns.items():
                    t0 = time.perf_counter()
                    for _ in range(cfg["calls"]):
                        fn()
                    if r >= warm:
                        times[method].append((time.perf_counter() - t0) / cfg["calls"])
            res[f"n={n} p={p}"] = {k: TL._stats(v) for k, v in times.items()}
    return res


# --------------------------------------------------------------------------- workers and rounds

def run_here(mode, part, threads):
    import torchsparsegradutils as tsgu
    torch.set_num_threads(threads)
    cfg = CASES[mode][part]
    return TL.measure_calls(tsgu, cfg) if part == "mm" else measure_trisolve(tsgu, cfg)


def measure(mode, threads, rounds, baseline):
    """training_loop's alternating rounds over this benchmark's parts."""
    return TL.measure(mode, threads, rounds, baseline, parts=PARTS, here=run_here, script=__file__)


# --------------------------------------------------------------------------- report

def _table(doc, part, methods, ratios):
    """A markdown table of `part`: a row per case, the methods' times and then the
    ratios [(name, fn(row) -> float)], each for every checkout."""
    impls = list(doc["results"])
    heads = [f"{m} ({i})" for m in methods for i in impls] + [f"{name} ({i})" for name, _ in ratios for i in impls]
    lines = ["| case | " + " | ".join(heads) + " |", "|---" * (1 + len(heads)) + "|"]
    for case in doc["results"][impls[0]][part]:
        rows = {i: doc["results"][i][part][case] for i in impls}
        cells = [TL._t(rows[i][m], "us") for m in methods for i in impls]
        cells += [f"{fn(rows[i]):.2f}" for _, fn in ratios for i in impls]
        lines.append(f"| {case} | " + " | ".join(cells) + " |")
    return lines


def _vs_torch(prefix):
    """fn(row): the best of the methods named `prefix`.. against the faster of torch's."""
    return lambda row: TL._ratio(TL._best(row, prefix), TL._best(row, "torch"))


def write_report(doc, path_md):
    lines = [f"# per_call ({doc['mode']})", "",
             f"{doc['machine']['cpu']}, {doc['machine']['threads']} threads, torch {doc['machine']['torch']}; "
             f"{doc['date']}.  Microseconds per call, medians of interleaved loops; with a baseline, medians "
             f"over {doc['rounds']} alternating rounds of worker processes.  Commits: " +
             ", ".join(f"{k} {v}" for k, v in doc.get("commits", {}).items()) + ".", ""]
    lines += ["## (a) sparse_mm", ""]
    lines += _table(doc, "mm", MM_METHODS, [("best ours / best torch", _vs_torch("ours"))])
    lines += ["", "### each of our operands against the faster of PyTorch's two layouts", ""]
    lines += _table(doc, "mm", [], [(f"{m} / best torch", _vs_torch(m)) for m in MM_METHODS if m.startswith("ours")])
    lines += ["", "best ours / best torch: the fastest of our operand layouts against the faster of "
              "PyTorch's two, per round (issue 10's target: <= 3 for the 4 x 4 forward without grad).", ""]
    lines += ["## (b) sparse_triangular_solve, 2-D CSR, float64, no grad", ""]
    lines += _table(doc, "trisolve", TRI_METHODS,
                    [(f"{m} / torch", lambda row, m=m: TL._ratio(row[m], row["torch CSR"]))
                     for m in TRI_METHODS if m.startswith("ours")])
    lines += ["", "torch: `torch.triangular_solve(B, A_csr, upper=False)`.", "",
              "PyTorch's CSR kernels (`torch.sparse.mm`, `torch.triangular_solve`) open parallel regions "
              "even on tiny inputs, so with more than one thread their times swing with the machine's load "
              "and the threads' wake-ups (run with `--threads 1` to see them without); ours run tiny inputs "
              "on one thread, and PyTorch's COO product is single-threaded at these sizes.", ""]
    with open(path_md, "w") as f:
        f.write("\n".join(lines))
    return "\n".join(lines)


def _commits(baseline):
    """{impl: the git commit it was measured at (with "+" when its tree had changes)}."""
    out = {}
    for name, root in ({"before": baseline, "after": ROOT} if baseline else {"after": ROOT}).items():
        try:
            sha = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True,
                                 text=True, check=True).stdout.strip()
            dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
                                   capture_output=True, text=True, check=True).stdout.strip()
            out[name] = sha + ("+" if dirty else "")
        except (OSError, subprocess.CalledProcessError):
            out[name] = "unknown"
    return out


def main(argv=None) -> int:
    return TL.cli(argv, "per_call", __doc__.split("\n")[0], "fewer calls and cases; about 10 s", CASES, measure,
                  write_report, extra=lambda args: {"commits": _commits(args.baseline)})


if __name__ == "__main__":
    sys.exit(TL.entry(run_here, main))
