"""Benchmark suite for ``torchsparsegradutils.sparse_mm`` (sparse A @ dense B, sparse A.grad).

Run from the repository root::

    python -m benchmarks.sparse_mm --smoke            # seconds: CI's check that it works (numbers meaningless)
    python -m benchmarks.sparse_mm --quick            # about a minute
    python -m benchmarks.sparse_mm                    # full grid, about 40 minutes on 2 cores (20 with --timing fresh)
    python -m benchmarks.sparse_mm --graph /work/shared/data/cora.npz   # add a real graph

Options: ``--out DIR`` (default benchmarks/results), ``--threads N`` (default 2),
``--setup-published`` (create the published release's venv in quick mode too),
``--no-published``, ``--no-memory``, ``--timing {both,fresh,in-process}``.

What it does, side by side in one run, for every case (matrix x p x dtype x index dtype):

* methods: ours (COO and CSR input), ``torch.sparse.mm`` (COO and CSR), dense
  ``torch.mm`` where A fits (<= 2 GB), the gather-based backward of the published
  algorithm (``(G[row] * B[col]).sum(1)`` and ``torch.sparse.mm(A.t(), G)``), a
  Python loop of ``torch.sparse.mm`` over the items (batched cases), and the
  published ``torchsparsegradutils`` release from PyPI, which shares our import
  name and so runs in its own venv (``benchmarks/.venv-published``, git-ignored)
  through ``benchmarks/_worker.py``;
* correctness first: every method's C, grad_A (on A's pattern) and grad_B against
  a float64 reference, with a relative tolerance;
* timing: warm-up, then median and min of >= 5 runs of forward, backward
  (grad_A + grad_B) and forward+backward, each separately, each method on its own
  loops, one after another;
* and side by side in this one process (``--timing``: both by default, ``fresh`` for
  the former only, ``in-process`` for this only): every method of ours and PyTorch's
  checked, then a warm-up that allocates and frees like a training step (a few hundred
  MB of assorted sizes, some over glibc's 32 MiB mmap ceiling) and one untimed step of
  each, then interleaved rounds (round r: every method's forward, then its
  forward+backward, in turn), with each call's user and system CPU time and minor page
  faults (benchmarks/_harness.time_in_process); the published release, in its own
  venv, cannot join them;
* peak memory of forward+backward in a fresh process per matrix (high-water mark
  reset before each method), against the necessary amount (C + grad_B + grad_A values);
* GFLOP/s (2 nnz p) and GB/s against the bytes model
  ``nnz*(index+value) + nnz*p*itemsize + n*p*itemsize``, and as a fraction of the
  machine's copy / triad bandwidth measured in the same run.

It writes ``sparse_mm_{smoke,quick,full}.json`` / ``.md`` and PNG plots under ``--out``
and prints, at the end, which of the issue's targets hold and which miss.
Timings are never asserted on: the script exits 0 whatever they are.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

# PyTorch's OpenMP threads spin after each parallel region by default.  On a shared
# 2-vCPU machine that made torch.sparse.mm take 16-32 ms instead of 0.2-0.6 ms
# (scheduler-tick multiples) and slowed our pthreads too, so the suite runs with
# passive waiting unless the caller set a policy.  It must be set before torch loads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

from . import _harness as H
from . import _matrices as M
from . import _modes, _report
# re-exported: the other drivers took these from here before _machine.py held them
from ._machine import PUBLISHED_PACKAGE, background_load, ensure_published, machine_info  # noqa: F401

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "_worker.py")
LOCAL_METHODS = ["ours COO", "ours CSR", "torch COO", "torch CSR", "torch loop", "dense", "gather"]
PUBLISHED_METHODS = ["published COO", "published CSR"]


@dataclass
class Group:
    """One matrix, one dtype and index dtype, several p: the unit of input generation."""
    spec: M.MatrixSpec
    ps: Tuple[int, ...]
    dtype: str = "float32"
    index_dtype: str = "int64"
    memory: bool = True


def full_grid(graph: Optional[str]) -> List[Group]:
    """About 22 minutes on this shared 2-core machine.  Left out for time (said so in the
    report): n = 1e6 with 64 entries per row, p = 256 beyond n = 1e4, p = 64 at n >= 1e6 and
    at 64 per row, p > 1 at n = 1e6 with 16 per row.  (The saved full run of 2025-11 used a
    larger grid, listed in its JSON, and took 31 minutes.)"""
    U = lambda n, k: M.MatrixSpec("uniform", n, n, k)  # noqa: E731
    batched = M.MatrixSpec("batched", 1024, 1024, batch=128, nnz_item=4096)
    groups = [
        Group(U(10_000, 16), (1, 16, 64, 256)),
        Group(U(100_000, 4), (16,)),
        Group(U(100_000, 16), (1, 16, 64)),
        Group(U(100_000, 64), (16,)),
        Group(U(1_000_000, 4), (1, 16)),
        Group(U(1_000_000, 16), (1,)),
        Group(M.MatrixSpec("powerlaw", 100_000, 100_000, 16), (1, 16, 64)),
        Group(M.MatrixSpec("banded", 1_000_000, 1_000_000), (1, 16)),
        Group(batched, (1, 16, 64)),
        # dtype / index-dtype variants
        Group(U(100_000, 16), (16,), dtype="float64", memory=False),
        Group(U(100_000, 16), (16,), index_dtype="int32", memory=False),
        Group(batched, (16,), dtype="float64", index_dtype="int32", memory=False),
        Group(U(100_000, 16), (16, 64), dtype="float16", memory=False),
        Group(U(100_000, 16), (16, 64), dtype="bfloat16", memory=False),
        Group(batched, (64,), dtype="bfloat16", memory=False),
    ]
    if graph:
        groups.insert(9, Group(M.graph_spec(graph), (16, 64)))
    return groups


def quick_grid(graph: Optional[str]) -> List[Group]:
    """About a minute on 2 cores: small versions of each kind of matrix."""
    groups = [
        Group(M.MatrixSpec("uniform", 5_000, 5_000, 16), (1, 16)),
        Group(M.MatrixSpec("powerlaw", 20_000, 20_000, 16), (16,)),
        Group(M.MatrixSpec("banded", 102_400, 102_400), (16,), memory=False),
        Group(M.MatrixSpec("batched", 1024, 1024, batch=128, nnz_item=4096), (16,)),
        Group(M.MatrixSpec("uniform", 5_000, 5_000, 16), (16,), dtype="float64", index_dtype="int32",
              memory=False),
        Group(M.MatrixSpec("uniform", 5_000, 5_000, 16), (16,), dtype="float16", memory=False),
        Group(M.MatrixSpec("uniform", 5_000, 5_000, 16), (16,), dtype="bfloat16", memory=False),
    ]
    if graph:
        groups.append(Group(M.graph_spec(graph), (16,), memory=False))
    return groups


def smoke_grid(graph: Optional[str]) -> List[Group]:
    """CI's smoke run: each kind of matrix, dtype and index dtype of the quick grid at a
    tiny size, p = 1 once; the peak-memory worker (one process) for two of them.  The banded matrix
    is the largest, so that SMOKE_LIMITS skip its dense methods (the skip rows)."""
    groups = [
        Group(M.MatrixSpec("uniform", 64, 64, 4), (1, 4)),
        Group(M.MatrixSpec("banded", 1024, 1024), (4,)),
        Group(M.MatrixSpec("batched", 16, 16, batch=4, nnz_item=16), (4,), memory=False),
        # not float32/int64: out of the plots, whose cost grows with their matrices
        Group(M.MatrixSpec("powerlaw", 64, 64, 4), (4,), dtype="float64", index_dtype="int32", memory=False),
        Group(M.MatrixSpec("uniform", 64, 64, 4), (4,), dtype="float16", memory=False),
        Group(M.MatrixSpec("uniform", 64, 64, 4), (4,), dtype="bfloat16", memory=False),
    ]
    if graph:
        groups.append(Group(M.graph_spec(graph), (4,), memory=False))
    return groups


GRIDS = {"full": full_grid, "quick": quick_grid, "smoke": smoke_grid}
QUICK_LIMITS = {"dense": 0.25e9, "densify": 0.25e9, "gather": 1e9}
# the banded 1024 x 1024 (4 MB dense) is skipped, the 64 x 64 ones are not
SMOKE_LIMITS = {"dense": 1e6, "densify": 1e6, "gather": 1e9}
FULL_LIMITS = {"dense": H.DENSE_LIMIT, "densify": H.DENSIFY_LIMIT, "gather": H.GATHER_LIMIT}


# --------------------------------------------------------------------------- machine

def measure_bandwidth(n_elems: int = 1 << 25, reps: int = 9) -> Dict[str, float]:
    """Copy (a = b) and triad (a = b + s*c) through torch on float32 arrays far larger than
    the caches, counting the bytes read and written; median GB/s of `reps` runs."""
    a, b, c = (torch.rand(n_elems) for _ in range(3))
    item = a.element_size()
    out = {}
    for name, op, nbytes in (("copy", lambda: a.copy_(b), 2 * n_elems * item),
                             ("triad", lambda: torch.add(b, c, alpha=3.0, out=a), 3 * n_elems * item)):
        op()
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            op()
            ts.append(time.perf_counter() - t0)
        out[name + "_GBps"] = nbytes / statistics.median(ts) / 1e9
    out["array_MB"] = n_elems * item / 1e6
    return out


# --------------------------------------------------------------------------- workers

def run_worker(python: str, job: dict, memory: bool, on_row, timeout: float = 1800) -> dict:
    """Run _worker.py with `python` on `job`; stream its progress rows to on_row."""
    env = dict(os.environ, OMP_NUM_THREADS=str(job["threads"]))
    env.pop("PYTHONPATH", None)
    if memory:
        # A fixed mmap threshold also turns glibc's dynamic threshold off: every large
        # block is unmapped when freed, so one method's freed memory cannot hide the next one's.
        env.update(MALLOC_MMAP_THRESHOLD_="65536", MALLOC_TRIM_THRESHOLD_="131072")
    proc = subprocess.Popen([python, "-I", WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd="/")
    proc.stdin.write(json.dumps(job))
    proc.stdin.close()
    err_tail = []
    deadline = time.time() + timeout
    for line in proc.stderr:
        line = line.strip()
        if line.startswith('{"progress"'):
            on_row(json.loads(line)["progress"])
        elif line and "Warning" not in line and "warnings.warn" not in line and "sparse_csr_tensor" not in line:
            err_tail = (err_tail + [line])[-5:]
        if time.time() > deadline:
            proc.kill()
            break
    out = proc.stdout.read()
    rc = proc.wait()
    if rc != 0 or not out.strip():
        return {"error": f"worker exited {rc}: {' | '.join(err_tail)}"}
    return json.loads(out.strip().splitlines()[-1])


# --------------------------------------------------------------------------- local timing

def time_local(inp: dict, ref: dict, reps: int, methods, warmup: int = 1):
    """Check, then time, every method of this process on one case; yield a record per method."""
    for name in LOCAL_METHODS:
        row = {"method": name}
        try:
            prep = methods[name](inp)
            row["check"] = H.check(prep, inp, ref)
            row["timing"] = H.time_method(prep, inp["G"], reps, warmup=warmup)
            row["bwd_skip"] = prep.bwd_skip
            del prep
        except Exception as e:  # noqa: BLE001 - recorded in the results, never fatal
            row.update(H.failure(e))
        yield row


def time_side_by_side(inp: dict, ref: dict, reps: int, methods, warm_mb: float, warmup: int = 1) -> Dict[str, dict]:
    """Every method of this process on one case side by side (_harness.time_in_process):
    each checked, then a training-like allocation, then interleaved rounds; {method: record}."""
    rows, preps = {}, {}
    for name in LOCAL_METHODS:
        rows[name] = {}
        try:
            prep = methods[name](inp)
            rows[name]["check"] = H.check(prep, inp, ref)
            preps[name] = prep
        except Exception as e:  # noqa: BLE001 - recorded in the results, never fatal
            rows[name].update(H.failure(e))
    if preps:
        t = H.time_in_process(preps, inp["G"], reps, warm_mb, warmup=warmup, budget_s=2.0, max_reps=30)
        for name, res in t["methods"].items():
            rows[name].update(res, rounds=t["rounds"], warm_up=t["warm_up"])
    return rows


def _fmt_ms(t) -> str:
    if isinstance(t, dict):
        return f"{t['median_s'] * 1e3:9.2f}"
    return "     skip"


def progress_line(t0: float, label: str, row: dict) -> str:
    head = f"[{time.time() - t0:6.0f}s] {label:<44} {row['method']:<14}"
    if "in_process" in row:
        ip = row["in_process"]
        if "skip" in ip or "error" in ip:
            return head + " in one process: " + (ip.get("skip") or "ERROR " + ip["error"])[:80]
        ok = "ok" if ip["check"]["ok"] else f"WRONG {ip['check']}"
        return (head + f" in one process: fwd {_fmt_ms(ip['fwd'])} ms  bwd {_fmt_ms(ip['bwd'])} ms  "
                f"{ip['usage']['fwd']['minflt']:.0f} faults/fwd  {ok}")
    if "skip" in row or "error" in row:
        return head + " " + (row.get("skip") or "ERROR " + row["error"])[:90]
    if "memory" in row:
        mem = row["memory"]
        return head + f" peak {mem['peak_bytes'] / 1e6:9.1f} MB (necessary {mem['necessary_bytes'] / 1e6:.1f} MB)"
    t = row["timing"]
    ok = "ok" if row["check"]["ok"] else f"WRONG {row['check']}"
    return head + f" fwd {_fmt_ms(t['fwd'])} ms  bwd {_fmt_ms(t['bwd'])} ms  fwd+bwd {_fmt_ms(t['fwdbwd'])} ms  {ok}"


def case_label(spec: M.MatrixSpec, p: int, dtype: str, index_dtype: str) -> str:
    return f"{spec.label} p={p} {dtype[0]}{dtype[-2:]}/i{index_dtype[-2:]}"


# --------------------------------------------------------------------------- main

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    _modes.add_mode_args(ap, "small grid, about a minute")
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5, help="timed runs per phase (>= 5)")
    ap.add_argument("--graph", default=None, help="optional .npz graph (edge_index), e.g. cora.npz")
    ap.add_argument("--venv", default=os.path.join(HERE, ".venv-published"))
    ap.add_argument("--setup-published", action="store_true", help="create the venv in quick mode too")
    ap.add_argument("--no-published", action="store_true")
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--report-only", metavar="JSON", help="rewrite the markdown and plots of a saved run")
    _modes.add_timing_arg(ap, "each method on its own loops, one after another (ours and PyTorch's in this "
                              "process, the published release in a fresh worker)")
    args = ap.parse_args(argv)
    if args.report_only:
        return write_report(args.report_only)
    mode = _modes.mode_of(args)
    reps = _modes.SMOKE_REPS if mode == "smoke" else max(5, args.reps)
    warmup = _modes.SMOKE_WARMUP if mode == "smoke" else 1
    t_start = time.time()
    H.env_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)

    machine = machine_info(args.threads)
    print(f"sparse_mm benchmarks ({mode}): {machine['cpu']}, {machine['cores']} cores, "
          f"{args.threads} threads, torch {machine['torch']}", flush=True)
    machine["background_cpus_busy_start"] = background_load(_modes.load_sample_s(mode))
    bw = measure_bandwidth(1 << 16, 1) if mode == "smoke" else measure_bandwidth()
    print(f"bandwidth: copy {bw['copy_GBps']:.1f} GB/s, triad {bw['triad_GBps']:.1f} GB/s; "
          f"other load before the run: {machine['background_cpus_busy_start']:.2f} CPUs busy", flush=True)

    if args.no_published:
        pub_py, pub_msg = None, "disabled with --no-published"
    else:
        pub_py, pub_msg = ensure_published(args.venv, create=(mode == "full" or args.setup_published))
    print(f"published release: {pub_msg if pub_py else 'unavailable: ' + pub_msg}", flush=True)

    groups = GRIDS[mode](args.graph)
    limits = {"full": FULL_LIMITS, "quick": QUICK_LIMITS, "smoke": SMOKE_LIMITS}[mode]
    H.set_limits(**limits)
    methods = H.methods_here(published=False)
    import torchsparsegradutils as ours
    recs: Dict[Tuple[int, int, str], dict] = {}        # (group, p, method) -> record

    def rec(gi: int, p: int, method: str) -> dict:
        g = groups[gi]
        if (gi, p, method) not in recs:
            recs[(gi, p, method)] = {"matrix": g.spec.label, "kind": g.spec.kind, "spec": g.spec.to_dict(),
                                     "dtype": g.dtype, "index_dtype": g.index_dtype, "p": p, "method": method}
        return recs[(gi, p, method)]

    def on_worker_row(kind: str):
        def on_row(row):
            gi = row["group"]
            r = rec(gi, row["p"], row["method"])
            if kind == "memory":
                if "memory" in row:
                    r["memory"] = row["memory"]
                elif "error" in row:
                    r["memory_error"] = row["error"]
            else:
                r.update({k: v for k, v in row.items() if k not in ("group", "p", "method", "traceback")})
            g = groups[gi]
            label = case_label(g.spec, row["p"], g.dtype, g.index_dtype) + (" [mem]" if kind == "memory" else "")
            print(progress_line(t_start, label, row), flush=True)
        return on_row

    def mark(gis, names, key, why):
        for gi in gis:
            for p in groups[gi].ps:
                for name in names:
                    rec(gi, p, name).setdefault(key, why)

    # The quick and smoke modes start each worker once for all their matrices; the full mode once per matrix.
    batches = [list(range(len(groups)))] if mode != "full" else [[i] for i in range(len(groups))]
    for batch in batches:
        for gi in batch:
            g = groups[gi]
            dtype, itype = getattr(torch, g.dtype), getattr(torch, g.index_dtype)
            indices, shape = M.pattern(g.spec)
            for p in g.ps:
                inp = M.make_inputs(indices, shape, p, dtype, itype, g.spec.kind)
                ref = H.reference(inp)
                label = case_label(g.spec, p, g.dtype, g.index_dtype)
                for name in LOCAL_METHODS:
                    rec(gi, p, name).update(shape=list(shape), nnz=int(indices.shape[1]))
                for row in time_local(inp, ref, reps, methods, warmup) if args.timing != "in-process" else ():
                    rec(gi, p, row["method"]).update(row)
                    print(progress_line(t_start, label, row), flush=True)
                if args.timing != "fresh":
                    warm_mb = _modes.SMOKE_WARM_MB if mode == "smoke" else _modes.WARM_MB
                    for name, ip in time_side_by_side(inp, ref, reps, methods, warm_mb, warmup).items():
                        rec(gi, p, name)["in_process"] = ip
                        print(progress_line(t_start, label, {"method": name, "in_process": ip}), flush=True)
                del inp, ref
            for p in g.ps:            # shape and nnz for the published rows too
                for name in PUBLISHED_METHODS:
                    rec(gi, p, name).update(shape=list(shape), nnz=int(indices.shape[1]))
        job = {"groups": [{"id": gi, "spec": groups[gi].spec.to_dict(), "ps": list(groups[gi].ps),
                           "dtype": groups[gi].dtype, "index_dtype": groups[gi].index_dtype} for gi in batch],
               "reps": reps, "warmup": warmup, "threads": args.threads, "limits": limits,
               "smoke": mode == "smoke"}
        if pub_py and args.timing != "in-process":
            out = run_worker(pub_py, dict(job, mode="time", methods=PUBLISHED_METHODS, published=True),
                             False, on_worker_row("time"))
            if "error" in out:
                mark(batch, PUBLISHED_METHODS, "unavailable", out["error"])
        elif not pub_py:
            mark(batch, PUBLISHED_METHODS, "unavailable", pub_msg)
        mem_batch = [gi for gi in batch if groups[gi].memory]
        if mem_batch and not args.no_memory:
            mjob = dict(job, groups=[j for j in job["groups"] if j["id"] in mem_batch])
            out = run_worker(sys.executable, dict(mjob, mode="memory", methods=LOCAL_METHODS, published=False),
                             True, on_worker_row("memory"))
            if "error" in out:
                mark(mem_batch, LOCAL_METHODS, "memory_error", out["error"])
            if pub_py:
                out = run_worker(pub_py, dict(mjob, mode="memory", methods=PUBLISHED_METHODS, published=True),
                                 True, on_worker_row("memory"))
                if "error" in out:
                    mark(mem_batch, PUBLISHED_METHODS, "memory_error", out["error"])
    results = list(recs.values())

    elapsed = time.time() - t_start
    machine["background_cpus_busy_end"] = background_load(_modes.load_sample_s(mode))
    doc = {"mode": mode, "machine": machine, "bandwidth": bw, "published": {"available": bool(pub_py),
           "detail": pub_msg, "package": PUBLISHED_PACKAGE}, "ours": {"version": ours.__version__},
           "threads": args.threads, "reps": reps, "elapsed_s": elapsed, "timing": args.timing,
           "grid": [{"matrix": g.spec.label, "ps": list(g.ps), "dtype": g.dtype, "index_dtype": g.index_dtype,
                     "memory": g.memory} for g in groups],
           "notes": _report.grid_notes(mode), "results": results}
    stem = os.path.join(args.out, f"sparse_mm_{mode}")
    with open(stem + ".json", "w") as f:
        json.dump(doc, f, indent=1, default=str)
    return write_report(stem + ".json")


def write_report(json_path: str) -> int:
    """Targets, markdown and plots from a results JSON (the one just written, or a saved one)."""
    with open(json_path) as f:
        doc = json.load(f)
    for r in doc["results"]:
        _report.derive(r, doc["bandwidth"])
    doc["targets"] = _report.targets(doc["results"], doc["bandwidth"])
    with open(json_path, "w") as f:
        json.dump(doc, f, indent=1, default=str)
    stem = json_path[:-len(".json")] if json_path.endswith(".json") else json_path
    with open(stem + ".md", "w") as f:
        f.write(_report.markdown(doc))
    plots = _report.plots(doc, os.path.dirname(stem) or ".", doc["mode"])
    print()
    print(_report.headline_table(doc))
    print()
    print(_report.targets_text(doc["targets"]))
    print(f"\nwrote {json_path}, {stem}.md" + (f", {', '.join(plots)}" if plots else "")
          + f"  (run took {doc['elapsed_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
