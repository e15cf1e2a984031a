"""Benchmark of ``nn.GATv2Conv`` (on ``graph_attention_v2``) against PyTorch Geometric's ``GATv2Conv``.

Run from the repository root::

    MALLOC_MMAP_THRESHOLD_=65536 python -m benchmarks.gatv2            # a few minutes on 2 cores
    MALLOC_MMAP_THRESHOLD_=65536 python -m benchmarks.gatv2 --quick    # about a minute: 5000 nodes, 50000 edges
    MALLOC_MMAP_THRESHOLD_=65536 python -m benchmarks.gatv2 --smoke    # seconds

A training step of one layer, forward + backward (the gradients of x and of every
parameter), float32, in training mode without dropout (so that both compute the same
numbers), the same weights in both layers, the edge_index given each step (ours builds
its pattern once and caches it; PyG adds self loops every step).  Graph: 2*10^4 nodes and
2*10^5 uniformly random edges (repeats and self loops as they fall), 64 input features,
4 heads of 16 and of 64 features.  Both layers run in one process: first each is checked
against PyG's in float64 (output and every gradient), then timed (medians of interleaved
steps after a warm-up step), then the peak memory of one step above what the process held
before it (the resident set's high-water mark, reset through /proc/self/clear_refs; large
blocks go back to the OS with the fixed mmap threshold above).  Timings are never asserted
on.  Results: benchmarks/results/gatv2_{smoke,quick,full}.{json,md}.
"""
import argparse
import gc
import json
import os
import platform
import statistics
import time
import warnings

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")   # before torch loads (see sparse_mm.py)

import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
warnings.filterwarnings("ignore", message=".*[Ss]parse.*")


def graph(n: int, E: int, F: int):
    gen = torch.Generator().manual_seed(1)
    return torch.randn(n, F, generator=gen), torch.randint(0, n, (2, E), generator=gen)


def layers(F: int, C: int, heads: int):
    from torch_geometric.nn import GATv2Conv as PyG

    from torchsparsegradutils.nn import GATv2Conv
    torch.manual_seed(0)
    pyg = PyG(F, C, heads=heads)
    ours = GATv2Conv(F, C, heads=heads)
    ours.load_state_dict(pyg.state_dict())
    return {"ours": ours, "pyg": pyg}


def step_fn(layer, x, ei, G):
    x = x.detach().requires_grad_()
    params = [x] + list(layer.parameters())

    def step():
        return torch.autograd.grad(layer(x, ei), params, G)
    return step


def check(x, ei, F, C, heads) -> float:
    """The largest relative difference of ours from PyG's (output and every gradient), float64."""
    ls = {k: v.double() for k, v in layers(F, C, heads).items()}
    G = torch.randn(x.shape[0], heads * C, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    res = {}
    for name, layer in ls.items():
        xx = x.double().requires_grad_()
        out = layer(xx, ei)
        res[name] = [out.detach(), *torch.autograd.grad(out, [xx, *layer.parameters()], G)]
    rel = max(((a - b).abs().max() / b.abs().max().clamp(min=1e-30)).item() for a, b in zip(res["ours"], res["pyg"]))
    if rel > 1e-9:
        raise AssertionError(f"ours differs from PyG's GATv2Conv: {rel}")
    return rel


def _kb(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def peak_mb(step) -> float:
    """MB the resident set rose to during one step, above what the process held before."""
    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    base = _kb("VmRSS")
    grads = step()
    peak = _kb("VmHWM") - base
    del grads
    return peak / 1024


def run(n, E, F, C, heads, reps):
    x, ei = graph(n, E, F)
    rel = check(x, ei, F, C, heads)
    G = torch.randn(n, heads * C, generator=torch.Generator().manual_seed(2))
    steps = {name: step_fn(layer.train(), x, ei, G) for name, layer in layers(F, C, heads).items()}
    for s in steps.values():
        s()                                                 # warm-up (ours: builds and caches the pattern)
    ts = {name: [] for name in steps}
    for _ in range(reps):
        for name, s in steps.items():
            t0 = time.perf_counter()
            s()
            ts[name].append(time.perf_counter() - t0)
    mem = {name: peak_mb(s) for name, s in steps.items()}
    return {"nodes": n, "edges": E, "in_channels": F, "heads": heads, "out_channels": C, "float64_rel_diff": rel,
            "methods": {name: {"median_ms": 1e3 * statistics.median(t), "min_ms": 1e3 * min(t), "reps": len(t),
                               "peak_mb": mem[name]} for name, t in ts.items()}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--out", default=RESULTS, help="folder of the results (default: benchmarks/results)")
    args = ap.parse_args()
    import torch_geometric
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    n, E, reps = {"smoke": (500, 5000, 1), "quick": (5000, 50_000, 3), "full": (20_000, 200_000, args.reps)}[mode]
    cases = [run(n, E, 64, C, 4, reps) for C in (16, 64)]
    info = (f"{platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}, torch_geometric "
            f"{torch_geometric.__version__}; one layer, float32, forward + backward (x and every parameter), "
            f"medians of {reps} interleaved steps; peak: the step's rise of the resident set, one process")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"gatv2_{mode}.json"), "w") as f:
        json.dump({"info": info, "cases": cases}, f, indent=1)
    lines = [f"# GATv2Conv training step: ours vs PyG ({mode})", "", info + ".", "",
             "| nodes | edges | heads x C | method | step (ms) | PyG / this (time) | peak (MB) | this / PyG (memory) |",
             "|---|---|---|---|---|---|---|---|"]
    for c in cases:
        p = c["methods"]["pyg"]
        for name, r in c["methods"].items():
            lines.append(f"| {c['nodes']} | {c['edges']} | {c['heads']} x {c['out_channels']} | {name} | "
                         f"{r['median_ms']:.1f} | {p['median_ms'] / r['median_ms']:.2f} | {r['peak_mb']:.0f} | "
                         f"{r['peak_mb'] / max(p['peak_mb'], 1e-9):.2f} |")
    with open(os.path.join(args.out, f"gatv2_{mode}.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
