"""Benchmark of what a training loop pays every step: the COO adjacency step and the per-call cost.

    python -m benchmarks.training_loop --smoke                 # seconds: CI's check that it works
    python -m benchmarks.training_loop --quick                 # well under a minute
    python -m benchmarks.training_loop                         # n = 200k, 8/row, p = 32; a few minutes
    python -m benchmarks.training_loop --baseline /path/to/other/checkout   # before / after, side by side

(a) Training-loop step: forward + backward of ``C = A @ X`` with the same
    adjacency every step and new values each step (an optimizer's in-place
    update, outside the timed region), for ours (COO, CSR) and
    ``torch.sparse.mm`` (COO, CSR), in three ways of holding the adjacency:
    ``leaf A``     A itself is the learnable sparse tensor (COO built from a
                   sorted edge list without the coalesced flag, as
                   ``torch.sparse_coo_tensor(edge_index, w)`` gives it);
    ``values w``   A is rebuilt each step from the edge list and a learnable
                   values tensor w (ours: ``torchsparsegradutils.sparse_coo_tensor``
                   / ``sparse_csr_tensor``, or ``torch.sparse_coo_tensor`` in a
                   checkout without the former; torch: ``torch.sparse_coo_tensor``
                   / ``torch.sparse_csr_tensor``);
    ``unsorted``   leaf A from the same edges in random order (COO only).
    The ratio reported is the speed of a COO step relative to a CSR step,
    ``t(ours CSR) / t(ours COO)`` (the issue's target: >= 0.8).
(b) Per-call cost at 4 x 4 and 64 x 64: forward without grad, and forward +
    backward, for ours (COO, CSR, SparseCSR) against ``torch.sparse.mm``
    (COO, CSR); each time is a loop of many calls divided by their number.

Every time is a median: (a) of >= 5 interleaved steps (methods take turns, side by
side in one process, after a warm-up that allocates and frees a few hundred MB like a
training step: benchmarks/_harness.interleaved, which also gives each step's CPU time
and minor page faults), (b) of >= 5 interleaved loops.  Methods are checked against a dense float64
product first.  PyTorch's COO backward and its CSR constructor's backward build
a dense n x m gradient: where that exceeds 1 GB (0.25 GB in quick mode) the row
is recorded as skipped.

With ``--baseline DIR`` every measurement runs in worker processes, alternating
between this checkout and DIR (e.g. a clone of main) round by round, and the
tables give both side by side with each one's medians over the rounds.  The
smoke mode (tiny cases, one timed step or loop, no warm-up) measures this
checkout in one such worker process, so that CI starts that machinery once.
Results: benchmarks/results/training_loop_{smoke,quick,full}.{json,md}.
Timings are never asserted on.
"""
import argparse
import importlib.util
import json
import os
import platform
import statistics
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

STEP_METHODS = ["ours COO", "ours CSR", "torch COO", "torch CSR"]
CALL_METHODS = ["ours COO", "ours CSR", "ours SparseCSR", "torch COO", "torch CSR"]
SCENARIOS = ["leaf A", "values w", "unsorted"]


def _load_matrices():
    """benchmarks/_matrices.py by path: the worker runs with another checkout on sys.path."""
    spec = importlib.util.spec_from_file_location("_matrices", os.path.join(HERE, "_matrices.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules["_matrices"] = mod
    spec.loader.exec_module(mod)
    return mod


def _load_modes():
    """benchmarks/_modes.py by path (this file runs as a script in the workers, and is loaded by path)."""
    spec = importlib.util.spec_from_file_location("_bench_modes", os.path.join(HERE, "_modes.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_modes = _load_modes()


def _load_harness():
    """benchmarks/_harness.py by path (it needs torch only), as _load_matrices."""
    spec = importlib.util.spec_from_file_location("_bench_harness", os.path.join(HERE, "_harness.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules["_bench_harness"] = mod              # its dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


H = _load_harness()

CASES = {
    # dense_limit: bytes of a dense n x m gradient above which a row is skipped
    # warm_mb: the training-like allocation before the steps (_harness.interleaved)
    "full": {"step": {"n": 200_000, "per_row": 8, "p": 32, "reps": 7, "dense_limit": 1e9,
                      "warm_mb": _modes.WARM_MB},
             "calls": {"sizes": [(4, 2, 4), (64, 8, 16)], "calls": 4000, "reps": 7}},
    "quick": {"step": {"n": 10_000, "per_row": 8, "p": 32, "reps": 5, "dense_limit": 0.25e9,
                       "warm_mb": _modes.WARM_MB},
              "calls": {"sizes": [(4, 2, 4), (64, 8, 16)], "calls": 400, "reps": 5}},
    # warmup: rounds before the timed ones (default 1); the dense limit skips torch's rows as the others do
    "smoke": {"step": {"n": 300, "per_row": 4, "p": 4, "reps": 1, "warmup": 0, "dense_limit": 1e5,
                       "warm_mb": _modes.SMOKE_WARM_MB},
              "calls": {"sizes": [(4, 2, 4), (64, 8, 16)], "calls": 4, "reps": 1, "warmup": 0}},
}


def _stats(ts):
    return {"median_s": statistics.median(ts), "min_s": min(ts), "runs": len(ts)}


# --------------------------------------------------------------------------- (a) the step

def _step_setups(tsgu, idx, shape, p, scenario, dense_limit):
    """{method: (make, leaves, values) or skip reason}: make() -> (A, X); the step
    differentiates w.r.t. `leaves`; `values` are updated in place between steps."""
    n, m = shape
    gen = torch.Generator().manual_seed(1)
    vals = torch.randn(idx.shape[1], generator=gen)
    counts = torch.bincount(idx[0], minlength=n)
    crow = torch.cat([torch.zeros(1, dtype=torch.int64), counts.cumsum(0)])
    dense_bytes = n * m * 4
    out = {}
    for method in STEP_METHODS:
        layout = method.split()[1]
        X = torch.randn(m, p, generator=gen).requires_grad_()
        if scenario == "unsorted" and layout == "CSR":
            continue
        if method.startswith("torch") and (layout == "COO" or scenario == "values w") \
                and dense_bytes > dense_limit:
            what = "torch.sparse.mm's COO backward" if layout == "COO" else "torch.sparse_csr_tensor's backward"
            out[method] = f"skipped: {what} builds the dense {n} x {m} gradient ({dense_bytes / 1e9:.1f} GB)"
            continue
        if scenario == "values w":
            w = vals.clone().requires_grad_()
            if method == "ours COO":  # a checkout without our COO constructor uses torch's
                coo = getattr(tsgu, "sparse_coo_tensor", torch.sparse_coo_tensor)
                make = lambda w=w, coo=coo: coo(idx, w, shape)                     # noqa: E731
            elif layout == "COO":
                make = lambda w=w: torch.sparse_coo_tensor(idx, w, shape)          # noqa: E731
            elif method == "ours CSR":
                make = lambda w=w: tsgu.sparse_csr_tensor(crow, idx[1], w, shape)  # noqa: E731
            else:
                make = lambda w=w: torch.sparse_csr_tensor(crow, idx[1], w, shape)  # noqa: E731
            out[method] = (make, [w, X], w, X)
            continue
        if layout == "COO":
            ix = idx if scenario == "leaf A" else idx[:, torch.randperm(idx.shape[1], generator=gen)]
            A = torch.sparse_coo_tensor(ix, vals.clone(), shape).requires_grad_()
            values = A._values()
        else:
            A = torch.sparse_csr_tensor(crow, idx[1], vals.clone(), shape).requires_grad_()
            values = A.values()
        out[method] = (lambda A=A: A, [A, X], values, X)
    return out


def measure_step(tsgu, mats, cfg):
    spec = mats.MatrixSpec("uniform", cfg["n"], cfg["n"], cfg["per_row"])
    idx, shape = mats.pattern(spec)
    p = cfg["p"]
    G = torch.randn(shape[0], p, generator=torch.Generator().manual_seed(2))
    res = {}
    for scenario in SCENARIOS:
        setups = _step_setups(tsgu, idx, shape, p, scenario, cfg["dense_limit"])
        fns = {}
        for method, s in setups.items():
            if isinstance(s, str):
                continue
            make, leaves, values, X = s
            mm = tsgu.sparse_mm if method.startswith("ours") else torch.sparse.mm
            fns[method] = (make, leaves, values, X, mm)
        _check_step(fns)

        def step(make, leaves, values, X, mm):
            return torch.autograd.grad(mm(make(), X), leaves, G)

        def update(method):                                 # the optimizer: new values, in place
            with torch.no_grad():
                fns[method][2].mul_(0.999)
                fns[method][3].mul_(0.999)
        # side by side, interleaved, after a training-like allocation and `warmup` rounds
        t = H.interleaved({k: (lambda f=f: step(*f)) for k, f in fns.items()}, cfg["reps"], cfg["warm_mb"],
                          warmup=cfg.get("warmup", 1), after=update)
        res[scenario] = {k: (t["methods"][k] if k in fns else v) for k, v in setups.items()}
    return {"shape": list(shape), "nnz": int(idx.shape[1]), "p": p, "scenarios": res}


def _check_step(fns):
    """Each method's product equals a float64 one (torch.sparse.mm, before any timing)."""
    for method, (make, leaves, values, X, mm) in fns.items():
        A = make()
        ref = torch.sparse.mm(A.detach().to(torch.float64), X.detach().double())
        err = (mm(A, X).detach().double() - ref).abs().max().item() / max(ref.abs().max().item(), 1e-30)
        if err > 1e-4:
            raise AssertionError(f"{method}: relative error {err:.2e}")


# --------------------------------------------------------------------------- (b) per call

def _call_setups(tsgu, n, per_row, p, grad):
    gen = torch.Generator().manual_seed(3)
    keep = torch.rand(n, n, generator=gen) < per_row / n
    D = torch.randn(n, n, generator=gen) * keep
    B = torch.randn(n, p, generator=gen)
    coo, csr = D.to_sparse_coo(), D.to_sparse_csr()
    out = {}
    for method in CALL_METHODS:
        Bm = B.clone().requires_grad_(grad)
        if method == "ours SparseCSR":
            A = tsgu.SparseCSR(csr.crow_indices(), csr.col_indices(), csr.values().clone().requires_grad_(grad),
                               (n, n))
            leaves = [A.values, Bm]
        else:
            A = (coo if "COO" in method else csr).detach().clone().requires_grad_(grad)
            leaves = [A, Bm]
        mm = torch.sparse.mm if method.startswith("torch") else tsgu.sparse_mm
        if grad:
            def fn(A=A, Bm=Bm, leaves=leaves, mm=mm):
                C = mm(A, Bm)
                torch.autograd.grad(C, leaves, torch.ones_like(C))
        else:
            def fn(A=A, Bm=Bm, mm=mm):
                mm(A, Bm)
        ref = D.double() @ B.double()
        err = (mm(A, Bm).detach().double() - ref).abs().max().item()
        if err > 1e-4 * max(ref.abs().max().item(), 1.0):
            raise AssertionError(f"{method} at n={n}: error {err:.2e}")
        out[method] = fn
    return out


def measure_calls(tsgu, cfg):
    res = {}
    for n, per_row, p in cfg["sizes"]:
        for mode, grad in (("forward, no grad", False), ("forward+backward", True)):
            fns = _call_setups(tsgu, n, per_row, p, grad)
            calls = max(1, cfg["calls"] // (4 if grad else 1))
            times = {k: [] for k in fns}
            warm = cfg.get("warmup", 1)
            for r in range(warm + cfg["reps"]):
                for method, fn in fns.items():
                    t0 = time.perf_counter()
                    for _ in range(calls):
                        fn()
                    if r >= warm:
                        times[method].append((time.perf_counter() - t0) / calls)
            res[f"{n}x{n} p={p}, {mode}"] = {k: _stats(v) for k, v in times.items()}
    return res


# --------------------------------------------------------------------------- workers and rounds

def run_here(mode, part, threads):
    import torchsparsegradutils as tsgu
    torch.set_num_threads(threads)
    cfg = CASES[mode][part]
    if part == "step":
        return measure_step(tsgu, _load_matrices(), cfg)
    return measure_calls(tsgu, cfg)


def run_worker(root, mode, part, threads, script=__file__):
    """run_here of `script` (this file, or another benchmark built on these rounds)
    in a fresh process with `root`'s torchsparsegradutils first on the path."""
    env = dict(os.environ, PYTHONPATH=root, OMP_NUM_THREADS=str(threads))
    cmd = [sys.executable, os.path.abspath(script), "--worker", mode, part, str(threads)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=root, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(f"worker for {root} failed: {r.stderr.strip()[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def _merge(rounds):
    """Per-round results -> one, each time the median over the rounds of the per-round medians."""
    first = rounds[0]
    if isinstance(first, dict) and "median_s" in first:
        meds = [r["median_s"] for r in rounds]
        out = {"median_s": statistics.median(meds), "min_s": min(r["min_s"] for r in rounds),
               "runs": sum(r["runs"] for r in rounds), "round_medians_s": meds}
        if "usage" in first:            # CPU time and faults per step: the median over the rounds
            out["usage"] = {k: statistics.median(r["usage"][k] for r in rounds) for k in first["usage"]}
        return out
    if isinstance(first, dict):
        return {k: _merge([r[k] for r in rounds]) for k in first}
    return first


def measure(mode, threads, rounds, baseline, parts=("step", "calls"), here=None, script=__file__):
    """{impl: {part: ..}}: this checkout ("after") and, with a baseline, the baseline
    ("before"), alternating round by round in worker processes; `here` (run_here of
    `script`) measures one part in this process."""
    here = here or run_here
    impls = {"after": ROOT} if not baseline else {"before": os.path.abspath(baseline), "after": ROOT}
    # the smoke mode measures this checkout in a worker process (the machinery of --baseline),
    # every part in one, so that it is started once
    pooled = [run_worker(ROOT, mode, ",".join(parts), threads, script) for _ in range(rounds)] \
        if mode == "smoke" and not baseline else None
    out = {}
    for part in parts:
        per_impl = {k: [] for k in impls}
        for r in range(rounds):
            for name, root in impls.items():
                print(f"  {part}: round {r + 1}/{rounds}, {name} ({root})", flush=True)
                if baseline:
                    per_impl[name].append(run_worker(root, mode, part, threads, script))
                elif pooled:
                    per_impl[name].append(pooled[r][part])
                else:
                    per_impl[name].append(here(mode, part, threads))
        for name in impls:
            out.setdefault(name, {})[part] = _merge(per_impl[name])
    return out


# --------------------------------------------------------------------------- report

def _t(x, unit):
    if isinstance(x, str):
        return "skip"
    scale = {"ms": 1e3, "us": 1e6}[unit]
    return f"{x['median_s'] * scale:.2f}"


def _ratio(num, den):
    """num / den of two timings: the median over the rounds of each round's ratio
    (rounds alternate between checkouts and the machine's load drifts between
    them), or of the two medians when there was one round."""
    a, b = num.get("round_medians_s", [num["median_s"]]), den.get("round_medians_s", [den["median_s"]])
    return statistics.median(x / y for x, y in zip(a, b))


def _best(row, prefix):
    """The fastest method whose name starts with prefix, as a timing whose round
    medians are the per-round best."""
    ms = [v for k, v in row.items() if k.startswith(prefix)]
    rounds = [min(r) for r in zip(*(v.get("round_medians_s", [v["median_s"]]) for v in ms))]
    return {"median_s": min(v["median_s"] for v in ms), "round_medians_s": rounds}


def _usage_table(doc, impls):
    """(a)'s CPU time (user + system ms) and minor page faults per step, where the run has them."""
    scen = doc["results"][impls[0]]["step"]["scenarios"]
    if not any(isinstance(v, dict) and "usage" in v for sc in scen.values() for v in sc.values()):
        return []
    lines = ["CPU ms per step (user + system, the whole process) / minor page faults per step:", "",
             "| adjacency | " + " | ".join(f"{m} ({i})" for m in STEP_METHODS for i in impls) + " |",
             "|---" * (1 + len(STEP_METHODS) * len(impls)) + "|"]
    for sc in SCENARIOS:
        cells = []
        for m in STEP_METHODS:
            for i in impls:
                u = (doc["results"][i]["step"]["scenarios"][sc].get(m) or {})
                u = u.get("usage") if isinstance(u, dict) else None
                cells.append(f"{u['user_s'] * 1e3:.3g} + {u['sys_s'] * 1e3:.3g} / {u['minflt']:.0f}" if u else "n/a")
        lines.append(f"| {sc} | " + " | ".join(cells) + " |")
    return lines + [""]


def write_report(doc, path_md):
    impls = list(doc["results"])
    lines = [f"# training_loop ({doc['mode']})", "",
             f"{doc['machine']['cpu']}, {doc['machine']['threads']} threads, torch {doc['machine']['torch']}; "
             f"{doc['date']}.  Medians; with a baseline, medians over {doc['rounds']} alternating rounds "
             "of worker processes.", ""]
    step0 = doc["results"][impls[0]]["step"]
    lines += [f"## (a) training-loop step, forward + backward (ms): n = {step0['shape'][0]}, "
              f"nnz = {step0['nnz']}, p = {step0['p']}", "",
              "| adjacency | " + " | ".join(f"{m} ({i})" for m in STEP_METHODS for i in impls) +
              " | " + " | ".join(f"COO speed / CSR speed ({i})" for i in impls) + " |",
              "|---" * (1 + len(STEP_METHODS) * len(impls) + len(impls)) + "|"]
    for sc in SCENARIOS:
        cells, ratios = [], []
        for m in STEP_METHODS:
            for i in impls:
                row = doc["results"][i]["step"]["scenarios"][sc]
                cells.append(_t(row[m], "ms") if m in row else "n/a")
        for i in impls:
            s = doc["results"][i]["step"]["scenarios"]
            coo, csr = s[sc].get("ours COO"), s["leaf A" if sc == "unsorted" else sc].get("ours CSR")
            ok = isinstance(coo, dict) and isinstance(csr, dict)
            ratios.append(f"{_ratio(csr, coo):.2f}" if ok else "n/a")
        lines.append(f"| {sc} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    lines += ["", "COO speed / CSR speed = t(ours CSR) / t(ours COO), the CSR of the same way of holding "
              "the adjacency (for `unsorted`, the leaf CSR); the target is >= 0.8.  Ratios are medians "
              "over the rounds of each round's ratio.", ""]
    lines += _usage_table(doc, impls)
    skips = {f"{sc}, {m}": v for sc in SCENARIOS
             for m, v in doc["results"][impls[0]]["step"]["scenarios"][sc].items() if isinstance(v, str)}
    lines += [f"- {k}: {v}" for k, v in skips.items()] + [""]
    lines += ["## (b) per-call cost (us per call)", "",
              "| case | " + " | ".join(f"{m} ({i})" for m in CALL_METHODS for i in impls) +
              " | " + " | ".join(f"best ours / best torch ({i})" for i in impls) + " |",
              "|---" * (1 + len(CALL_METHODS) * len(impls) + len(impls)) + "|"]
    for case in doc["results"][impls[0]]["calls"]:
        cells = [_t(doc["results"][i]["calls"][case][m], "us") for m in CALL_METHODS for i in impls]
        ratios = []
        for i in impls:
            c = doc["results"][i]["calls"][case]
            ratios.append(f"{_ratio(_best(c, 'ours'), _best(c, 'torch')):.1f}")
        lines.append(f"| {case.replace(' | ', ', ')} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    lines += ["", "best ours / best torch: the fastest of our layouts against the fastest of PyTorch's, "
              "per round (the issue's target: <= 3 for the 4 x 4 forward without grad).", ""]
    with open(path_md, "w") as f:
        f.write("\n".join(lines))
    return "\n".join(lines)


def main(argv=None) -> int:
    return cli(argv, "training_loop", __doc__.split("\n")[0], "small step case, fewer calls; well under a minute",
               CASES, measure, write_report)


def cli(argv, name, description, quick_help, cases, measure, write_report, extra=lambda args: {}) -> int:
    """The command line of a benchmark built on these rounds (this one, per_call):
    measure, then write <name>_<mode>.json and .md; extra(args) adds to the JSON."""
    ap = argparse.ArgumentParser(description=description)
    _modes.add_mode_args(ap, quick_help)
    ap.add_argument("--out", default=RESULTS)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=None, help="alternating rounds (default 1, 3 with --baseline)")
    ap.add_argument("--baseline", default=None, help="another checkout (built in place) to compare with")
    ap.add_argument("--report-only", metavar="JSON", help="rewrite the markdown of a saved run")
    args = ap.parse_args(argv)
    if args.report_only:
        with open(args.report_only) as f:
            print(write_report(json.load(f), args.report_only[:-len(".json")] + ".md"))
        return 0
    mode = _modes.mode_of(args)
    rounds = args.rounds or (3 if args.baseline else 1)
    torch.set_num_threads(args.threads)
    t0 = time.time()
    cpu = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    machine = {"cpu": cpu, "cores": os.cpu_count(), "threads": args.threads, "torch": torch.__version__,
               "python": platform.python_version(), "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "")}
    print(f"{name} ({mode}): {cpu}, {args.threads} threads, torch {torch.__version__}", flush=True)
    results = measure(mode, args.threads, rounds, args.baseline)
    doc = {"mode": mode, "machine": machine, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "rounds": rounds, "baseline": args.baseline, **extra(args), "config": cases[mode],
           "results": results, "seconds": round(time.time() - t0, 1)}
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, f"{name}_{mode}")
    with open(stem + ".json", "w") as f:
        json.dump(doc, f, indent=1)
    print(write_report(doc, stem + ".md"))
    print(f"\nwrote {stem}.json and .md in {doc['seconds']:.0f} s")
    return 0


def entry(run_here, main) -> int:
    """A benchmark script's entry (this one's, per_call's): a worker of measure's rounds
    (`--worker mode part threads`, printing run_here's JSON; with parts "a,b", {part: its JSON}),
    or the command line."""
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        _, _, w_mode, w_part, w_threads = sys.argv       # PYTHONPATH names the checkout under test
        if "," in w_part:
            print(json.dumps({p: run_here(w_mode, p, int(w_threads)) for p in w_part.split(",")}))
        else:
            print(json.dumps(run_here(w_mode, w_part, int(w_threads))))
        return 0
    return main()


if __name__ == "__main__":
    sys.exit(entry(run_here, main))
