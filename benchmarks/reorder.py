"""Benchmark of ``utils.reverse_cuthill_mckee`` and what its ordering buys ``sparse_mm``.

Run from the repository root::

    python -m benchmarks.reorder --smoke     # seconds: CI's check that it works
    python -m benchmarks.reorder --quick     # 10^5 nodes, under a minute
    python -m benchmarks.reorder             # 10^6 nodes, a few minutes on 2 cores

Options: ``--out DIR`` (default benchmarks/results), ``--threads N`` (default 2),
``--reps N`` (timed rounds, default 7).

Matrices: the 9-point stencil of a k x k grid (benchmarks/_matrices.py "banded") in its
natural numbering, the same with its nodes numbered at random (``P A P^T``), and that
reordered by our RCM; a uniform random matrix (16 entries a row) as drawn and reordered.
For each reordered one: the ordering's time, ours against SciPy's
``reverse_cuthill_mckee`` on the same pattern (one process, alternating calls, median),
and the bandwidth (max |i - j|) each ordering gives.  Then ``sparse_mm(A, B)``
forward, A CSR float32 int64, at p = 1 and 16 on every form of the matrix: all forms
timed side by side in this one process, round by round, medians; GB/s on sparse_mm's
bytes model (``nnz*(index+value) + nnz*p*itemsize + n*p*itemsize``) and its fraction
of the triad bandwidth measured in the same run.  The forms' products are checked
against each other (permuted back) first.  Results:
benchmarks/results/reorder_{smoke,quick,full}.{json,md}.  Timings are never asserted.
"""
import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")   # before torch loads (see sparse_mm.py)

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import scipy.sparse.csgraph as csgraph  # noqa: E402
import torch  # noqa: E402

from . import _matrices as M  # noqa: E402
from . import _modes  # noqa: E402
from ._harness import env_threads  # noqa: E402
from ._machine import HERE, background_load, machine_info  # noqa: E402
from ._report import bytes_model  # noqa: E402
from .sparse_mm import measure_bandwidth  # noqa: E402

SIZES = {"full": (1000, 1_000_000), "quick": (320, 100_000), "smoke": (24, 512)}   # grid side k, uniform n
PS = (1, 16)


def _csr(idx: torch.Tensor, n: int) -> torch.Tensor:
    vals = torch.rand(idx.shape[1], generator=torch.Generator().manual_seed(1))
    return torch.sparse_coo_tensor(idx, vals, (n, n)).coalesce().to_sparse_csr()


def _bandwidth(A: torch.Tensor) -> int:
    rows = torch.repeat_interleave(torch.arange(A.shape[0]), A.crow_indices().diff())
    return int((rows - A.col_indices()).abs().max()) if A._nnz() else 0


def _median_ms(ts) -> float:
    return statistics.median(ts) * 1e3


def order_times(A: torch.Tensor, reps: int, tsgu) -> dict:
    """Our RCM and SciPy's on A's pattern, alternating, and the bandwidth each gives."""
    S = sp.csr_matrix((A.values().numpy(), A.col_indices().numpy(), A.crow_indices().numpy()), shape=A.shape)
    ours, theirs = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        perm = tsgu.utils.reverse_cuthill_mckee(A)
        ours.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        sperm = csgraph.reverse_cuthill_mckee(S)
        theirs.append(time.perf_counter() - t0)
    permuted = S[sperm][:, sperm].tocoo()
    return {"ours_ms": _median_ms(ours), "scipy_ms": _median_ms(theirs),
            "ours_bandwidth": _bandwidth(tsgu.utils.sparse_permute(A, perm)),
            "scipy_bandwidth": int(np.abs(permuted.row - permuted.col).max()) if permuted.nnz else 0}


def spmm_times(forms: dict, perms: dict, reps: int, bw: dict, tsgu) -> list:
    """sparse_mm forward on every form at each p, side by side: rounds of one call each.
    Form F is G[perm][:, perm] of one matrix G (perms[name]), so F @ B[perm] = (G @ B)[perm]."""
    rows = []
    for p in PS:
        n = next(iter(forms.values())).shape[0]
        B = torch.rand(n, p, generator=torch.Generator().manual_seed(2))
        inputs = {name: (A, B[perms[name]]) for name, A in forms.items()}
        want = None
        for name, (A, Bp) in inputs.items():       # the products agree, permuted back
            C = torch.empty(n, p)
            C[perms[name]] = tsgu.sparse_mm(A, Bp)
            want = C if want is None else want
            if not torch.allclose(C, want, rtol=1e-4, atol=1e-5):
                raise AssertionError(f"{name}: the product differs from the first form's")
        ts = {name: [] for name in inputs}
        for _ in range(reps):
            for name, (A, Bp) in inputs.items():
                t0 = time.perf_counter()
                tsgu.sparse_mm(A, Bp)
                ts[name].append(time.perf_counter() - t0)
        for name, A in forms.items():
            r = {"form": name, "p": p, "nnz": A._nnz(), "shape": list(A.shape), "dtype": "float32",
                 "index_dtype": "int64", "fwd_ms": _median_ms(ts[name]), "fwd_min_ms": min(ts[name]) * 1e3}
            r["fwd_GBps"] = bytes_model(r) / (r["fwd_ms"] / 1e3) / 1e9
            r["frac_triad"] = r["fwd_GBps"] / bw["triad_GBps"]
            rows.append(r)
    return rows


def run(mode: str, reps: int, bw: dict, tsgu) -> dict:
    k, n_uniform = SIZES[mode]
    n = k * k
    relabel = torch.randperm(n, generator=torch.Generator().manual_seed(0))
    grid = _csr(M.pattern(M.MatrixSpec("banded", n, n))[0], n)
    shuffled = tsgu.utils.sparse_permute(grid, relabel)
    uniform = _csr(M.pattern(M.MatrixSpec("uniform", n_uniform, n_uniform, 16))[0], n_uniform)
    cases = []
    for label, natural, given in ((f"9-point grid {k}x{k}", grid, shuffled), (f"uniform n={n_uniform} 16/row", None,
                                                                              uniform)):
        t = order_times(given, reps, tsgu)
        perm = tsgu.utils.reverse_cuthill_mckee(given)
        forms = {"as given": given, "RCM": tsgu.utils.sparse_permute(given, perm)}
        ident = torch.arange(given.shape[0])
        perms = {"as given": ident, "RCM": perm}
        if natural is not None:     # the grid's own numbering, and the random one it was given in
            forms = {"natural": natural, "random numbering": given, "RCM of it": forms["RCM"]}
            perms = {"natural": torch.argsort(relabel), "random numbering": ident, "RCM of it": perm}
        t["given_bandwidth"] = _bandwidth(given)
        cases.append({"matrix": label, "n": given.shape[0], "nnz": given._nnz(), "ordering": t,
                      "spmm": spmm_times(forms, perms, reps, bw, tsgu)})
        print(f"{label}: RCM ours {t['ours_ms']:.1f} ms, SciPy {t['scipy_ms']:.1f} ms; bandwidth "
              f"{t['given_bandwidth']} -> ours {t['ours_bandwidth']}, SciPy {t['scipy_bandwidth']}", flush=True)
        for r in cases[-1]["spmm"]:
            print(f"  p={r['p']:<3} {r['form']:<17} {r['fwd_ms']:8.2f} ms  {r['fwd_GBps']:5.1f} GB/s "
                  f"({r['frac_triad']:.0%} of triad)", flush=True)
    return {"cases": cases}


def write_markdown(doc: dict, path: str) -> None:
    m, bw = doc["machine"], doc["bandwidth"]
    lines = [f"# reverse_cuthill_mckee and sparse_mm on reordered matrices ({doc['mode']})", "",
             f"{m['cpu']}, {m['cores']} cores, {m['threads']} threads, torch {m['torch']}; triad "
             f"{bw['triad_GBps']:.1f} GB/s; other load {m['background_cpus_busy_start']:.2f} CPUs busy at the "
             f"start. Medians of {doc['reps']} rounds in one process.", "",
             "| matrix | n | nnz | bandwidth given | RCM ours ms | SciPy ms | SciPy / ours | bandwidth ours | "
             "bandwidth SciPy |", "|---|---|---|---|---|---|---|---|---|"]
    for c in doc["cases"]:
        t = c["ordering"]
        lines.append(f"| {c['matrix']} | {c['n']} | {c['nnz']} | {t['given_bandwidth']} | {t['ours_ms']:.3g} | "
                     f"{t['scipy_ms']:.3g} | {t['scipy_ms'] / t['ours_ms']:.2f}x | {t['ours_bandwidth']} | "
                     f"{t['scipy_bandwidth']} |")
    lines += ["", "sparse_mm forward (A CSR float32 int64), every form of a matrix side by side. GB/s on the bytes "
              "model nnz*(index+value) + nnz*p*itemsize + n*p*itemsize, which counts each gathered value of B "
              "once: where the gathered rows stay in cache (p = 16 on the grid), it exceeds the triad bandwidth.",
              "",
              "| matrix | p | form | ms | GB/s | % of triad | time / first form's |", "|---|---|---|---|---|---|---|"]
    for c in doc["cases"]:
        for p in PS:
            rows = [r for r in c["spmm"] if r["p"] == p]
            for r in rows:
                lines.append(f"| {c['matrix']} | {p} | {r['form']} | {r['fwd_ms']:.3g} | {r['fwd_GBps']:.1f} | "
                             f"{r['frac_triad']:.0%} | {r['fwd_ms'] / rows[0]['fwd_ms']:.2f} |")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    _modes.add_mode_args(ap, "10^5 nodes, under a minute")
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args(argv)
    mode = _modes.mode_of(args)
    reps = _modes.SMOKE_REPS if mode == "smoke" else max(5, args.reps)
    env_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    import torchsparsegradutils as tsgu

    machine = machine_info(args.threads)
    machine["background_cpus_busy_start"] = background_load(_modes.load_sample_s(mode))
    bw = measure_bandwidth(1 << 16, 1) if mode == "smoke" else measure_bandwidth()
    print(f"reorder benchmark ({mode}): {machine['cpu']}, {args.threads} threads; triad {bw['triad_GBps']:.1f} GB/s",
          flush=True)
    doc = {"mode": mode, "reps": reps, "machine": machine, "bandwidth": bw, **run(mode, reps, bw, tsgu)}
    machine["background_cpus_busy_end"] = background_load(_modes.load_sample_s(mode))
    base = os.path.join(args.out, f"reorder_{mode}")
    with open(base + ".json", "w") as f:
        json.dump(doc, f, indent=1)
    write_markdown(doc, base + ".md")
    print(f"wrote {base}.json and .md", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
