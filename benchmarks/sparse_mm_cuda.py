"""sparse_mm on a CUDA device: our CUDA kernels against PyTorch's (cuSPARSE) side by side.

For each matrix and width p, all in float32 with int64 indices, timed with CUDA
events after warm-up (median and min of --reps runs):
  fwd      C = A @ B: ours (sparse_mm, CSR) vs torch.sparse.mm (CSR, cuSPARSE)
  sddmm    the gradient at A's pattern, G B^T sampled: ours vs torch.sparse.sampled_addmm
  fwd+bwd  C = A @ B and both gradients: ours (CSR and COO), PyTorch's CSR autograd,
           our torch-ops fallback (the path of builds without nvcc), and the
           published release's approach (torch.sparse.mm forward; backward
           gathering nnz x p rows of G and B, then torch.sparse.mm with A^T)
and the peak device memory of each fwd+bwd above what its inputs hold, against
the necessary bytes (C + grad_B + grad_A's values).  Bandwidth: ours forward
against the bytes model nnz*(index+value) + nnz*p*4 + n*p*4, and the device's
measured copy bandwidth (a 1 GiB device-to-device copy, bytes read + written).

  python benchmarks/sparse_mm_cuda.py [--quick | --smoke] [--out benchmarks/results]

writes sparse_mm_cuda[_quick|_smoke].json, .md and .png there.  --smoke checks that the
script works: two tiny matrices, one timed run of one call, no warm-up.
"""
import argparse
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from torchsparsegradutils import _C, _backends, sparse_mm  # noqa: E402
from torchsparsegradutils._core import native  # noqa: E402

from benchmarks import _modes  # noqa: E402
from torchsparsegradutils._core.intake import as_csr  # noqa: E402

DEV = "cuda"
TARGETS = {"fwd": 1.2, "sddmm": 1.3, "fwd+bwd": 1.5, "memory": 1.2}


# ------------------------------------------------------------------ matrices
def fem(nx: int, ny: int, nz: int) -> torch.Tensor:
    """The 27-point stencil of an nx x ny x nz grid (a cfd2-sized FEM-like pattern
    for 49 x 50 x 50: 122,500 rows, 3.2M entries), as coalesced COO indices."""
    g = torch.arange(nx * ny * nz, device=DEV)
    x, y, z = g // (ny * nz), (g // nz) % ny, g % nz
    rows, cols = [], []
    for dx in (-1, 0, 1):
        for dy in (-1, 0, 1):
            for dz in (-1, 0, 1):
                ok = (x + dx >= 0) & (x + dx < nx) & (y + dy >= 0) & (y + dy < ny) & (z + dz >= 0) & (z + dz < nz)
                rows.append(g[ok])
                cols.append(g[ok] + (dx * ny + dy) * nz + dz)
    return _coalesced(torch.cat(rows), torch.cat(cols), nx * ny * nz)


def uniform(n: int, per_row: int, gen: torch.Generator) -> torch.Tensor:
    rows = torch.arange(n, device=DEV).repeat_interleave(per_row)
    return _coalesced(rows, torch.randint(0, n, rows.shape, device=DEV, generator=gen), n)


def powerlaw(n: int, per_row: int, gen: torch.Generator) -> torch.Tensor:
    """Row lengths from a Pareto law (exponent 2.1, up to n/10 entries), columns
    skewed toward low indices (long columns too), about per_row entries per row."""
    u = torch.rand(n, device=DEV, generator=gen)
    deg = u.pow(-1 / 1.1)
    deg = (deg * per_row / deg.mean()).clamp(1, n // 10).long()
    rows = torch.arange(n, device=DEV).repeat_interleave(deg)
    cols = (torch.rand(rows.shape, device=DEV, generator=gen).pow(2) * n).long().clamp(max=n - 1)
    return _coalesced(rows, cols, n)


def _coalesced(rows, cols, n):
    return torch.sparse_coo_tensor(torch.stack([rows, cols]), torch.ones(rows.numel(), device=DEV),
                                   (n, n)).coalesce().indices()


# ------------------------------------------------------------------ timing
WARMUP, INNER, COPY_ELEMENTS = 3, 5, 2 ** 28     # the smoke mode lowers them


def timed(fn, reps: int, warmup: int = None, inner: int = None) -> dict:
    """Seconds per call of fn: `inner` calls back to back between two events (the
    host queues ahead, as in a training loop), median and min over reps."""
    warmup = WARMUP if warmup is None else warmup
    inner = INNER if inner is None else inner
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        ts.append(start.elapsed_time(end) / 1e3 / inner)
    return {"median_s": statistics.median(ts), "min_s": min(ts)}


def peak_extra(fn, clear) -> int:
    """Peak device memory allocated by fn beyond what was allocated before it (after
    clear() has dropped what earlier runs left, e.g. gradients)."""
    clear()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def attempt(fn, reps, clear=lambda: None):
    """(timing, peak bytes) of fn, or an 'out of memory' / error record."""
    try:
        t = timed(fn, reps)
        t["peak_bytes"] = peak_extra(fn, clear)
        return t
    except torch.OutOfMemoryError:
        return {"error": "out of memory"}
    except RuntimeError as e:
        return {"error": str(e).splitlines()[0][:120]}
    finally:
        torch.cuda.empty_cache()


def copy_bandwidth() -> float:
    x = torch.empty(COPY_ELEMENTS, device=DEV)
    y = torch.empty_like(x)
    t = timed(lambda: y.copy_(x), 20 if COPY_ELEMENTS == 2 ** 28 else 1)["median_s"]
    return 2 * x.numel() * 4 / t / 1e9


# ------------------------------------------------------------------ methods
def release_fwd_bwd(A, B, G):
    """The published release's math: torch.sparse.mm forward; grad_A by gathering
    the rows of G and B at every entry (nnz x p each), grad_B = A^T G."""
    C = torch.sparse.mm(A, B)
    crow, col = A.crow_indices(), A.col_indices()
    rows = torch.repeat_interleave(torch.arange(A.shape[0], device=DEV), crow[1:] - crow[:-1])
    gA = (G.index_select(0, rows) * B.index_select(0, col)).sum(1)
    gB = torch.sparse.mm(A.t(), G)
    return C, gA, gB


def ours_fwd_bwd(A, B, G):
    A.grad = B.grad = None
    sparse_mm(A, B).backward(G)


def torch_fwd_bwd(A, B, G):
    A.grad = B.grad = None
    torch.sparse.mm(A, B).backward(G)


def fallback_fwd_bwd(A, B, G):
    native.cuda_enabled = False
    try:
        ours_fwd_bwd(A, B, G)
    finally:
        native.cuda_enabled = True


def run_case(name, idx, n, p, reps, gen):
    nnz = idx.shape[1]
    vals = torch.randn(nnz, device=DEV, generator=gen)
    coo = torch.sparse_coo_tensor(idx, vals, (n, n), is_coalesced=True)
    csr = coo.to_sparse_csr()
    B = torch.randn(n, p, device=DEV, generator=gen)
    G = torch.randn(n, p, device=DEV, generator=gen)
    view = as_csr(csr)
    r = {"matrix": name, "n": n, "nnz": nnz, "p": p, "max_row": int((view.ptr[1:] - view.ptr[:-1]).max()),
         "timing": {}, "memory": {}, "check": {}}
    # correctness against PyTorch, once
    C_ref = torch.sparse.mm(csr, B)
    r["check"]["fwd_rel_err"] = float((sparse_mm(csr, B) - C_ref).norm() / C_ref.norm())
    ref_gA = torch.sparse.sampled_addmm(csr, G, B.t(), beta=0.0).values()
    r["check"]["sddmm_rel_err"] = float((_backends.sddmm(view, G, B) - ref_gA).norm() / ref_gA.norm())
    tm = r["timing"]
    tm["fwd ours"] = timed(lambda: sparse_mm(csr, B), reps)
    tm["fwd cusparse"] = timed(lambda: torch.sparse.mm(csr, B), reps)
    tm["sddmm ours"] = timed(lambda: _backends.sddmm(view, G, B), reps)
    tm["sddmm sampled_addmm"] = timed(lambda: torch.sparse.sampled_addmm(csr, G, B.t(), beta=0.0), reps)
    Bg = B.clone().requires_grad_()
    for label, A, fn in [("ours csr", csr, ours_fwd_bwd), ("ours coo", coo, ours_fwd_bwd),
                         ("torch csr", csr, torch_fwd_bwd), ("torch coo", coo, torch_fwd_bwd),
                         ("torch-ops fallback", csr, fallback_fwd_bwd)]:
        Ag = A.detach().requires_grad_()

        def clear():
            Ag.grad = Bg.grad = None
        tm["fwd+bwd " + label] = attempt(lambda: fn(Ag, Bg, G), reps, clear)
    tm["fwd+bwd release"] = attempt(lambda: release_fwd_bwd(csr, B, G), reps)
    r["memory"]["necessary_bytes"] = 2 * n * p * 4 + nnz * 4
    return r


def ratio(r, a, b):
    ta, tb = r["timing"].get(a, {}), r["timing"].get(b, {})
    return tb["median_s"] / ta["median_s"] if "median_s" in ta and "median_s" in tb else None


def markdown(doc) -> str:
    lines = [f"# sparse_mm on {doc['device']}", "",
             f"torch {doc['torch']}, float32 values, int64 indices; CUDA events around 5 calls back to back, "
             f"median of {doc['reps']} after 3 warm-ups. Device copy bandwidth {doc['copy_GBps']:.0f} GB/s (read + write).", "",
             "| matrix | n | nnz | max row | p | fwd ours ms | fwd cuSPARSE ms | fwd ratio | fwd GB/s (frac copy) "
             "| SDDMM ratio vs sampled_addmm | fwd+bwd ours ms | torch CSR ms | ratio | fallback ms | release ms "
             "| ours peak / necessary | ours COO peak / necessary | torch COO |",
             "|" + "---|" * 18]
    ms = lambda r, k: f"{r['timing'][k]['median_s'] * 1e3:.3f}" if "median_s" in r["timing"].get(k, {}) \
        else r["timing"].get(k, {}).get("error", "-")  # noqa: E731
    for r in doc["results"]:
        nec = r["memory"]["necessary_bytes"]
        peak = lambda k: f"{r['timing'][k]['peak_bytes'] / nec:.2f}" if "peak_bytes" in r["timing"].get(k, {}) \
            else "-"  # noqa: E731
        fmt = lambda x: f"{x:.2f}x" if x else "-"  # noqa: E731
        lines.append(
            f"| {r['matrix']} | {r['n']:,} | {r['nnz']:,} | {r['max_row']:,} | {r['p']} | {ms(r, 'fwd ours')} "
            f"| {ms(r, 'fwd cusparse')} | {fmt(ratio(r, 'fwd ours', 'fwd cusparse'))} "
            f"| {r['fwd_GBps']:.0f} ({r['fwd_GBps'] / doc['copy_GBps']:.2f}) "
            f"| {fmt(ratio(r, 'sddmm ours', 'sddmm sampled_addmm'))} | {ms(r, 'fwd+bwd ours csr')} "
            f"| {ms(r, 'fwd+bwd torch csr')} | {fmt(ratio(r, 'fwd+bwd ours csr', 'fwd+bwd torch csr'))} "
            f"| {ms(r, 'fwd+bwd torch-ops fallback')} | {ms(r, 'fwd+bwd release')} "
            f"| {peak('fwd+bwd ours csr')} | {peak('fwd+bwd ours coo')} | {ms(r, 'fwd+bwd torch coo')} |")
    lines += ["", "Ratios: PyTorch's median time over ours (above 1: ours faster). Targets: forward >= "
              f"{TARGETS['fwd']}x cuSPARSE, SDDMM >= {TARGETS['sddmm']}x sampled_addmm, forward+backward >= "
              f"{TARGETS['fwd+bwd']}x PyTorch CSR, peak <= {TARGETS['memory']}x necessary "
              "(C + grad_B + grad_A values; ours also keeps the transpose pattern, built once per structure).",
              "", "Targets met (cases meeting / cases):"]
    for key, (a, b) in {"fwd": ("fwd ours", "fwd cusparse"), "sddmm": ("sddmm ours", "sddmm sampled_addmm"),
                        "fwd+bwd": ("fwd+bwd ours csr", "fwd+bwd torch csr")}.items():
        rs = [ratio(r, a, b) for r in doc["results"]]
        rs = [x for x in rs if x]
        lines.append(f"- {key}: {sum(x >= TARGETS[key] for x in rs)} / {len(rs)}; "
                     f"geometric mean {statistics.geometric_mean(rs):.2f}x" if rs else f"- {key}: -")
    return "\n".join(lines) + "\n"


def plot(doc, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = sorted({r["matrix"] for r in doc["results"]}, key=[r["matrix"] for r in doc["results"]].index)
    fig, axes = plt.subplots(1, len(names), figsize=(4.5 * len(names), 4), squeeze=False)
    for ax, name in zip(axes[0], names):
        rs = [r for r in doc["results"] if r["matrix"] == name]
        for key, style in [("fwd ours", "o-"), ("fwd cusparse", "o--"), ("fwd+bwd ours csr", "s-"),
                           ("fwd+bwd torch csr", "s--"), ("fwd+bwd release", "x:")]:
            pts = [(r["p"], r["timing"][key]["median_s"] * 1e3) for r in rs if "median_s" in r["timing"].get(key, {})]
            if pts:
                ax.plot(*zip(*pts), style, label=key)
        ax.set(title=f"{name} (nnz {rs[0]['nnz']:,})", xlabel="p", ylabel="ms", xscale="log", yscale="log")
        ax.legend(fontsize=7)
    fig.suptitle(f"sparse_mm on {doc['device']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _modes.add_mode_args(ap, "small matrices, two widths")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to measure")
        return
    if not _C.cuda:
        sys.exit("this build has no CUDA kernels (nvcc was not found when it was built)")
    global WARMUP, INNER, COPY_ELEMENTS
    mode = _modes.mode_of(args)
    gen = torch.Generator(device=DEV).manual_seed(0)
    if mode == "smoke":
        WARMUP, INNER, COPY_ELEMENTS = _modes.SMOKE_WARMUP, 1, 2 ** 20
        args.reps = _modes.SMOKE_REPS
        cases = [("fem 4x4x4", fem(4, 4, 4), (4,)), ("powerlaw 1e3", powerlaw(10 ** 3, 4, gen), (4,))]
    elif args.quick:
        cases = [("fem 20x20x20", fem(20, 20, 20), (16, 64)), ("powerlaw 1e5", powerlaw(10 ** 5, 16, gen), (16, 64))]
    else:
        cases = [("fem 49x50x50 (cfd2-sized)", fem(49, 50, 50), (16, 64, 128, 256)),
                 ("uniform 1e6 x16", uniform(10 ** 6, 16, gen), (16, 64, 128, 256)),
                 ("powerlaw 1e6 ~16", powerlaw(10 ** 6, 16, gen), (16, 64, 128, 256)),
                 ("uniform 1e7 x4", uniform(10 ** 7, 4, gen), (16, 64))]
    doc = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "reps": args.reps,
           "copy_GBps": copy_bandwidth(), "results": []}
    for name, idx, ps in cases:
        n = int(idx.max()) + 1
        for p in ps:
            r = run_case(name, idx, n, p, args.reps, gen)
            r["fwd_GBps"] = (r["nnz"] * 12 + r["nnz"] * p * 4 + n * p * 4) / r["timing"]["fwd ours"]["median_s"] / 1e9
            doc["results"].append(r)
            print(f"{name} p={p}: fwd {ratio(r, 'fwd ours', 'fwd cusparse'):.2f}x, "
                  f"sddmm {ratio(r, 'sddmm ours', 'sddmm sampled_addmm'):.2f}x, "
                  f"fwd+bwd {ratio(r, 'fwd+bwd ours csr', 'fwd+bwd torch csr') or 0:.2f}x", flush=True)
        del idx
        torch.cuda.empty_cache()
    stem = os.path.join(args.out, "sparse_mm_cuda" + ("" if mode == "full" else "_" + mode))
    os.makedirs(args.out, exist_ok=True)
    with open(stem + ".json", "w") as f:
        json.dump(doc, f, indent=1)
    with open(stem + ".md", "w") as f:
        f.write(markdown(doc))
    plot(doc, stem + ".png")
    print(markdown(doc))


if __name__ == "__main__":
    main()
