"""The driver shared by benchmarks/indexed_matmul.py, benchmarks/sparse_logsumexp.py,
benchmarks/reduce.py, benchmarks/sparse_softmax.py and benchmarks/spgemm.py.

Every method runs in a _ops_worker.py subprocess: ours and the PyTorch
formulations with this interpreter, the published release (where the op has one)
with its venv's (created by benchmarks/sparse_mm.py's ensure_published).  Each
method is timed two ways (``--timing``, default both), in separate workers:

* fresh worker: the methods one after another in a worker started for the case (full
  mode) or the run, each timed in its own loops (_harness.time_method);
* in one process, side by side: all of ours and the PyTorch formulations in one worker,
  after a warm-up that allocates and frees like a training step, timed in interleaved
  rounds, with each call's user and system CPU time and minor page faults
  (_harness.time_in_process): what a training script that has already allocated sees.
  The published release shares our import name, so it is timed in a fresh worker only.

Each case's peak memory is measured in a fresh process; in the smoke mode one worker per
interpreter does all of it, once.  Results go to ``<out>/<name>_<mode>.json``
and ``.md`` (and with plot, ``.png``, of the fresh worker's times): medians of forward,
backward and forward+backward, the ratios of the compared methods' times to ours in both
ways, and peak memory against the necessary amount (output + gradients).  Timings are
never asserted.
"""
import argparse
import json
import os
import subprocess
import sys
import time
from typing import Dict, List, Optional, Sequence

from . import _modes
from ._machine import background_load, ensure_published, machine_info   # not torch: the workers load it

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "_ops_worker.py")


def run_worker(python: str, job: dict, memory: bool, timeout: float = 1800) -> dict:
    """One _ops_worker.py run; its progress rows are printed as they arrive."""
    env = dict(os.environ, OMP_NUM_THREADS=str(job["threads"]))
    env.pop("PYTHONPATH", None)
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if memory:   # freed large blocks go back to the OS, so one method cannot hide the next one's
        env.update(MALLOC_MMAP_THRESHOLD_="65536", MALLOC_TRIM_THRESHOLD_="131072")
    try:
        r = subprocess.run([python, "-I", WORKER], input=json.dumps(job), capture_output=True, text=True,
                           env=env, cwd="/", timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"worker timed out after {timeout:.0f} s"}
    for line in r.stderr.splitlines():
        if line.startswith('{"progress"'):
            print("   ", _row_line(json.loads(line)["progress"]), flush=True)
    if r.returncode != 0 or not r.stdout.strip():
        tail = [ln for ln in r.stderr.splitlines() if ln and not ln.startswith('{"progress"')][-3:]
        return {"error": f"worker exited {r.returncode}: {' | '.join(tail)}"}
    return json.loads(r.stdout.strip().splitlines()[-1])


def _runs(pub_py: Optional[str], local: List[str], fresh: bool, side: bool, memory: bool, smoke: bool) -> list:
    """(interpreter, methods, phases) of each worker a batch of cases takes: ours and the
    published release each timed on its own ("time"), ours side by side in one process
    ("in-process": the release shares our import name, so it cannot join them), peak
    memory ("memory"); in the smoke mode one worker per interpreter does its phases in turn."""
    pub = [(pub_py, ["published"])] if pub_py else []
    runs = [(py, ms, ["time"]) for py, ms in [(sys.executable, local)] + pub] if fresh else []
    runs += [(sys.executable, local, ["in-process"])] if side else []
    runs += [(py, ms, ["memory"]) for py, ms in [(sys.executable, local)] + pub] if memory else []
    if smoke:
        merged: Dict[str, tuple] = {}
        for py, ms, phases in runs:
            merged.setdefault(py, (ms, []))[1].extend(phases)
        runs = [(py, ms, phases) for py, (ms, phases) in merged.items()]
    return runs


def _ms(t) -> str:
    return f"{t['median_s'] * 1e3:.1f}" if isinstance(t, dict) else "-"


def _row_line(row: dict) -> str:
    head = f"case {row['case']:<3} {row['method']:<10}"
    if "in_process" in row:
        ip = row["in_process"]
        if "skip" in ip or "error" in ip:
            return head + " in one process: " + (ip.get("skip") or "ERROR " + ip["error"])[:80]
        ok = "ok" if ip["check"]["ok"] else f"WRONG {ip['check']}"
        return (head + f" in one process: fwd {_ms(ip['fwd'])} ms  bwd {_ms(ip['bwd'])} ms  "
                f"fwd+bwd {_ms(ip['fwdbwd'])} ms  {ip['usage']['fwd']['minflt']:.0f} faults/fwd  {ok}")
    if "skip" in row or "error" in row:
        return head + " " + (row.get("skip") or "ERROR " + row["error"])[:100]
    if "memory" in row and "timing" not in row:
        return head + f" peak {row['memory']['peak_bytes'] / 1e6:.0f} MB"
    t = row["timing"]
    ok = "ok" if row["check"]["ok"] else f"WRONG {row['check']}"
    mem = f"  peak {row['memory']['peak_bytes'] / 1e6:.0f} MB" if "memory" in row else ""
    return head + f" fwd {_ms(t['fwd'])} ms  bwd {_ms(t['bwd'])} ms  fwd+bwd {_ms(t['fwdbwd'])} ms  {ok}{mem}"


def main(name: str, doc: str, grids: Dict[str, List[dict]], local: List[str], argv=None,
         compare: Sequence[str] = ("published", "plain"), published: bool = True, plot: bool = False) -> int:
    """Run the grid of `grids[mode]` (cases: op, label, params) for the methods `local`
    and (`published`: the op is in the release) the published release; write
    <name>_<mode>.json / .md (and with `plot` a .png) under --out, with the times of
    the methods `compare` over ours (local[0])."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    _modes.add_mode_args(ap, "small sizes, about 30 s")
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5, help="timed runs per phase (>= 5)")
    ap.add_argument("--venv", default=os.path.join(HERE, ".venv-published"))
    ap.add_argument("--setup-published", action="store_true", help="create the venv in quick mode too")
    ap.add_argument("--no-published", action="store_true")
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--cpu-time", action="store_true",
                    help="time the process's CPU time, not the wall clock (a machine shared with other work)")
    _modes.add_timing_arg(ap, "each method on its own loops, one after another, in a worker started for the "
                              "case (full mode) or the run")
    args = ap.parse_args(argv)
    if not published:
        args.no_published = True
    mode = _modes.mode_of(args)
    cases = [dict(c, id=i) for i, c in enumerate(grids[mode])]
    t0 = time.time()
    machine = machine_info(args.threads)
    machine["background_cpus_busy_start"] = background_load(_modes.load_sample_s(mode))
    print(f"{name} benchmarks ({mode}): {machine['cpu']}, {machine['cores']} cores, {args.threads} threads, "
          f"other load {machine['background_cpus_busy_start']:.2f} CPUs", flush=True)
    if args.no_published:
        pub_py, pub_msg = None, "disabled with --no-published" if published else "the release has no such op"
    else:
        pub_py, pub_msg = ensure_published(os.path.abspath(args.venv), create=(mode == "full" or args.setup_published))
    print(f"published release: {pub_msg if pub_py else 'unavailable: ' + pub_msg}", flush=True)

    smoke = mode == "smoke"
    job = {"reps": _modes.SMOKE_REPS if smoke else max(5, args.reps), "threads": args.threads,
           "cpu_time": args.cpu_time, "warmup": _modes.SMOKE_WARMUP if smoke else 1, "smoke": smoke,
           "warm_mb": _modes.SMOKE_WARM_MB if smoke else _modes.WARM_MB}
    fresh, side = args.timing != "in-process", args.timing != "fresh"
    recs: Dict[tuple, dict] = {}
    # The quick and smoke modes start each worker once for all cases; the full mode once per case.
    for batch in [cases] if mode != "full" else [[c] for c in cases]:
        print(f"[{time.time() - t0:5.0f}s] " + "; ".join(f"case {c['id']}: {c['label']}" for c in batch), flush=True)
        for python, methods, phases in _runs(pub_py, local, fresh, side, not args.no_memory, smoke):
            memory = "memory" in phases
            repo = os.path.dirname(HERE) if python == sys.executable else None
            out = run_worker(python, dict(job, cases=batch, methods=methods, repo=repo, phases=phases), memory)
            for case in batch:
                for m in methods:
                    r = recs.setdefault((case["id"], m), {"case": case["id"], "label": case["label"],
                                                          "op": case["op"], "params": case["params"], "method": m})
                    if "error" in out:
                        if "time" in phases:
                            r["error"] = out["error"]
                        if "memory" in phases:
                            r["memory_error"] = out["error"]
                        if "in-process" in phases:
                            r["in_process"] = {"error": out["error"]}
            for row in out.get("results", []):
                r = recs[(row["case"], row["method"])]
                r.update({k: v for k, v in row.items() if k not in ("case", "method", "traceback")})
                r["module_file"] = out["module_file"]
    if not pub_py and published:
        for case in cases:
            recs[(case["id"], "published")] = {"case": case["id"], "label": case["label"], "op": case["op"],
                                               "params": case["params"], "method": "published",
                                               "unavailable": pub_msg}
    machine["background_cpus_busy_end"] = background_load(_modes.load_sample_s(mode))
    results = list(recs.values())
    summary = ratios(results, local[0], compare)
    summary_in_process = ratios(results, local[0], compare, key="in_process") if side else []
    out_doc = {"name": name, "mode": mode, "machine": machine, "published": {"available": bool(pub_py),
               "detail": pub_msg}, "threads": args.threads, "reps": job["reps"], "elapsed_s": time.time() - t0,
               "cases": cases, "results": results, "compare": list(compare), "ratios": summary,
               "ratios_in_process": summary_in_process, "timing": args.timing,
               "warm_mb": job["warm_mb"],
               "clock": "process CPU time" if args.cpu_time else "wall"}
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, f"{name}_{mode}")
    with open(stem + ".json", "w") as f:
        json.dump(out_doc, f, indent=1, default=str)
    text = markdown(out_doc, local)
    with open(stem + ".md", "w") as f:
        f.write(text)
    print()
    print(text)
    wrote = [stem + ".json", stem + ".md"] + ([p for p in [plot_times(out_doc, local, stem + ".png")] if p]
                                             if plot else [])
    print(f"wrote {', '.join(wrote)} (run took {time.time() - t0:.0f} s)")
    return 0


def _median(r: dict, phase: str, key: str = "timing") -> Optional[float]:
    """The median of a phase, fresh worker (key "timing") or in one process ("in_process");
    None where the method was not timed or failed its check."""
    if key == "in_process":
        r = r.get("in_process", {})
        t = r.get(phase)
    else:
        t = r.get("timing", {}).get(phase)
    return t["median_s"] if isinstance(t, dict) and r.get("check", {}).get("ok") else None


def ratios(results: List[dict], ours: str, compare: Sequence[str], key: str = "timing") -> List[dict]:
    """Per case: fwd+bwd (and fwd) time of the methods `compare` over ours, each timed in a
    fresh worker (key "timing") or side by side in one process ("in_process"), and ours'
    peak over necessary."""
    by_case: Dict[int, Dict[str, dict]] = {}
    for r in results:
        by_case.setdefault(r["case"], {})[r["method"]] = r
    out = []
    for cid, ms in sorted(by_case.items()):
        mine = ms.get(ours, {})
        row = {"case": cid, "label": mine.get("label", "")}
        for other in compare:
            for phase in ("fwdbwd", "fwd"):
                a, b = _median(mine, phase, key), _median(ms.get(other, {}), phase, key)
                row[f"{other}_over_ours_{phase}"] = b / a if a and b else None
        mem = mine.get("memory")
        row["ours_peak_over_necessary"] = (mem["peak_bytes"] / mem["necessary_bytes"]
                                           if mem and mem.get("necessary_bytes") else None)
        out.append(row)
    return out


def _x(v) -> str:
    return f"{v:.2f}x" if isinstance(v, (int, float)) else "-"


def _check_cell(r: dict) -> str:
    if "check" in r:
        return "ok" if r["check"]["ok"] else "WRONG " + ", ".join(
            f"{k}={v:.1e}" for k, v in r["check"].items() if k.startswith("err"))
    return (r.get("skip") or r.get("error") or r.get("unavailable") or "")[:80]


def _usage_cells(ip: dict, phase: str) -> str:
    """CPU ms per call (user + system) and minor page faults per call, in one process."""
    u = ip.get("usage", {}).get(phase)
    if not u:
        return "- | -"
    return f"{u['user_s'] * 1e3:.1f} + {u['sys_s'] * 1e3:.1f} | {u['minflt']:.0f}"


def markdown(doc: dict, local: List[str]) -> str:
    m = doc["machine"]
    timing = doc.get("timing", "fresh")
    cpu = " (process CPU time, all threads, not the wall clock)" if doc.get("clock") == "process CPU time" else ""
    lines = [f"# {doc['name']} benchmarks ({doc['mode']})", "",
             f"{m['cpu']}, {m['cores']} cores, {doc['threads']} threads, torch {m['torch']}; other load "
             f"{m['background_cpus_busy_start']:.2f} / {m['background_cpus_busy_end']:.2f} CPUs busy at start / end. "
             f"Every method checked against a float64 reference first (rows that fail are marked). "
             f"Published release: {doc['published']['detail']}.", ""]
    order = local + ["published"]
    results = sorted(doc["results"], key=lambda r: (r["case"], order.index(r["method"])))
    compare = doc.get("compare", ["published", "plain"])
    if timing != "in-process":
        lines += ["## Fresh worker", "",
                  f"Each method on its own, the methods one after another in a worker process started for "
                  f"the case (full mode) or for the run (quick, smoke), each timed in its own loops (forward "
                  f"alone, then forward + backward steps) after its correctness run and a warm-up step: "
                  f"median of >= {doc['reps']} runs{cpu}.  Peak memory: fresh processes, glibc's mmap threshold "
                  f"fixed at 64 KiB.", "",
                  "| case | method | fwd ms | bwd ms | fwd+bwd ms | peak MB | necessary MB | check |",
                  "|---|---|---:|---:|---:|---:|---:|---|"]
        for r in results:
            if "timing" not in r and "memory" not in r and not any(k in r for k in ("skip", "error", "unavailable")):
                continue
            t, mem = r.get("timing", {}), r.get("memory", {})
            peak = f"{mem['peak_bytes'] / 1e6:.0f}" if mem else "-"
            need = f"{mem['necessary_bytes'] / 1e6:.0f}" if mem else "-"
            lines.append(f"| {r['label']} | {r['method']} | {_ms(t.get('fwd'))} | {_ms(t.get('bwd'))} | "
                         f"{_ms(t.get('fwdbwd'))} | {peak} | {need} | {_check_cell(r)} |")
        lines += ["", f"Ratios, fresh worker (time of the other method / time of `{local[0]}`; peak memory of "
                  f"`{local[0]}` over what must exist: output + gradients):", "",
                  "| case | " + " | ".join(f"{c} fwd+bwd | {c} fwd" for c in compare) + " | ours peak / necessary |",
                  "|---|" + "---:|---:|" * len(compare) + "---:|"]
        for r in doc["ratios"]:
            cells = " | ".join(f"{_x(r[f'{c}_over_ours_fwdbwd'])} | {_x(r[f'{c}_over_ours_fwd'])}" for c in compare)
            lines.append(f"| {r['label']} | {cells} | {_x(r['ours_peak_over_necessary'])} |")
        lines.append("")
    if timing != "fresh":
        warm = next((r["in_process"]["warm_up"] for r in results if "warm_up" in r.get("in_process", {})), None)
        rounds = sorted({r["in_process"]["rounds"] for r in results if "rounds" in r.get("in_process", {})})
        lines += ["## In one process, side by side", "",
                  f"All of a case's methods in one worker process, as a training script runs them: each checked "
                  f"(its first call), then a warm-up that allocates and frees "
                  f"{warm['allocated_mb'] if warm else doc.get('warm_mb', '?'):.0f} MB in tensors of assorted sizes "
                  f"up to {warm['largest_mib'] if warm else '?'} MiB (some over the 32 MiB above which glibc maps "
                  f"every block fresh from the OS) and one untimed forward + backward of each; then interleaved "
                  f"rounds ({'-'.join(str(n) for n in sorted({rounds[0], rounds[-1]})) if rounds else '?'} of them"
                  f"{', one timed run each: the numbers mean nothing' if doc['mode'] == 'smoke' else ''}): "
                  f"each round times every method's forward, then its forward + backward, in turn, so that drift "
                  f"and other load hit all alike.  Medians{cpu}; CPU: user + system ms per call of the whole "
                  f"process (all threads, getrusage); faults: minor page faults per call.", "",
                  "| case | method | fwd ms | bwd ms | fwd+bwd ms | fwd CPU ms (user + sys) | fwd faults | "
                  "fwd+bwd CPU ms (user + sys) | fwd+bwd faults | check |",
                  "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        for r in results:
            ip = r.get("in_process")
            if ip is None:
                continue
            lines.append(f"| {r['label']} | {r['method']} | {_ms(ip.get('fwd'))} | {_ms(ip.get('bwd'))} | "
                         f"{_ms(ip.get('fwdbwd'))} | {_usage_cells(ip, 'fwd')} | {_usage_cells(ip, 'fwdbwd')} | "
                         f"{_check_cell(ip)} |")
        fresh = {r["case"]: r for r in doc.get("ratios", [])} if timing == "both" else {}

        def cell(r, c, phase):
            v, f = r[f"{c}_over_ours_{phase}"], fresh.get(r["case"], {}).get(f"{c}_over_ours_{phase}")
            return _x(v) + (f" ({_x(f)})" if fresh and (v or f) else "")
        lines += ["", f"Ratios, in one process (time of the other method / time of `{local[0]}`"
                  + ("; the fresh worker's in parentheses" if fresh else "") + "):", "",
                  "| case | " + " | ".join(f"{c} fwd+bwd | {c} fwd" for c in compare) + " |",
                  "|---|" + "---:|---:|" * len(compare)]
        for r in doc["ratios_in_process"]:
            lines.append(f"| {r['label']} | " + " | ".join(f"{cell(r, c, 'fwdbwd')} | {cell(r, c, 'fwd')}"
                                                          for c in compare) + " |")
        lines.append("")
    return "\n".join(lines)


def plot_times(doc: dict, local: List[str], path: str) -> Optional[str]:
    """Forward and forward+backward medians per case, one bar per method (log scale), as
    a PNG at path; None without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install matplotlib, or the project's [bench] extra): no plot")
        return None
    key = "in_process" if doc.get("timing") == "in-process" else "timing"
    labels = [c["label"] for c in doc["cases"]]
    by = {(r["case"], r["method"]): r for r in doc["results"]}
    fig, axes = plt.subplots(1, 2, figsize=(max(8, 1.6 * len(labels)), 4.5), sharey=True)
    width = 0.8 / len(local)
    for ax, phase, title in zip(axes, ("fwd", "fwdbwd"), ("forward", "forward + backward")):
        for k, method in enumerate(local):
            ts = [_median(by.get((c["id"], method), {}), phase, key) for c in doc["cases"]]
            ax.bar([i + k * width for i in range(len(labels))], [t * 1e3 if t else 0 for t in ts], width,
                   label=method)
        ax.set_xticks([i + width * (len(local) - 1) / 2 for i in range(len(labels))])
        ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
        ax.set_yscale("log")
        ax.set_title(f"{title}: median ms, {'in one process' if key == 'in_process' else 'fresh worker'}, "
                     f"{doc['threads']} threads", fontsize=10)
    axes[0].set_ylabel("ms")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
