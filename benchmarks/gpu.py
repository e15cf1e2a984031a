"""Every op and layer on the GPU against its PyTorch or PyTorch Geometric counterpart, side by side.

Run from the repository root on a machine with a CUDA device (the package built there, with
our CUDA kernels where nvcc is found; PyG from the ``bench`` extra for the layer rows)::

    python -m benchmarks.gpu --smoke     # seconds: CI's check that it works (on the CPU without a GPU)
    python -m benchmarks.gpu --quick     # sizes / 10, a minute or two
    python -m benchmarks.gpu             # the full sizes: a few minutes on an H100
    python -m benchmarks.gpu --only spmm,layers    # some families only

The rows (each op forward, and forward + backward; benchmarks/_gpu_cases.py says how each is
built and checked):
  spmm             sparse_mm(CSR, dense) vs torch.sparse.mm on CSR (cuSPARSE SpMM): uniform and
                   power-law graphs of 10^6 rows, 16 entries a row, p = 16, 64, 256
  dropin           a learnable COO adjacency through two hops, vs torch.sparse.mm on COO (whose
                   backward forms a dense n x n gradient): 10^5 and 10^6 nodes, p = 64
  spgemm           sparse @ sparse: CSR forward vs torch.sparse.mm(CSR, CSR) (cuSPARSE SpGEMM), COO
                   forward + backward vs torch.sparse.mm(COO, COO): 2*10^5 rows, 8 a row
  reduce           sparse_mm(A, B, "mean" / "amax") vs scatter_reduce, p = 64
  softmax          sparse_softmax (edge softmax over a row's stored entries) vs torch.sparse.softmax
  sampled_addmm    vs torch.sparse.sampled_addmm, k = 64
  logsumexp        sparse_logsumexp over rows vs a scatter formulation
  indexed          gather_mm and segment_mm vs torch.bmm on the gathered weights, 2*10^5 x 64 x 64, 16 relations
  trisolve         sparse_triangular_solve (lower, CSR) vs torch.triangular_solve, p = 16
  layers           GCNConv, SAGEConv (mean), GATConv (8 heads x 8), GINConv: a training step against
                   PyG's with the same weights, and its peak device memory
Phases: fwd; fwd+bwd "fresh" (new leaves every call: our structure caches miss) and "same"
(the same leaves every call: they hit) for spmm, reduce and softmax, "fresh" for the rest.

Before timing, each side runs once and its output (and every leaf's gradient) is compared with
the other's.  Times: CUDA events around each call, the median (and min) of 15 forward / 8
forward + backward calls after 3 warm-up calls; peak memory: torch.cuda.max_memory_allocated
above what was allocated before the call.  Ratio = their time / ours (above 1: ours faster).
Results: benchmarks/results/gpu_<mode>.{json,md,png}, naming the GPU and the versions of torch,
Triton and PyG.  Without a CUDA device, --smoke runs everything on the CPU at the smallest sizes
(perf_counter in place of CUDA events: the numbers mean nothing) and the other modes say so and
exit 0 with nothing timed.  Exit status 1 where a check fails or one of our methods raises.
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time
import traceback
import warnings

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")   # before torch loads (see sparse_mm.py): the CPU smoke run

import torch  # noqa: E402

import torchsparsegradutils as tsgu  # noqa: E402
from torchsparsegradutils import _C  # noqa: E402

from . import _gpu_cases as C  # noqa: E402
from . import _modes  # noqa: E402
from ._machine import machine_info  # noqa: E402
from ._report import pyplot  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TITLE = "Every op and layer on the GPU against PyTorch / PyG"
# mode -> (sizes divided by, forward reps, fwd+bwd / step reps, warm-up calls, widths p)
MODES = {"full": (1, 15, 8, 3, (16, 64, 256)), "quick": (10, 7, 5, 2, (16, 64)),
         "smoke": (1000, _modes.SMOKE_REPS, _modes.SMOKE_REPS, _modes.SMOKE_WARMUP, (16,))}
FAMILIES = ("spmm", "dropin", "spgemm", "reduce", "softmax", "sampled_addmm", "logsumexp", "indexed", "trisolve",
            "layers")
PHASES = {"fwd": "the forward alone",
          "fwd+bwd fresh": "forward and backward, the differentiable operands cloned into new leaves every call "
                           "(new index tensors: our structure caches miss, as when a model rebuilds its sparse tensor)",
          "fwd+bwd same": "forward and backward on the same leaves every call (the caches hit, as in a training "
                          "loop over a fixed graph)",
          "step": "a layer's training step: zero_grad, forward, square().mean(), backward"}
warnings.filterwarnings("ignore", message=".*[Ss]parse.*")


def sci(n: int) -> str:
    """200000 -> '2e5'."""
    m, e = f"{n:.0e}".split("e")
    return f"{m}e{int(e)}"


def run(b: C.Bench, families, ps, smoke: bool) -> list:
    """Every family asked for, at the mode's sizes (b.n divides the full mode's); the families
    that raised outside a row, with why (the others still run).  The smoke run takes one input
    per family (the skewed one), with every phase on it."""
    dev, n1, n2, n5 = b.dev, b.n(1_000_000), b.n(200_000), b.n(500_000)
    graphs = {}

    def graph(kind, n, deg):
        if (kind, n, deg) not in graphs:
            graphs[kind, n, deg] = (C.uniform if kind == "uniform" else C.powerlaw)(dev, n, deg)
        return f"{kind} {sci(n)}x{deg}", graphs[kind, n, deg]

    def few(items):
        return items[-1:] if smoke else items

    def fwd_fresh_then_same(kind, n):   # reduce, softmax: fwd and fresh leaves on one graph, same on two
        if smoke:
            return [(*graph(kind, n, 16), ("fwd", "fresh", "same"))]
        return [(*graph(kind, n, 16), ("fwd", "fresh")), (*graph("uniform", n1, 16), ("same",)),
                (*graph("powerlaw", n1, 16), ("same",))]
    todo = {
        "spmm": lambda: C.spmm(b, few([graph("uniform", n1, 16), graph("powerlaw", n1, 16)]), ps,
                               ("fwd", "fresh", "same")),
        "dropin": lambda: C.dropin(b, few([(b.n(100_000), 16, 64), (n1, 16, 64)])),
        "spgemm": lambda: C.spgemm(b, few([graph("uniform", n2, 8), graph("powerlaw", n2, 8)])),
        "reduce": lambda: C.reduce(b, fwd_fresh_then_same("powerlaw", n5), 64),
        "softmax": lambda: C.softmax(b, fwd_fresh_then_same("powerlaw", n1)),
        "sampled_addmm": lambda: C.sampled_addmm(b, *graph("powerlaw", n5, 16), 64),
        "logsumexp": lambda: C.logsumexp(b, *graph("powerlaw", n1, 16)),
        "indexed": lambda: C.indexed(b, n2, 64, 64, 16),
        "trisolve": lambda: C.trisolve(b, *graph("uniform", n2, 8), 16),
        "layers": lambda: C.layers(b, [(n2, 15, 64)] if smoke else [(n2, 15, 64), (n1, 10, 128)]),
    }
    failed = []
    for family in FAMILIES:
        if family not in families:
            continue
        if family == "layers":
            graphs.clear()                # the layers' graphs are their own: free the device memory
        try:
            todo[family]()
        except Exception as e:  # noqa: BLE001 - reported, and the exit status says so
            traceback.print_exc()
            failed.append(f"{family}: {type(e).__name__}: {str(e)[:200]}")
    return failed


# --------------------------------------------------------------------------- report

def versions() -> dict:
    v = {"torch": torch.__version__, "cuda": torch.version.cuda, "torchsparsegradutils": tsgu.__version__,
         "our_cuda_kernels": bool(getattr(_C, "cuda", False)), "python": platform.python_version()}
    for name in ("triton", "torch_geometric"):
        try:
            v[name] = __import__(name).__version__
        except ImportError:
            v[name] = None
    return v


def _ms(t: dict) -> str:
    if "median_s" in t:
        return f"{t['median_s'] * 1e3:.3f}"
    return t.get("error") or (f"skipped: {t['skip']}" if "skip" in t else "-")


def _mib(t: dict) -> str:
    return f"{t['peak_bytes'] / 2 ** 20:.0f}" if t.get("peak_bytes") is not None else "-"


def _check(c: dict) -> str:
    s = ("ok" if c.get("ok") else "**WRONG**") + (f" ({c['rel_err']:.1e})" if "rel_err" in c else "")
    return s + (f"; {c['note']}" if c.get("note") else "")


def summary(rows) -> list:
    """Per family and phase: how many rows are timed on both sides, their ratios' range and geometric mean."""
    groups = {}
    for r in rows:
        groups.setdefault((r["family"], r["phase"]), []).append(r["ratio"])
    out = ["| family | phase | rows | ratio range | geometric mean | ours faster in |", "|---|---|---|---|---|---|"]
    for (fam, phase), rs in groups.items():
        xs = [x for x in rs if x]
        rng = f"{min(xs):.2f}x .. {max(xs):.2f}x" if xs else "-"
        gm = f"{statistics.geometric_mean(xs):.2f}x" if xs else "-"
        out.append(f"| {fam} | {phase} | {len(rs)} | {rng} | {gm} | {sum(x > 1 for x in xs)} / {len(xs)} |")
    return out


def markdown(doc: dict) -> str:
    v, t = doc["versions"], doc["timing"]
    smoke_cpu = doc["device"]["type"] == "cpu"
    kernels_missing = "not built (SpMM / SDDMM through PyTorch ops)"
    lines = [f"# {TITLE} ({doc['mode']} mode)", ""]
    if smoke_cpu:
        lines += ["**CPU smoke: numbers mean nothing.** No CUDA device: every path of the script on the CPU at the "
                  "smallest sizes, timed by perf_counter.", ""]
    lines += [f"Device: **{doc['device']['name']}**; torch {v['torch']} (CUDA {v['cuda']}), Triton {v['triton']}, "
              f"torch_geometric {v['torch_geometric']}; torchsparsegradutils {v['torchsparsegradutils']} (this "
              f"repository), our CUDA kernels {'built' if v['our_cuda_kernels'] else kernels_missing}; "
              f"host {doc['machine']['cpu']}, Python {v['python']}.  ",
              f"Timing: {t['method']}, median of {t['reps_fwd']} forward / {t['reps_step']} forward + backward "
              f"calls after {t['warmup']} warm-up calls; sizes are the full mode's divided by {t['scale']}.  "
              f"Every row's output (and every gradient) was checked against the counterpart's first.  "
              f"Wall time {doc['elapsed_s']:.0f} s.", "",
              "Ratio = their time / ours (above 1: ours faster).  Times in ms; peak memory in MiB above what was "
              "allocated before the call (CUDA only).", "", "## Summary", ""] + summary(doc["rows"]) + [
              "", "## Rows", "",
              "| case | phase | against | theirs ms | ours ms | ratio | peak MiB theirs / ours | check |",
              "|---|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        ratio = f"{r['ratio']:.2f}x" if r["ratio"] else "-"
        lines.append(f"| {r['case']} | {r['phase']} | {r['against']} | {_ms(r['theirs'])} | {_ms(r['ours'])} | "
                     f"{ratio} | {_mib(r['theirs'])} / {_mib(r['ours'])} | {_check(r['check'])} |")
    if doc["failed_families"]:
        lines += ["", "Families that failed outside a row (the run went on):", ""] + \
            [f"- {f}" for f in doc["failed_families"]]
    lines += ["", "Phases:", ""] + [f"- {k}: {d}." for k, d in PHASES.items()]
    return "\n".join(lines) + "\n"


def plot(doc: dict, path: str):
    plt = pyplot()
    rows = [r for r in doc["rows"] if r["ratio"]]
    if plt is None or not rows:
        return None
    colors = {"fwd": "tab:blue", "fwd+bwd fresh": "tab:orange", "fwd+bwd same": "tab:green", "step": "tab:purple"}
    fig, ax = plt.subplots(figsize=(8, 0.22 * len(rows) + 1.4))
    ax.barh(range(len(rows)), [r["ratio"] for r in rows], color=[colors[r["phase"]] for r in rows])
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"{r['case']} [{r['phase']}]" for r in rows], fontsize=6)
    ax.invert_yaxis()
    ax.axvline(1, color="k", lw=1)
    ax.set_xscale("log")
    ax.set_xlabel("their time / ours (above 1: ours faster)")
    for phase, c in colors.items():
        ax.bar(0, 0, color=c, label=phase)
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title(f"{doc['device']['name']} ({doc['mode']} mode)" + (": CPU smoke, numbers mean nothing"
                                                                   if doc["device"]["type"] == "cpu" else ""))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _modes.add_mode_args(ap, "the full sizes divided by 10, p = 16 and 64")
    ap.add_argument("--only", default=",".join(FAMILIES), help="comma-separated families: " + ", ".join(FAMILIES))
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    a = ap.parse_args(argv)
    mode = _modes.mode_of(a)
    families = a.only.split(",")
    unknown = sorted(set(families) - set(FAMILIES))
    if unknown:
        ap.error(f"unknown families {unknown}; choose from {', '.join(FAMILIES)}")
    cuda = torch.cuda.is_available()
    if not cuda and mode != "smoke":
        print(f"no CUDA device: the {mode} mode times on a GPU only, nothing was measured "
              "(--smoke runs every path on the CPU)")
        return 0
    scale, reps_fwd, reps_step, warmup, ps = MODES[mode]
    b = C.Bench("cuda" if cuda else "cpu", scale, reps_fwd, reps_step, warmup)
    machine = machine_info(torch.get_num_threads())
    name = torch.cuda.get_device_name() if cuda else f"CPU: {machine['cpu']}"
    print(f"{name}, {mode} mode" + ("" if cuda else ": CPU smoke, the numbers mean nothing"), flush=True)
    t0 = time.perf_counter()
    failed = run(b, families, ps, mode == "smoke")
    doc = {"title": TITLE, "mode": mode, "families": families,
           "device": {"type": b.dev.type, "name": name,
                      "capability": list(torch.cuda.get_device_capability()) if cuda else None,
                      "memory_bytes": torch.cuda.get_device_properties(0).total_memory if cuda else None},
           "versions": versions(), "machine": machine,
           "timing": {"method": "CUDA events around each call" if cuda else
                      "perf_counter around each call (CPU smoke: numbers mean nothing)",
                      "reps_fwd": reps_fwd, "reps_step": reps_step, "warmup": warmup, "scale": scale},
           "phases": PHASES, "rows": b.rows, "failed_families": failed, "elapsed_s": time.perf_counter() - t0}
    os.makedirs(a.out, exist_ok=True)
    stem = os.path.join(a.out, f"gpu_{mode}")
    with open(stem + ".json", "w") as f:
        json.dump(doc, f, indent=1)
    with open(stem + ".md", "w") as f:
        f.write(markdown(doc))
    png = plot(doc, stem + ".png")
    wrong = [r["case"] + " " + r["phase"] for r in b.rows if not r["check"].get("ok")]
    broke = [r["case"] + " " + r["phase"] + ": " + r["ours"]["error"] for r in b.rows if "error" in r["ours"]]
    print(f"{len(b.rows)} rows in {doc['elapsed_s']:.1f} s; written: {stem}.json, .md" + (", .png" if png else ""))
    for msg in [f"check failed: {w}" for w in wrong] + [f"ours failed: {e}" for e in broke] + \
            [f"family failed: {f}" for f in failed]:
        print(msg)
    return 1 if wrong or broke or failed else 0


if __name__ == "__main__":
    sys.exit(main())
