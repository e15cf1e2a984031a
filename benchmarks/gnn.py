"""GNN training against PyTorch Geometric, side by side in one run: Planetoid accuracy and step time,
and a synthetic power-law graph's step time and peak memory.

    python -m benchmarks.gnn --smoke          # seconds, CI's check that it works: Cora, 1 epoch; n = 10^3
    python -m benchmarks.gnn --quick          # about a minute: Cora, 1 seed, 30 epochs; n = 2*10^4
    python -m benchmarks.gnn                  # Cora and Citeseer, 3 seeds, 200 epochs; n = 2*10^5
    python -m benchmarks.gnn --data DIR       # where cora.npz / citeseer.npz are (default ../shared/data)

(a) Planetoid (the standard split, Yang et al. 2016), two-layer models with the papers'
    hyper-parameters: GCN (16 hidden, dropout 0.5, Adam lr 0.01, weight decay 5e-4 on the
    first layer), GraphSAGE-mean (the same), GAT (8 heads x 8 hidden, ELU, dropout 0.6 on
    features and attention, one output head, lr 0.005, weight decay 5e-4); 200 epochs, the
    test accuracy of the best-validation epoch.  Ours (``torchsparsegradutils.nn``) gets the
    row-normalised bag-of-words features as a SparseCSR (dropout on the stored values,
    ``nn.dropout``) and GCN's normalised adjacency built once (PyG's ``cached=True``);
    PyG gets them dense, as its examples do.  Both start from the same weights (PyG's
    ``state_dict`` loaded into ours; checked: the two eval-mode outputs agree before
    training) and train in lockstep, one epoch of each in turn, so both see the same load.
    Step time: zero_grad + forward + loss + backward + optimizer step; the median over all
    epochs and seeds.
(b) Synthetic power-law graph (benchmarks/_matrices.py: row degrees ~ r^-0.8, 2*10^5
    nodes, 16 in-edges per node on average, 64 dense features, 16 classes): two-layer
    SAGE-mean (64 hidden) and GAT (8 heads x 8), full-batch, without dropout (dense dropout
    costs both libraries the same, and is PyTorch's random number generation, not a
    graph operation: at this size it is a third of a SAGE step).  Each (model, library) runs
    in a fresh process: the peak resident memory of one training step above what the
    process held before it (inputs, model and optimizer state built, two warm-up steps
    done), then the median step time of ``--reps`` steps; the processes alternate between
    the libraries for ``--rounds`` rounds, and the median over rounds is reported.

GAT rows need ``torchsparsegradutils.nn.GATConv``; without it they say "not available".
The smoke mode (CI's check that the script works) trains one epoch on Cora, and runs every
(model, library) of (b) on 10^3 nodes one after another in a single fresh process, without
warm-up steps, for one timed step each.
Results: benchmarks/results/gnn_{smoke,quick,full}.{json,md,png}.  Timings are never asserted.
"""
import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
import warnings

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")   # before torch loads (see sparse_mm.py)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import torchsparsegradutils.nn as tnn  # noqa: E402
from torchsparsegradutils import SparseCSR  # noqa: E402

from . import _matrices, _modes  # noqa: E402
from ._machine import background_load, machine_info  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
warnings.filterwarnings("ignore", message=".*[Ss]parse.*")

# model -> hyper-parameters of the Planetoid runs
HYPER = {
    "GCN": dict(hidden=16, heads=1, p=0.5, lr=0.01, wd_first_only=True),
    "SAGE-mean": dict(hidden=16, heads=1, p=0.5, lr=0.01, wd_first_only=True),
    "GAT": dict(hidden=8, heads=8, p=0.6, lr=0.005, wd_first_only=False),
}
MODES = {
    "full": dict(datasets=("cora", "citeseer"), seeds=3, epochs=200, n=200_000, reps=6, rounds=2),
    "quick": dict(datasets=("cora",), seeds=1, epochs=30, n=20_000, reps=5, rounds=1),
    "smoke": dict(datasets=("cora",), seeds=1, epochs=1, n=1_000, reps=_modes.SMOKE_REPS, rounds=1,
                  warmup=_modes.SMOKE_WARMUP, one_worker=True),
}
MODELS = ("GCN", "SAGE-mean", "GAT")
SYNTHETIC = ("SAGE-mean", "GAT")
PAPER = {("GCN", "cora"): 81.5, ("GCN", "citeseer"): 70.3, ("GAT", "cora"): 83.0, ("GAT", "citeseer"): 72.5}


def pyg():
    """torch_geometric.nn, or None where PyG is not installed."""
    try:
        import torch_geometric.nn as gnn
    except ImportError:
        return None
    return gnn


def has_gat() -> bool:
    return hasattr(tnn, "GATConv")


# --------------------------------------------------------------------------- data and models

def load_planetoid(path: str):
    """(x as a row-normalised SparseCSR, edge_index, y, train, val, test) of a Planetoid .npz."""
    d = np.load(path)
    n, f = (int(v) for v in d["x_shape"])
    crow = torch.from_numpy(d["x_indptr"]).long()
    rows = torch.repeat_interleave(torch.arange(n), crow.diff())
    vals = torch.from_numpy(d["x_data"]).float()
    vals = vals / torch.zeros(n).index_add_(0, rows, vals).clamp(min=1)[rows]
    x = SparseCSR(crow, torch.from_numpy(d["x_indices"]).long(), vals, (n, f))
    split = [torch.from_numpy(d[k]) for k in ("train_idx", "val_idx", "test_idx")]
    return x, torch.from_numpy(d["edge_index"]), torch.from_numpy(d["y"]), *split


def _convs(lib, model: str, f: int, hidden: int, heads: int, classes: int, p: float):
    """The two layers of `model` from `lib` (tnn or torch_geometric.nn)."""
    if model == "GCN":
        extra = {"cached": True} if lib is not tnn else {}
        return lib.GCNConv(f, hidden, **extra), lib.GCNConv(hidden, classes, **extra)
    if model == "SAGE-mean":
        return lib.SAGEConv(f, hidden, aggr="mean"), lib.SAGEConv(hidden, classes, aggr="mean")
    return (lib.GATConv(f, hidden, heads=heads, dropout=p),
            lib.GATConv(hidden * heads, classes, heads=1, concat=False, dropout=p))


class Net(torch.nn.Module):
    """dropout -> conv1 -> ReLU (GAT: ELU) -> dropout -> conv2, on a fixed adjacency."""

    def __init__(self, lib, model: str, f: int, classes: int, hidden: int, heads: int, p: float, **_):
        super().__init__()
        self.conv1, self.conv2 = _convs(lib, model, f, hidden, heads, classes, p)
        self.p, self.act = p, F.elu if model == "GAT" else F.relu

    def forward(self, x, adjacency):
        h = self.act(self.conv1(tnn.dropout(x, self.p, self.training), adjacency))
        return self.conv2(F.dropout(h, self.p, self.training), adjacency)


def build_pair(model: str, f: int, classes: int, seed: int, hyper: dict):
    """(ours, PyG's, same_init): PyG's model seeded, its weights loaded into ours."""
    gnn = pyg()
    torch.manual_seed(seed)
    theirs = Net(gnn, model, f, classes, **hyper) if gnn else None
    torch.manual_seed(seed)
    ours = Net(tnn, model, f, classes, **hyper)
    same = False
    if theirs is not None:
        try:
            ours.load_state_dict(theirs.state_dict())
            same = True
        except (RuntimeError, KeyError):        # layers that do not match: each keeps its own init
            pass
    return ours, theirs, same


def optimizer(net: Net, lr: float, wd_first_only: bool, **_):
    if wd_first_only:
        groups = [{"params": net.conv1.parameters(), "weight_decay": 5e-4}, {"params": net.conv2.parameters()}]
    else:
        groups = [{"params": net.parameters(), "weight_decay": 5e-4}]
    return torch.optim.Adam(groups, lr=lr)


def step(net, opt, x, adjacency, y, idx) -> float:
    """One training step; its wall time in seconds."""
    t0 = time.perf_counter()
    net.train()
    opt.zero_grad()
    F.cross_entropy(net(x, adjacency)[idx], y[idx]).backward()
    opt.step()
    return time.perf_counter() - t0


# --------------------------------------------------------------------------- (a) Planetoid

def planetoid_case(model: str, name: str, path: str, seeds: int, epochs: int) -> dict:
    x, ei, y, train, val, test = load_planetoid(path)
    n, f = x.size
    classes = int(y.max()) + 1
    hyper = HYPER[model]
    inputs = {"ours": (x, tnn.gcn_adjacency(ei, n) if model == "GCN" else ei), "pyg": (x.to_torch().to_dense(), ei)}
    rec = {"model": model, "dataset": name, "nodes": n, "edges": ei.shape[1], "features": f,
           "feature_density": x.values.numel() / (n * f), "seeds": seeds, "epochs": epochs}
    libs = ["ours"] + (["pyg"] if pyg() else [])
    acc = {lib: [] for lib in libs}
    times = {lib: [] for lib in libs}
    for seed in range(seeds):
        ours, theirs, same = build_pair(model, f, classes, seed, hyper)
        nets = {"ours": ours, "pyg": theirs}
        if theirs is not None and same:
            ours.eval()
            theirs.eval()
            with torch.no_grad():
                a, b = ours(*inputs["ours"]), theirs(*inputs["pyg"])
            rec.setdefault("max_abs_diff_at_init", 0.0)
            rec["max_abs_diff_at_init"] = max(rec["max_abs_diff_at_init"], (a - b).abs().max().item())
        rec["same_init"] = same
        opts = {lib: optimizer(nets[lib], **hyper) for lib in libs}
        best = {lib: (-1.0, 0.0) for lib in libs}
        for _ in range(epochs):
            for lib in libs:                      # lockstep: one epoch of each in turn
                net, (xi, adj) = nets[lib], inputs[lib]
                times[lib].append(step(net, opts[lib], xi, adj, y, train))
                net.eval()
                with torch.no_grad():
                    pred = net(xi, adj).argmax(1)
                v = (pred[val] == y[val]).float().mean().item()
                if v > best[lib][0]:
                    best[lib] = (v, (pred[test] == y[test]).float().mean().item())
        for lib in libs:
            acc[lib].append(100 * best[lib][1])
    for lib in libs:
        rec[lib] = {"test_acc": statistics.mean(acc[lib]), "test_acc_runs": acc[lib],
                    "ms_per_step": 1e3 * statistics.median(times[lib]),
                    "ms_per_step_min": 1e3 * min(times[lib])}
    return rec


# --------------------------------------------------------------------------- (b) synthetic graph

def synthetic_worker(job: dict) -> dict:
    """One (model, library) on the power-law graph, in this fresh process: peak memory of
    one step, then the median of `reps` steps."""
    from ._harness import _status_kb, _trim, freeze_gc

    torch.set_num_threads(job["threads"])
    if job.get("smoke") and not gc.get_freeze_count():      # once per process: see _harness.freeze_gc
        freeze_gc()
    n, feats, classes = job["n"], job["features"], job["classes"]
    idx, _ = _matrices.pattern(_matrices.MatrixSpec("powerlaw", n, n, per_row=job["per_row"]))
    ei = idx.flip(0).contiguous()                                 # row i gathers from its columns: j -> i
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(n, feats, generator=gen)
    y = torch.randint(0, classes, (n,), generator=gen)
    every = torch.arange(n)
    model = job["model"]
    hyper = dict(HYPER[model], hidden=64 if model == "SAGE-mean" else 8, p=0.0)   # no dropout: see the notes
    lib = tnn if job["lib"] == "ours" else pyg()
    torch.manual_seed(0)
    net = Net(lib, model, feats, classes, **hyper)
    opt = optimizer(net, **hyper)
    for _ in range(job.get("warmup", 2)):
        step(net, opt, x, ei, y, every)
    _trim()
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    base = _status_kb("VmRSS")
    first = step(net, opt, x, ei, y, every)
    peak = (_status_kb("VmHWM") - base) * 1024
    ts = [first] + [step(net, opt, x, ei, y, every) for _ in range(job["reps"] - 1)]
    return {"edges": int(ei.shape[1]), "peak_bytes": peak, "ms_per_step": 1e3 * statistics.median(ts),
            "ms_per_step_min": 1e3 * min(ts)}


def _job(model: str, lib: str, n: int, reps: int, threads: int, warmup: int = 2, smoke: bool = False) -> dict:
    return {"model": model, "lib": lib, "n": n, "per_row": 16, "features": 64, "classes": 16,
            "reps": reps, "threads": threads, "warmup": warmup, "smoke": smoke}


def run_worker(job):
    """synthetic_worker of a job (or of a list of jobs, one after another) in a fresh process."""
    threads = (job[0] if isinstance(job, list) else job)["threads"]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MALLOC_MMAP_THRESHOLD_="65536",
               MALLOC_TRIM_THRESHOLD_="131072")
    r = subprocess.run([sys.executable, "-m", "benchmarks.gnn", "--worker", json.dumps(job)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=1800)
    if r.returncode != 0 or not r.stdout.strip():
        tail = [ln for ln in r.stderr.splitlines() if ln.strip()][-2:]
        return {"error": f"worker exited {r.returncode}: {' | '.join(tail)}"}
    return json.loads(r.stdout.strip().splitlines()[-1])


def run_synthetic(model: str, lib: str, n: int, reps: int, threads: int) -> dict:
    return run_worker(_job(model, lib, n, reps, threads))


def pooled_synthetic(models, n: int, reps: int, threads: int, warmup: int) -> dict:
    """{(model, lib): result} of every (model, library) of (b) run in one worker process (the
    smoke mode), each result the worker's error where it failed."""
    keys = [(m, lib) for m in models for lib in ["ours"] + (["pyg"] if pyg() else [])]
    out = run_worker([_job(m, lib, n, reps, threads, warmup, smoke=True) for m, lib in keys])
    return {k: out if "error" in out else r for k, r in zip(keys, out if isinstance(out, list) else [out] * len(keys))}


def synthetic_case(model: str, n: int, reps: int, rounds: int, threads: int, pooled=None) -> dict:
    libs = ["ours"] + (["pyg"] if pyg() else [])
    rec = {"model": model, "nodes": n, "per_row": 16, "features": 64, "rounds": rounds}
    runs = {lib: [] for lib in libs}
    for _ in range(rounds):
        for lib in libs:                          # alternate the libraries round by round
            runs[lib].append(pooled[model, lib] if pooled else run_synthetic(model, lib, n, reps, threads))
    for lib, rs in runs.items():
        ok = [r for r in rs if "error" not in r]
        if not ok:
            rec[lib] = {"error": rs[0]["error"]}
            continue
        rec["edges"] = ok[0]["edges"]
        rec[lib] = {"ms_per_step": statistics.median(r["ms_per_step"] for r in ok),
                    "ms_per_step_runs": [r["ms_per_step"] for r in ok],
                    "peak_bytes": max(r["peak_bytes"] for r in ok)}
    return rec


# --------------------------------------------------------------------------- report

def _speedup(rec: dict) -> str:
    a, b = rec.get("ours", {}).get("ms_per_step"), rec.get("pyg", {}).get("ms_per_step")
    return f"{b / a:.1f}x" if a and b else "-"


def _cell(rec: dict, lib: str, key: str, fmt: str) -> str:
    v = rec.get(lib, {}).get(key)
    return fmt.format(v) if isinstance(v, (int, float)) else "-"


def markdown(doc: dict) -> str:
    m = doc["machine"]
    done = len(doc["planetoid"]) + len(doc["synthetic"])
    lines = [f"# GNN benchmarks against PyTorch Geometric ({doc['mode']})", "",
             f"{m['cpu']}, {m['cores']} cores, {doc['threads']} threads, torch {m['torch']}, "
             f"PyG {doc['pyg_version']}; other load {m['background_cpus_busy_start']:.2f} / "
             f"{m['background_cpus_busy_end']:.2f} CPUs busy at start / end (a shared VM: the ratios come from "
             f"this one side-by-side run). Run took {doc['elapsed_s']:.0f} s" + (
                 "." if done == doc["cases_total"] else f", cut short: {done} of {doc['cases_total']} cases."), "",
             f"## Planetoid: {doc['seeds']} seed(s) x {doc['epochs']} epochs, trained in lockstep", "",
             "Test accuracy (%) of the best-validation epoch, mean over seeds; ms per training step "
             "(forward + backward + Adam), median over all epochs; speed-up = PyG's time / ours. "
             "Ours: sparse features (SparseCSR); PyG: dense features.", "",
             "| model | dataset | paper | PyG acc | ours acc | PyG ms/step | ours ms/step | speed-up | same init "
             "(max diff) |", "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in sorted(doc["planetoid"], key=lambda r: (r["dataset"] != "cora", MODELS.index(r["model"]))):
        if "unavailable" in r:
            lines.append(f"| {r['model']} | {r['dataset']} | - | - | - | - | - | - | {r['unavailable']} |")
            continue
        paper = PAPER.get((r["model"], r["dataset"]))
        init = (f"yes ({r['max_abs_diff_at_init']:.1e})" if r.get("same_init") else "no (layers differ)")
        lines.append(f"| {r['model']} | {r['dataset']} | {paper if paper else '-'} | "
                     f"{_cell(r, 'pyg', 'test_acc', '{:.1f}')} | {_cell(r, 'ours', 'test_acc', '{:.1f}')} | "
                     f"{_cell(r, 'pyg', 'ms_per_step', '{:.1f}')} | {_cell(r, 'ours', 'ms_per_step', '{:.2f}')} | "
                     f"{_speedup(r)} | {init} |")
    if not doc["synthetic"]:                      # a run of --case: Planetoid only
        return "\n".join(lines) + "\n"
    lines += ["", f"## Synthetic power-law graph: {doc['synthetic_n']} nodes, 16 in-edges per node on average, "
              "64 features", "",
              "Full-batch training step of a two-layer model; peak = resident memory of one step above what the "
              "process held before it, each (model, library) in a fresh process.", "",
              "| model | edges | PyG ms/step | ours ms/step | speed-up | PyG peak MB | ours peak MB | ours / PyG peak |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in doc["synthetic"]:
        if "unavailable" in r:
            lines.append(f"| {r['model']} | - | - | - | - | - | - | {r['unavailable']} |")
            continue
        pa, pb = r.get("ours", {}).get("peak_bytes"), r.get("pyg", {}).get("peak_bytes")
        errors = "; ".join(r[lib]["error"] for lib in ("ours", "pyg") if "error" in r.get(lib, {}))
        lines.append(f"| {r['model']} | {r.get('edges', '-')} | {_cell(r, 'pyg', 'ms_per_step', '{:.0f}')} | "
                     f"{_cell(r, 'ours', 'ms_per_step', '{:.0f}')} | {_speedup(r)} | "
                     f"{pb / 1e6 if pb else 0:.0f} | {pa / 1e6 if pa else 0:.0f} | "
                     f"{f'{pa / pb:.2f}' if pa and pb else '-'} |" + (f" {errors}" if errors else ""))
    return "\n".join(lines) + "\n"


def plot(doc: dict, path: str):
    """Bars of ms per step, PyG and ours, for every case (log scale); None without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    rows = [(f"{r['model']} {r.get('dataset', 'power-law')}", r) for r in doc["planetoid"] + doc["synthetic"]
            if "ours" in r and "ms_per_step" in r["ours"]]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(rows)), 4))
    for k, (lib, color) in enumerate((("pyg", "tab:red"), ("ours", "tab:blue"))):
        ax.bar([i + 0.4 * k for i in range(len(rows))], [r.get(lib, {}).get("ms_per_step", 0) for _, r in rows],
               0.4, label="PyG" if lib == "pyg" else "ours", color=color)
    ax.set_xticks([i + 0.2 for i in range(len(rows))])
    ax.set_xticklabels([name for name, _ in rows], rotation=30, ha="right", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("ms per training step")
    ax.set_title(f"GNN training step, {doc['threads']} threads ({doc['mode']})", fontsize=10)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    _modes.add_mode_args(ap, "about a minute")
    ap.add_argument("--data", default=os.path.join(os.path.dirname(ROOT), "shared", "data"),
                    help="the folder of cora.npz and citeseer.npz")
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seeds", type=int, help="Planetoid seeds (default: 3, quick: 1)")
    ap.add_argument("--case", action="append", metavar="MODEL/DATASET",
                    help="only these Planetoid cases (e.g. GAT/cora; repeatable), no synthetic graph; "
                         "the results are named after them")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        job = json.loads(args.worker)
        print(json.dumps([synthetic_worker(j) for j in job] if isinstance(job, list) else synthetic_worker(job)))
        return 0
    torch.set_num_threads(args.threads)
    mode = _modes.mode_of(args)
    cfg = dict(MODES[mode], **({"seeds": args.seeds} if args.seeds else {}))
    t0 = time.time()
    machine = machine_info(args.threads)
    machine["background_cpus_busy_start"] = background_load(_modes.load_sample_s(mode))
    gnn = pyg()
    print(f"gnn benchmarks ({mode}): {machine['cpu']}, {args.threads} threads, other load "
          f"{machine['background_cpus_busy_start']:.2f} CPUs; PyG: {'installed' if gnn else 'not installed'}; "
          f"GATConv: {'yes' if has_gat() else 'not available'}", flush=True)
    # The README's cases first, then the synthetic graph, then the rest: the results are written
    # after every case, so a run cut short still reports what it measured.
    cases = [("planetoid", m, d) for d in cfg["datasets"] for m in MODELS]
    cases = ([c for c in cases if c[2] == "cora" or c[1] == "GCN"] + [("synthetic", m, None) for m in SYNTHETIC]
             + [c for c in cases if not (c[2] == "cora" or c[1] == "GCN")])
    if args.case:
        wanted = [tuple(c.split("/")) for c in args.case]
        unknown = [c for c in wanted if len(c) != 2 or c[0] not in MODELS or c[1] not in ("cora", "citeseer")]
        if unknown:
            ap.error(f"--case takes MODEL/DATASET with MODEL in {MODELS} and DATASET cora or citeseer; got {unknown}")
        cases = [("planetoid", m, d) for m, d in wanted]
        mode += "_" + "_".join(f"{m}_{d}" for m, d in wanted) + f"_seeds{cfg['seeds']}"
    doc = {"name": "gnn", "mode": mode, "machine": machine, "threads": args.threads, "seeds": cfg["seeds"],
           "epochs": cfg["epochs"], "synthetic_n": cfg["n"], "pyg_version": _pyg_version(),
           "gat_available": has_gat(), "planetoid": [], "synthetic": [], "cases_total": len(cases)}
    # the smoke mode: every (model, library) of (b) in one worker process, started once
    wanted = [m for kind, m, _ in cases if kind == "synthetic" and (m != "GAT" or has_gat())]
    pooled = pooled_synthetic(wanted, cfg["n"], cfg["reps"], args.threads, cfg["warmup"]) \
        if cfg.get("one_worker") and wanted else None
    for kind, model, name in cases:
        if kind == "planetoid":
            path = os.path.join(args.data, f"{name}.npz")
            if not os.path.exists(path) or (model == "GAT" and not has_gat()):
                why = "not available (no GATConv)" if os.path.exists(path) else f"no {path}"
                rec = {"model": model, "dataset": name, "unavailable": why}
            else:
                rec = planetoid_case(model, name, path, cfg["seeds"], cfg["epochs"])
                print(f"[{time.time() - t0:5.0f}s] {model:9s} {name:8s} " + "  ".join(
                    f"{lib}: {rec[lib]['test_acc']:.1f}% {rec[lib]['ms_per_step']:.2f} ms" for lib in ("ours", "pyg")
                    if lib in rec) + f"  speed-up {_speedup(rec)}", flush=True)
            doc["planetoid"].append(rec)
        elif model == "GAT" and not has_gat():
            doc["synthetic"].append({"model": model, "unavailable": "not available (no GATConv)"})
        else:
            rec = synthetic_case(model, cfg["n"], cfg["reps"], cfg["rounds"], args.threads, pooled)
            doc["synthetic"].append(rec)
            print(f"[{time.time() - t0:5.0f}s] {model:9s} power-law n={cfg['n']} " + "  ".join(
                f"{lib}: " + (rec[lib].get("error") or f"{rec[lib]['ms_per_step']:.0f} ms, peak "
                              f"{rec[lib]['peak_bytes'] / 1e6:.0f} MB") for lib in ("ours", "pyg") if lib in rec),
                flush=True)
        machine["background_cpus_busy_end"] = background_load(_modes.load_sample_s(mode, 0.2))
        doc["elapsed_s"] = time.time() - t0
        text, written = write(doc, args.out)
    print()
    print(text)
    print(f"wrote {', '.join(written)} (run took {time.time() - t0:.0f} s)")
    return 0


def write(doc: dict, out: str):
    """(markdown, paths): the JSON, markdown and PNG of the cases done so far."""
    os.makedirs(out, exist_ok=True)
    stem = os.path.join(out, f"gnn_{doc['mode']}")
    with open(stem + ".json", "w") as fh:
        json.dump(doc, fh, indent=1)
    text = markdown(doc)
    with open(stem + ".md", "w") as fh:
        fh.write(text)
    png = plot(doc, stem + ".png")
    return text, [stem + ".json", stem + ".md"] + ([png] if png else [])


def _pyg_version() -> str:
    try:
        import torch_geometric
    except ImportError:
        return "not installed"
    return torch_geometric.__version__


if __name__ == "__main__":
    sys.exit(main())
