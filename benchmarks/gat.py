"""Benchmark of ``nn.GATConv`` (on ``graph_attention``) against PyTorch Geometric's ``GATConv``.

Run from the repository root::

    python -m benchmarks.gat --smoke     # seconds: CI's check that it works
    python -m benchmarks.gat --quick     # about a minute
    python -m benchmarks.gat             # a few minutes on 2 cores

A training step of one layer, forward + backward (the gradients of every parameter), in
training mode with attention dropout, the same weights in both layers, the edge_index
given each step (ours builds its pattern once and caches it; PyG adds self loops every
step, as it does in training).  Graphs: Cora (``--cora``, default ``/work/shared/data/cora.npz``:
1433 bag-of-words features, 8 heads x 8, dropout 0.6, the GAT paper's first layer) and a
synthetic power-law graph (benchmarks/_matrices.py: 16 edges per node on average, a few
hubs; 64 dense features, 8 heads x 8, dropout 0.6; 2*10^5 nodes, 5*10^4 in quick mode).
PyG's layer and ours take the same dense x; on Cora ours also runs on x as a CSR tensor
("ours sparse x": the bag-of-words rows are 1.3% filled, and the feature transform, the
largest part of the step there, becomes sparse_mm(x, W^T)).

Before timing, every method is checked against PyG's layer in float64 with dropout 0
(outputs and every parameter gradient: ours in float64 within 1e-9, in float32 as close as
PyG's own float32 result).  Times are medians of steps side by side in this one process
(benchmarks/_harness.interleaved: a warm-up that allocates and frees a few hundred MB like a
training step, a warm-up step of each method, then interleaved rounds, methods taking
turns), with each step's user and system CPU time and minor page faults.  There is no
fresh-worker timing here: the layers were always timed side by side in one process.
Peak memory: the rise of the resident set over one step, in a fresh process per (graph,
method) (benchmarks/_harness.peak_memory).
The smoke mode (CI's check that the script works): Cora as it is, the power-law graph at
10^3 nodes, one timed step without a warm-up, and one fresh process (the first graph's
"ours") for peak memory.
Results: benchmarks/results/gat_{smoke,quick,full}.{json,md}.  Timings are never asserted on.
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import warnings

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")   # before torch loads (see sparse_mm.py)

import torch  # noqa: E402

from . import _harness as H  # noqa: E402
from . import _modes  # noqa: E402
from ._matrices import MatrixSpec, pattern  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")
CORA = "/work/shared/data/cora.npz"
# the methods of a case: ours and PyG on the same dense x; on Cora also ours on x as a CSR
# tensor (bag-of-words rows, 1.3% stored: the feature transform is then sparse_mm)
METHODS = {"cora": ("ours", "ours sparse x", "pyg"), "powerlaw": ("ours", "pyg")}
HEADS, CHANNELS, DROPOUT = 8, 8, 0.6
REPS = {"cora": {"full": 41, "quick": 15, "smoke": _modes.SMOKE_REPS},     # timed steps per mode
        "powerlaw": {"full": 7, "quick": 3, "smoke": _modes.SMOKE_REPS}}
POWERLAW_N = {"full": 200_000, "quick": 50_000, "smoke": 1_000}
warnings.filterwarnings("ignore", message=".*[Ss]parse.*")


def graph(name: str, mode: str, cora: str):
    """(x, edge_index) of a case, made the same way in every process."""
    if name == "cora":
        import numpy as np

        with np.load(cora) as f:
            ei = torch.from_numpy(f["edge_index"]).long()
            x = torch.sparse_csr_tensor(torch.from_numpy(f["x_indptr"]), torch.from_numpy(f["x_indices"]),
                                        torch.from_numpy(f["x_data"]), tuple(f["x_shape"])).to_dense()
        return x, ei
    n = POWERLAW_N[mode]
    idx, _ = pattern(MatrixSpec("powerlaw", n, n, per_row=16))
    x = torch.randn(n, 64, generator=torch.Generator().manual_seed(1))
    return x, idx.flip(0).contiguous()          # COO (row = target, col = source) -> (source, target)


def methods(case: str, x: torch.Tensor, dropout: float):
    """name -> (layer, its input features): the layers with the same weights."""
    from torch_geometric.nn import GATConv as PyGGATConv

    from torchsparsegradutils.nn import GATConv

    torch.manual_seed(0)
    in_channels = x.shape[1]
    pyg = PyGGATConv(in_channels, CHANNELS, heads=HEADS, dropout=dropout)
    ours = GATConv(in_channels, CHANNELS, heads=HEADS, dropout=dropout)
    ours.load_state_dict(pyg.state_dict())
    every = {"ours": (ours, x), "ours sparse x": (ours, x.to_sparse_csr()), "pyg": (pyg, x)}
    return {name: every[name] for name in METHODS[case]}


def step_fn(layer, x, ei, G):
    params = list(layer.parameters())

    def step():
        out = layer(x, ei)
        return torch.autograd.grad(out, params, G)
    return step


def check(case: str, x, ei) -> dict:
    """Each method's output and parameter gradients (dropout 0), in float32 and float64,
    against PyG's in float64: max relative differences.  Ours must match in float64 (1e-9)
    and be as close in float32 as PyG's own float32 result is (10x, or 1e-5)."""
    G = torch.randn(x.shape[0], HEADS * CHANNELS, generator=torch.Generator().manual_seed(2))
    results = {}
    for name, (layer, xin) in methods(case, x, 0.0).items():
        for dtype in (torch.float32, torch.float64):
            layer.to(dtype)
            out = layer(xin.to(dtype), ei)
            grads = torch.autograd.grad(out, list(layer.parameters()), G.to(dtype))
            results[name, dtype] = [t.detach().double() for t in (out, *grads)]
    ref = results["pyg", torch.float64]
    rel = {key: max(((a - b).abs().max() / b.abs().max().clamp(min=1e-30)).item() for a, b in zip(got, ref))
           for key, got in results.items()}
    diffs = {f"{name} {str(dtype)[6:]}": d for (name, dtype), d in rel.items()}
    for name in METHODS[case]:
        if name != "pyg" and (rel[name, torch.float64] > 1e-9 or
                              rel[name, torch.float32] > max(10 * rel["pyg", torch.float32], 1e-5)):
            raise AssertionError(f"{name} differs from PyG's GATConv: {diffs}")
    return diffs


def time_steps(case: str, x, ei, reps: int, warmup: bool = True, warm_mb: float = _modes.WARM_MB) -> dict:
    """Median (and min) seconds of a training step per method, side by side in this process
    (_harness.interleaved): a training-like allocation, a warm-up step of each (ours: builds
    and caches the pattern), then `reps` interleaved rounds; with each step's CPU time and
    minor page faults."""
    G = torch.randn(x.shape[0], HEADS * CHANNELS, generator=torch.Generator().manual_seed(2))
    steps = {name: step_fn(layer.train(), xin, ei, G) for name, (layer, xin) in methods(case, x, DROPOUT).items()}
    t = H.interleaved(steps, reps, warm_mb, warmup=1 if warmup else 0)
    return {name: dict(r, reps=r["runs"], warm_up=t["warm_up"]) for name, r in t["methods"].items()}


def memory_child(case: str, method: str, mode: str, cora: str, threads: int) -> None:
    """In a fresh process: one step's peak memory, printed as JSON."""
    H.env_threads(threads)
    x, ei = graph(case, mode, cora)
    layer, xin = methods(case, x, DROPOUT)[method]
    layer.train()
    G = torch.randn(x.shape[0], HEADS * CHANNELS)
    prep = H.Prepared(list(layer.parameters()), lambda *p: layer(xin, ei), lambda g: None)
    print(json.dumps(H.peak_memory(prep, G)))


def memory(case: str, method: str, mode: str, cora: str, threads: int) -> dict:
    cmd = [sys.executable, "-m", "benchmarks.gat", "--memory-of", case, method, "--cora", cora,
           "--threads", str(threads)] + ([] if mode == "full" else [f"--{mode}"])
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def markdown(results: dict) -> str:
    lines = [f"# GATConv training step: ours vs PyG ({results['mode']})", "",
             f"{results['machine']}, {results['threads']} threads, torch {results['torch']}, "
             f"torch_geometric {results['torch_geometric']}; one layer, {HEADS} heads x {CHANNELS}, "
             f"dropout {DROPOUT}, forward + backward, medians of steps side by side in one process (interleaved, after "
             f"a training-like allocation and a warm-up step); CPU: user + system ms per step of the whole process "
             f"(getrusage); faults: minor page faults per step.", "",
             "| graph | nodes | edges | method | step (ms) | PyG / this (time) | CPU ms (user + sys) | faults | "
             "peak (MB) | this / PyG (memory) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for c in results["cases"]:
        t, mem = c["time"], c.get("memory", {})
        peak = {k: mem.get(k, {}).get("peak_bytes") for k in t}
        for name in t:
            mo, mp = peak[name], peak["pyg"]
            mem_cols = (f"{mo / 1e6:.0f} | " + (f"{mo / mp:.2f}" if mp else "-")) if mo is not None else "- | -"
            u = t[name].get("usage")
            use = f"{u['user_s'] * 1e3:.1f} + {u['sys_s'] * 1e3:.1f} | {u['minflt']:.0f}" if u else "- | -"
            lines.append(f"| {c['graph']} | {c['nodes']} | {c['edges']} | {name} | {t[name]['median_s'] * 1e3:.1f} | "
                         f"{t['pyg']['median_s'] / t[name]['median_s']:.2f} | {use} | {mem_cols} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _modes.add_mode_args(ap)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--cora", default=CORA)
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--graphs", default="cora,powerlaw", help="comma-separated: cora, powerlaw")
    ap.add_argument("--out", default=RESULTS)
    ap.add_argument("--memory-of", nargs=2, metavar=("CASE", "METHOD"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    base = _modes.mode_of(a)
    if a.memory_of:
        memory_child(*a.memory_of, base, a.cora, a.threads)
        return 0
    import torch_geometric

    H.env_threads(a.threads)
    mode = base + ("" if a.graphs == "cora,powerlaw" else "_" + a.graphs.replace(",", "_")) \
        + ("" if a.threads == 2 else f"_{a.threads}threads")
    results = {"mode": mode, "threads": a.threads, "torch": torch.__version__,
               "torch_geometric": torch_geometric.__version__, "machine": platform.processor() or platform.machine(),
               "cases": []}
    for case in a.graphs.split(","):
        if case == "cora" and not os.path.exists(a.cora):
            print(f"skipping Cora: {a.cora} not found (--cora PATH)", flush=True)
            continue
        x, ei = graph(case, base, a.cora)
        row = {"graph": case, "nodes": x.shape[0], "edges": ei.shape[1], "check": check(case, x, ei),
               "time": time_steps(case, x, ei, REPS[case][base], warmup=base != "smoke",
                                  warm_mb=_modes.SMOKE_WARM_MB if base == "smoke" else _modes.WARM_MB)}
        # the smoke mode starts one memory process: the first graph's first method
        measured = METHODS[case] if base != "smoke" else METHODS[case][:1] if not results["cases"] else ()
        if not a.no_memory and measured:
            row["memory"] = {m: memory(case, m, base, a.cora, a.threads) for m in measured}
        results["cases"].append(row)
        print(json.dumps(row), flush=True)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, f"gat_{mode}.json"), "w") as f:
        json.dump(results, f, indent=1)
    table = markdown(results)
    with open(os.path.join(a.out, f"gat_{mode}.md"), "w") as f:
        f.write(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
