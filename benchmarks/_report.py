"""Derived metrics, the issue's targets, the markdown report and the PNG plots."""
import os
from typing import Dict, List, Optional

ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int32": 4, "int64": 8}
HEADLINE = ("float32", "int64")


def _med(r: dict, phase: str) -> Optional[float]:
    t = (r.get("timing") or {}).get(phase)
    return t["median_s"] if isinstance(t, dict) else None


def _min(r: dict, phase: str) -> Optional[float]:
    t = (r.get("timing") or {}).get(phase)
    return t["min_s"] if isinstance(t, dict) else None


def bytes_model(r: dict) -> int:
    """nnz*(index+value) + nnz*p*itemsize + n*p*itemsize (n: all rows of the batch);
    index = the case's CSR index dtype, for every method."""
    it, ix = ITEMSIZE[r["dtype"]], ITEMSIZE[r["index_dtype"]]
    rows = r["shape"][0] * r["shape"][1] if len(r["shape"]) == 3 else r["shape"][0]
    return r["nnz"] * (ix + it) + r["nnz"] * r["p"] * it + rows * r["p"] * it


def derive(r: dict, bw: Dict[str, float]) -> None:
    """Add GFLOP/s, GB/s, bandwidth fractions and the memory ratio to a result record."""
    flops = 2 * r["nnz"] * r["p"]
    t = _med(r, "fwd")
    if t:
        r["fwd_gflops"] = flops / t / 1e9
        r["fwd_GBps"] = bytes_model(r) / t / 1e9
        r["fwd_frac_triad"] = r["fwd_GBps"] / bw["triad_GBps"]
        r["fwd_frac_copy"] = r["fwd_GBps"] / bw["copy_GBps"]
    t = _med(r, "bwd")
    if t:
        r["bwd_gflops"] = 2 * flops / t / 1e9       # SDDMM + transposed SpMM
    mem = r.get("memory")
    if mem:
        ok = mem.get("with_backward", True) and mem["necessary_bytes"]
        mem["ratio"] = mem["peak_bytes"] / mem["necessary_bytes"] if ok else None


def grid_notes(mode: str) -> List[str]:
    notes = ["Timings: median (min) of >= 5 runs after a correctness run and one warm-up, in ms; each method on "
             "its own loops, one after another (ours and PyTorch's in the suite's process, the published release "
             "in a fresh worker); with --timing both (the default) or in-process, the last section times them "
             "side by side in one process.",
             "Bytes model per forward: nnz*(index+value) + nnz*p*itemsize + n*p*itemsize, with the case's "
             "CSR index size for every method.",
             "Peak memory: one fresh process per matrix, high-water mark reset (/proc/self/clear_refs) before "
             "each method's forward+backward, glibc mmap threshold fixed at 64 KiB; "
             "'necessary' = C + grad_B + grad_A values.",
             "Skips: dense A over 2 GB; PyTorch COO (and bmm) backward when its dense n x m gradient would "
             "exceed 2 GB; the gather backward when its nnz x p temporaries would exceed 3 GB."]
    if mode == "full":
        notes.append("Scaled down for time on 2 cores: n = 1e6 only with 4 and 16 entries per row "
                     "(small p), no 64-per-row matrix beyond n = 1e5, p = 256 only for the smaller matrices; "
                     "the grid actually run is listed in the JSON ('grid').")
    elif mode == "smoke":
        notes.append("Smoke mode (CI's check that the script works): tiny matrices, one timed run, no "
                     "warm-up; the numbers mean nothing.")
    else:
        notes.append("Quick mode: small matrices and p = 16 (and p = 1 once); see the full mode for the grid.")
    return notes


# --------------------------------------------------------------------------- targets

def _index(results: List[dict]) -> Dict[tuple, Dict[str, dict]]:
    cases: Dict[tuple, Dict[str, dict]] = {}
    for r in results:
        cases.setdefault((r["matrix"], r["p"], r["dtype"], r["index_dtype"]), {})[r["method"]] = r
    return cases


def _case_name(key) -> str:
    return f"{key[0]} p={key[1]} {key[2]}/{key[3]}"


def targets(results: List[dict], bw: Dict[str, float]) -> List[dict]:
    """Each target of the issue with every case it applies to (float32 cases)."""
    cases = _index(results)
    out = []

    def add(name, goal, checks):
        out.append({"target": name, "goal": goal, "cases": checks})

    fwd, bwd_t, bwd_g, mem, oob, batch = [], [], [], [], [], []
    for key, ms in cases.items():
        if key[2] != "float32":
            continue
        name = _case_name(key)
        ours, ours_coo = ms.get("ours CSR", {}), ms.get("ours COO", {})
        tcsr, gather, loop = ms.get("torch CSR", {}), ms.get("gather", {}), ms.get("torch loop", {})
        of, ob = _med(ours, "fwd"), _med(ours, "bwd")
        if of and _med(tcsr, "fwd"):
            x = _med(tcsr, "fwd") / of
            fwd.append({"case": name, "value": x, "holds": x >= 1.0})
        if ob and _med(tcsr, "bwd"):
            x = _med(tcsr, "bwd") / ob
            bwd_t.append({"case": name, "value": x, "holds": x >= 1.5})
        if ob and _med(gather, "bwd"):
            x = _med(gather, "bwd") / ob
            bwd_g.append({"case": name, "value": x, "holds": x >= 3.0})
        for label, r in (("CSR", ours), ("COO", ours_coo)):
            ratio = (r.get("memory") or {}).get("ratio")
            if ratio is not None:
                mem.append({"case": f"{name} [{label}]", "value": ratio, "holds": ratio <= 1.5})
        rows = r_rows(ours) if ours else 0
        if of and rows >= 1_000_000 and "fwd_frac_triad" in ours:
            oob.append({"case": name, "value": ours["fwd_frac_triad"], "holds": ours["fwd_frac_triad"] >= 0.5,
                        "GBps": ours["fwd_GBps"]})
        if _med(loop, "fwd"):
            for label, r in (("CSR", ours), ("COO", ours_coo)):
                for phase in ("fwd", "fwdbwd"):
                    if _med(r, phase) and _med(loop, phase):
                        x = _med(loop, phase) / _med(r, phase)
                        batch.append({"case": f"{name} [{label} {phase}]", "value": x, "holds": x >= 1.0})
    add("forward vs torch.sparse.mm CSR (ours CSR)", ">= 1.0x", fwd)
    add("backward vs torch CSR backward (ours CSR)", ">= 1.5x", bwd_t)
    add("backward vs gather backward (ours CSR)", ">= 3x", bwd_g)
    add("peak fwd+bwd memory / necessary (ours)", "<= 1.5x", mem)
    add(f"out-of-cache (n >= 1e6) forward, fraction of triad {bw['triad_GBps']:.1f} GB/s (ours CSR)",
        ">= 50%", oob)
    add("batched vs Python loop of torch.sparse.mm", ">= 1.0x", batch)
    return out


def r_rows(r: dict) -> int:
    s = r.get("shape") or [0]
    return s[-2] if len(s) >= 2 else 0


def targets_text(tg: List[dict]) -> str:
    lines = ["Targets (float32, all index dtypes):"]
    for t in tg:
        cs = t["cases"]
        if not cs:
            lines.append(f"- {t['target']} {t['goal']}: no applicable case")
            continue
        held = sum(c["holds"] for c in cs)
        vals = [c["value"] for c in cs]
        pct = "%" in t["goal"]
        f = (lambda v: f"{100 * v:.0f}%") if pct else (lambda v: f"{v:.2f}x")
        verdict = "HOLDS" if held == len(cs) else ("MISSES" if held == 0 else "PARTLY")
        lines.append(f"- {t['target']} {t['goal']}: {verdict} in {held}/{len(cs)} cases "
                     f"(range {f(min(vals))} .. {f(max(vals))})")
        for c in cs:
            if not c["holds"]:
                lines.append(f"    miss: {c['case']}: {f(c['value'])}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- markdown

def _ms(r: dict, phase: str) -> str:
    t = (r.get("timing") or {}).get(phase)
    if isinstance(t, dict):
        return f"{t['median_s'] * 1e3:.3g}"
    if r.get("skip"):
        return "n/a"
    if r.get("unavailable"):
        return "unavail."
    if r.get("error"):
        return "error"
    return "skip" if t else "-"


def _ratio(a: Optional[float], b: Optional[float]) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def headline_table(doc: dict) -> str:
    """float32, int64 indices: one row per (matrix, p)."""
    cases = _index(doc["results"])
    hdr = ("| matrix | nnz | p | ours CSR fwd | ours COO fwd | torch CSR fwd | fwd speedup | ours CSR bwd | "
           "torch CSR bwd | bwd vs torch | gather bwd | bwd vs gather | published fwd+bwd | ours CSR fwd+bwd | "
           "ours fwd GB/s (% triad) | ours peak / necessary |")
    lines = [hdr, "|" + "---|" * (hdr.count("|") - 1)]
    for key, ms in cases.items():
        if (key[2], key[3]) != HEADLINE:
            continue
        ours, coo = ms.get("ours CSR", {}), ms.get("ours COO", {})
        tcsr = ms.get("torch CSR", {})
        base = "torch CSR"
        if not _med(tcsr, "fwd") and ms.get("torch loop"):
            tcsr, base = ms["torch loop"], "loop"
        gather = ms.get("gather", {})
        pub = ms.get("published CSR", {})
        mem = (ours.get("memory") or {}).get("ratio")
        bw = f"{ours['fwd_GBps']:.1f} ({100 * ours['fwd_frac_triad']:.0f}%)" if "fwd_GBps" in ours else "-"
        tag = " (loop)" if base == "loop" else ""
        lines.append(
            f"| {key[0]} | {ours.get('nnz', '-')} | {key[1]} | {_ms(ours, 'fwd')} | {_ms(coo, 'fwd')} | "
            f"{_ms(tcsr, 'fwd')}{tag} | {_ratio(_med(tcsr, 'fwd'), _med(ours, 'fwd'))} | {_ms(ours, 'bwd')} | "
            f"{_ms(tcsr, 'bwd')}{tag} | {_ratio(_med(tcsr, 'bwd'), _med(ours, 'bwd'))} | {_ms(gather, 'bwd')} | "
            f"{_ratio(_med(gather, 'bwd'), _med(ours, 'bwd'))} | {_ms(pub, 'fwdbwd')} | {_ms(ours, 'fwdbwd')} | "
            f"{bw} | {f'{mem:.2f}' if mem else '-'} |")
    return "\n".join(lines)


def _cell(r: dict, phase: str) -> str:
    t = (r.get("timing") or {}).get(phase)
    if isinstance(t, dict):
        return f"{t['median_s'] * 1e3:.3g} ({t['min_s'] * 1e3:.3g})"
    return _ms(r, phase)


def full_table(doc: dict) -> str:
    hdr = ("| case | method | fwd ms | bwd ms | fwd+bwd ms | fwd GFLOP/s | fwd GB/s | % copy | % triad | "
           "peak MB | necessary MB | peak/nec. | check |")
    lines = [hdr, "|" + "---|" * (hdr.count("|") - 1)]
    for r in doc["results"]:
        name = f"{r['matrix']} p={r['p']} {r['dtype']}/{r['index_dtype']}"
        if r.get("skip") and not r.get("timing"):
            if r["method"] == "torch loop" and len(r["shape"]) != 3:
                continue
            lines.append(f"| {name} | {r['method']} | {r['skip']} |||||||||||")
            continue
        if r.get("unavailable") and not r.get("timing"):
            lines.append(f"| {name} | {r['method']} | unavailable: {r['unavailable']} |||||||||||")
            continue
        mem = r.get("memory") or {}
        chk = r.get("check") or {}
        errs = ", ".join(f"{k[4:]} {v:.1e}" for k, v in chk.items() if k.startswith("err"))
        check = ("ok" if chk.get("ok") else "**WRONG**") + (f" ({errs})" if errs else "") if chk else \
            (r.get("error") or "-")
        peak = f"{mem['peak_bytes'] / 1e6:.1f}" if mem else "-"
        if mem and not mem.get("with_backward", True):
            peak += " (fwd only)"
        nec = f"{mem['necessary_bytes'] / 1e6:.1f}" if mem else "-"
        ratio = f"{mem['ratio']:.2f}" if mem.get("ratio") else "-"
        f = lambda k, s=1.0: f"{r[k] * s:.3g}" if k in r else "-"  # noqa: E731
        lines.append(f"| {name} | {r['method']} | {_cell(r, 'fwd')} | {_cell(r, 'bwd')} | {_cell(r, 'fwdbwd')} | "
                     f"{f('fwd_gflops')} | {f('fwd_GBps')} | {f('fwd_frac_copy', 100)} | "
                     f"{f('fwd_frac_triad', 100)} | {peak} | {nec} | {ratio} | {check} |")
    return "\n".join(lines)


# --------------------------------------------------------------------------- in one process

def _ip_med(r: dict, phase: str) -> Optional[float]:
    """The median of a phase timed side by side in one process (None: not timed)."""
    t = (r.get("in_process") or {}).get(phase)
    return t["median_s"] if isinstance(t, dict) else None


def _ip_ms(r: dict, phase: str) -> str:
    ip = r.get("in_process") or {}
    return _ms({"timing": ip, "skip": ip.get("skip"), "error": ip.get("error")}, phase) if ip else "-"


def _both(num: dict, den: dict, phase: str) -> str:
    """num / den in one process, with the same ratio of the methods on their own in parentheses."""
    a, b = _ratio(_ip_med(num, phase), _ip_med(den, phase)), _ratio(_med(num, phase), _med(den, phase))
    return a if b == "-" else f"{a} ({b})"


def _faults(r: dict, phase: str) -> str:
    u = ((r.get("in_process") or {}).get("usage") or {}).get(phase)
    return f"{u['minflt']:.0f}" if u else "-"


def in_process_headline(doc: dict) -> str:
    """float32, int64 indices, side by side in one process; ratios on their own in parentheses."""
    cases = _index(doc["results"])
    hdr = ("| matrix | p | ours CSR fwd | torch CSR fwd | fwd speedup | ours CSR bwd | torch CSR bwd | "
           "bwd vs torch | gather bwd | bwd vs gather | ours CSR fwd+bwd | faults / fwd: ours CSR | torch CSR |")
    lines = [hdr, "|" + "---|" * (hdr.count("|") - 1)]
    for key, ms in cases.items():
        if (key[2], key[3]) != HEADLINE:
            continue
        ours, gather = ms.get("ours CSR", {}), ms.get("gather", {})
        tcsr, tag = ms.get("torch CSR", {}), ""
        if not _ip_med(tcsr, "fwd") and _ip_med(ms.get("torch loop", {}), "fwd"):
            tcsr, tag = ms["torch loop"], " (loop)"
        lines.append(f"| {key[0]} | {key[1]} | {_ip_ms(ours, 'fwd')} | {_ip_ms(tcsr, 'fwd')}{tag} | "
                     f"{_both(tcsr, ours, 'fwd')} | {_ip_ms(ours, 'bwd')} | {_ip_ms(tcsr, 'bwd')}{tag} | "
                     f"{_both(tcsr, ours, 'bwd')} | {_ip_ms(gather, 'bwd')} | {_both(gather, ours, 'bwd')} | "
                     f"{_ip_ms(ours, 'fwdbwd')} | {_faults(ours, 'fwd')} | {_faults(tcsr, 'fwd')} |")
    return "\n".join(lines)


def in_process_table(doc: dict) -> str:
    """Every case and method side by side in one process: medians, CPU time and faults per call."""
    hdr = ("| case | method | fwd ms | bwd ms | fwd+bwd ms | fwd CPU ms (user + sys) | fwd faults | "
           "fwd+bwd CPU ms (user + sys) | fwd+bwd faults | check |")
    lines = [hdr, "|" + "---|" * (hdr.count("|") - 1)]
    for r in doc["results"]:
        ip = r.get("in_process")
        if not ip or (ip.get("skip") and r["method"] == "torch loop" and len(r["shape"]) != 3):
            continue
        name = f"{r['matrix']} p={r['p']} {r['dtype']}/{r['index_dtype']}"
        if ip.get("skip") or ip.get("error"):
            lines.append(f"| {name} | {r['method']} | {ip.get('skip') or ip.get('error')} ||||||||")
            continue
        use = ip.get("usage", {})
        cells = []
        for phase in ("fwd", "fwdbwd"):
            u = use.get(phase)
            cells.append(f"{u['user_s'] * 1e3:.3g} + {u['sys_s'] * 1e3:.3g} | {u['minflt']:.0f}" if u else "- | -")
        chk = ip.get("check") or {}
        lines.append(f"| {name} | {r['method']} | {_ip_ms(r, 'fwd')} | {_ip_ms(r, 'bwd')} | {_ip_ms(r, 'fwdbwd')} | "
                     f"{cells[0]} | {cells[1]} | {'ok' if chk.get('ok') else '**WRONG**'} |")
    return "\n".join(lines)


def in_process_notes(doc: dict) -> List[str]:
    warm = next((r["in_process"]["warm_up"] for r in doc["results"] if "warm_up" in (r.get("in_process") or {})),
                None)
    rounds = sorted({r["in_process"]["rounds"] for r in doc["results"] if "rounds" in (r.get("in_process") or {})})
    return [f"All methods of a case side by side in the suite's own process, as a training script runs them: "
            f"each checked (its first call), then a warm-up that allocates and frees "
            f"{warm['allocated_mb'] if warm else 0:.0f} MB in tensors of assorted sizes up to "
            f"{warm['largest_mib'] if warm else '?'} MiB (some over the 32 MiB above which glibc maps every block "
            f"fresh from the OS) and one untimed forward + backward of each, then interleaved rounds "
            f"({'-'.join(str(n) for n in sorted({rounds[0], rounds[-1]})) if rounds else '?'} of them): each round "
            f"times every method's forward, then its forward + backward, in turn, so that drift and other load hit "
            f"all alike.  Ratios in parentheses: the same methods each on its own (the tables above).  CPU: user + "
            f"system ms per call of the whole process (all threads, getrusage); faults: minor page faults per call."]


def markdown(doc: dict) -> str:
    m, bw = doc["machine"], doc["bandwidth"]
    pub = doc["published"]
    out = [f"# sparse_mm benchmarks ({doc['mode']} mode)", "",
           f"Machine: **{m['cpu']}**, {m['cores']} cores, {doc['threads']} threads "
           f"(torch.set_num_threads), torch {m['torch']}, Python {m['python']}, {m['platform']}, "
           f"OMP_WAIT_POLICY={m.get('omp_wait_policy') or 'unset'}.  ",
           f"Other load on the machine (CPUs busy while the suite slept 1 s): "
           f"{m.get('background_cpus_busy_start', float('nan')):.2f} before, "
           f"{m.get('background_cpus_busy_end', float('nan')):.2f} after the run.  ",
           f"Measured bandwidth (torch on {bw['array_MB']:.0f} MB float32 arrays, median): copy "
           f"{bw['copy_GBps']:.1f} GB/s, triad {bw['triad_GBps']:.1f} GB/s.  ",
           f"Ours: torchsparsegradutils {doc['ours']['version']} (this repository).  "
           f"Published: {pub['detail'] if pub['available'] else 'unavailable: ' + pub['detail']}.  ",
           f"Wall time of this run: {doc['elapsed_s']:.0f} s.", "",
           "## Headline: float32, int64 indices, times in ms (median)", "",
           "Speedups are baseline time / our time (> 1: ours faster).  For the batched case the PyTorch "
           "column is a Python loop of torch.sparse.mm (CSR) over the items.", "",
           headline_table(doc), "", "## Targets", "", "```", targets_text(doc["targets"]), "```", "",
           "## Notes", ""] + [f"- {n}" for n in doc["notes"]] + [
           "", "## All cases: median (min) in ms", "", full_table(doc), ""]
    if any(r.get("in_process") for r in doc["results"]):
        out += ["## In one process, side by side", ""] + in_process_notes(doc) + [
                "", "### Headline: float32, int64 indices, times in ms (median)", "", in_process_headline(doc), "",
                "### All cases", "", in_process_table(doc), ""]
    return "\n".join(out)


# --------------------------------------------------------------------------- plots

METHOD_STYLE = {"ours CSR": ("tab:blue", "o"), "ours COO": ("tab:cyan", "s"), "torch CSR": ("tab:red", "^"),
                "torch COO": ("tab:orange", "v"), "gather": ("tab:green", "D"), "dense": ("tab:gray", "x"),
                "torch loop": ("tab:brown", "P"), "published CSR": ("tab:purple", "*"),
                "published COO": ("tab:pink", "h")}


def pyplot():
    """matplotlib.pyplot on the Agg backend, or None (with a note) where matplotlib is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install matplotlib, or the project's [bench] extra): no plots")
        return None
    return plt


def plots(doc: dict, out_dir: str, mode: str) -> List[str]:
    plt = pyplot()
    if plt is None:
        return []
    files = []
    res = [r for r in doc["results"] if (r["dtype"], r["index_dtype"]) == HEADLINE]
    files.append(_plot_time_vs_p(plt, res, os.path.join(out_dir, f"sparse_mm_{mode}_time_vs_p.png")))
    files.append(_plot_memory(plt, res, os.path.join(out_dir, f"sparse_mm_{mode}_memory_vs_size.png")))
    files.append(_plot_bandwidth(plt, res, doc["bandwidth"],
                                 os.path.join(out_dir, f"sparse_mm_{mode}_bandwidth_fraction.png")))
    return [f for f in files if f]


def _plot_time_vs_p(plt, res, path):
    mats = []
    for r in res:
        if r["matrix"] not in mats:
            mats.append(r["matrix"])
    if not mats:
        return None
    fig, axes = plt.subplots(2, len(mats), figsize=(3.2 * len(mats), 6.4), squeeze=False)
    for j, mat in enumerate(mats):
        for i, phase in enumerate(("fwd", "fwdbwd")):
            ax = axes[i][j]
            for meth, (color, marker) in METHOD_STYLE.items():
                pts = sorted((r["p"], _med(r, phase)) for r in res
                             if r["matrix"] == mat and r["method"] == meth and _med(r, phase))
                if pts:
                    ax.plot([p for p, _ in pts], [t * 1e3 for _, t in pts], marker=marker, color=color,
                            label=meth)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"{mat}\n{'forward' if phase == 'fwd' else 'forward+backward'}", fontsize=8)
            ax.set_xlabel("p")
            if j == 0:
                ax.set_ylabel("ms (median)")
            ax.tick_params(labelsize=7)
    handles, labels = [], []
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _plot_memory(plt, res, path):
    pts = [r for r in res if (r.get("memory") or {}).get("peak_bytes") is not None
           and r["memory"].get("with_backward", True)]
    if not pts:
        return None
    fig, ax = plt.subplots(figsize=(7, 5))
    for meth, (color, marker) in METHOD_STYLE.items():
        xs = [(r["nnz"] * r["p"], max(r["memory"]["peak_bytes"], 1) / 1e6) for r in pts if r["method"] == meth]
        if xs:
            ax.scatter(*zip(*xs), color=color, marker=marker, label=meth, s=28)
    nec = sorted({(r["nnz"] * r["p"], r["memory"]["necessary_bytes"] / 1e6) for r in pts})
    ax.plot(*zip(*nec), "k--", lw=1, label="necessary (C + grad_B + grad_A)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("nnz x p")
    ax.set_ylabel("peak forward+backward memory above inputs (MB)")
    ax.set_title("Peak memory vs size (float32, int64 indices)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _plot_bandwidth(plt, res, bw, path):
    meths = ["ours CSR", "ours COO", "torch CSR", "published CSR"]
    cases = []
    for r in res:
        key = f"{r['matrix']} p={r['p']}"
        if key not in cases and "fwd_frac_triad" in r:
            cases.append(key)
    if not cases:
        return None
    fig, ax = plt.subplots(figsize=(8, 0.32 * len(cases) * len(meths) / 2 + 1.5))
    h = 0.8 / len(meths)
    for k, meth in enumerate(meths):
        vals = []
        for c in cases:
            v = [r.get("fwd_frac_triad") for r in res if f"{r['matrix']} p={r['p']}" == c and r["method"] == meth]
            vals.append(100 * v[0] if v and v[0] else 0)
        ax.barh([i + k * h for i in range(len(cases))], vals, height=h, color=METHOD_STYLE[meth][0], label=meth)
    ax.axvline(50, color="k", ls="--", lw=1)
    ax.set_yticks([i + 0.4 - h / 2 for i in range(len(cases))])
    ax.set_yticklabels(cases, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(f"forward bytes-model GB/s as % of triad ({bw['triad_GBps']:.1f} GB/s)")
    ax.set_title("Fraction of measured bandwidth, forward (float32, int64 indices)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
