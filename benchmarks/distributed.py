"""Benchmark of the row-partitioned dist_sparse_mm: communication volume, and time per step.

    python -m benchmarks.distributed --smoke                  # seconds: CI's check that it works
    python -m benchmarks.distributed --quick                  # about a minute
    python -m benchmarks.distributed --cora ../shared/data/cora.npz

(a) Volume: bytes each rank sends per product ``C = A @ B`` (forward and backward,
    float32 B of p columns), ours against the 1-D broadcast / all-gather algorithm
    (CAGNET's 1-D form: every rank gathers all of B in forward, and the n x p
    ``A_r^T G_r`` is reduce-scattered in backward; ring collectives, each rank sending
    ``(P-1)/P * n`` rows in each).  Ours sends, in forward, its rows that other ranks'
    entries reference (once per such rank) and, in backward, its halo's gradient rows
    back.  Rows balanced by entries (partition_rows), in the graph's own numbering
    and after reverse Cuthill-McKee (reorder); P = 2, 4 and 8, each rank's plan
    simulated in one process (partition_report: the plan dist_sparse_mm builds).
    Graphs: Cora (--cora, a Planetoid .npz: the adjacency with self loops) and a
    power-law graph of 10^6 rows (benchmarks/_matrices.py's, 10 entries per row;
    10^4 rows with --quick).
(b) Time per step: forward + backward of dist_sparse_mm (B of p = 64 columns,
    requiring grad; A fixed, as in a GCN) on P = 1, 2, 4 gloo processes on this
    machine, one thread each, checked against sparse_mm on the whole matrix first;
    the median over the steps of the slowest rank's time, beside one process's
    sparse_mm on the whole matrix (one thread), and the time of the step's two
    exchanges (the halo rows gathered and sent, their gradients sent back and summed
    into the owners) run alone after it.  On a 2-core machine P = 4 runs 4
    processes on 2 cores: no speed-up is to be had beyond P = 2, and the loopback
    exchange is a memory copy, not a network.

The smoke mode (CI's check that the script works) runs (a) on Cora's size and a power-law
graph of 10^3 rows, and (b) once: P = 2 on the small graph, one step without a warm-up,
with rank 0 also timing the one-process sparse_mm.
Results: benchmarks/results/distributed_{smoke,quick,full}.{json,md}.  Timings are never asserted on.
"""
import argparse
import datetime
import importlib.util
import json
import os
import platform
import socket
import statistics
import sys
import tempfile
import time
import warnings

# Passive OpenMP waiting on a shared machine (see benchmarks/sparse_mm.py); before torch loads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from torchsparsegradutils import sparse_mm  # noqa: E402
from torchsparsegradutils.distributed import (DistSparseCSR, dist_sparse_mm, partition_report,  # noqa: E402
                                              partition_rows, reorder)

from . import _modes  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
warnings.filterwarnings("ignore", message=".*[Ss]parse.*")

CASES = {
    "full": {"volume_graphs": ["cora", "powerlaw 1M"], "time_graphs": ["cora", "powerlaw 200k"], "steps": 20,
             "parts": [2, 4, 8], "procs": [1, 2, 4]},
    "quick": {"volume_graphs": ["cora", "powerlaw 10k"], "time_graphs": ["cora", "powerlaw 10k"], "steps": 3,
              "parts": [2, 4, 8], "procs": [1, 2]},
    # one spawn of 2 ranks; warmup: steps before the timed ones (default 1); single: rank 0 also
    # times one process's sparse_mm (otherwise only P = 1 does)
    "smoke": {"volume_graphs": ["cora", "powerlaw 1k"], "time_graphs": ["powerlaw 1k"], "steps": 1,
              "parts": [2, 4, 8], "procs": [2], "warmup": 0, "single": True},
}
P_VOLUME, P_TIME, ITEMSIZE = 64, 64, 4           # columns of B; float32
TIMEOUT = datetime.timedelta(seconds=120)


def _matrices():
    spec = importlib.util.spec_from_file_location("_matrices", os.path.join(HERE, "_matrices.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def graph(name: str, cora_path) -> torch.Tensor:
    """The graph's matrix, float32 CSR: "cora" (its adjacency with self loops; a
    uniform random matrix of Cora's size, 4 entries per row, where no file is given)
    or "powerlaw <n>" (n as 10k, 1M)."""
    m = _matrices()
    if name == "cora":
        if cora_path:
            spec = m.graph_spec(cora_path)
        else:
            spec = m.MatrixSpec("uniform", 2708, 2708, per_row=4)
    else:
        n = int(float(name.split()[1].replace("k", "e3").replace("M", "e6")))
        spec = m.MatrixSpec("powerlaw", n, n, per_row=10)
    idx, shape = m.pattern(spec)
    vals = torch.rand(idx.shape[1], generator=torch.Generator().manual_seed(0))
    return torch.sparse_coo_tensor(idx, vals, shape).coalesce().to_sparse_csr()


def label(name: str, cora_path) -> str:
    """How the report names graph(name, cora_path)."""
    return "uniform, Cora's size" if name == "cora" and not cora_path else name


def volume_rows(A: torch.Tensor, parts: int, order: str) -> dict:
    """The volume table's row for A on `parts` ranks."""
    n = A.shape[0]
    report = partition_report(A, partition_rows(A, parts))
    row_bytes = P_VOLUME * ITEMSIZE
    ours = [(r["sends"] + r["halo"]) * row_bytes for r in report]      # forward sends + backward sends
    gather = 2 * (parts - 1) * n / parts * row_bytes                    # all-gather + reduce-scatter (ring)
    return {"P": parts, "order": order, "n": n, "nnz": A._nnz(), "halo": [r["halo"] for r in report],
            "cut": sum(r["cut"] for r in report), "ours_max": max(ours), "ours_mean": sum(ours) / parts,
            "allgather": gather, "ratio_mean": gather / max(sum(ours) / parts, 1),
            "ratio_max": gather / max(max(ours), 1)}


# ------------------------------------------------------------------ time per step
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _time_worker(rank, world, port, name, cora_path, steps, out, warmup=1, single_too=False):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=TIMEOUT)
    try:
        A = graph(name, cora_path)
        part = DistSparseCSR.from_global(A if rank == 0 else None, timeout=TIMEOUT)
        gen = torch.Generator().manual_seed(1)
        B = torch.randn(A.shape[0], P_TIME, generator=gen)
        s, e = part.start, part.end
        Bm = B[s:e].clone().requires_grad_()
        # checked first, against the largest entry (the float32 sums run in another order)
        C, ref = dist_sparse_mm(part, Bm).detach(), sparse_mm(A, B)[s:e]
        err = float((C - ref).abs().max()) / max(float(ref.abs().max()), 1.0) if ref.numel() else 0.0
        if err > 1e-5:
            raise AssertionError(f"dist_sparse_mm differs from sparse_mm on rank {rank}: {err:.2e} of the largest")
        G = torch.ones(e - s, P_TIME)
        scratch = torch.cat([B[s:e], part.exchange(B[s:e])])     # own + halo rows, as A^T G has them
        times, exchanges, single = [], [], []
        for step in range(warmup + steps):
            dist.barrier()
            t0 = time.perf_counter()
            dist_sparse_mm(part, Bm).backward(G)
            t1 = time.perf_counter()
            part.exchange(B[s:e])                                # the step's two exchanges alone
            part.exchange_back(scratch)
            t = torch.tensor([t1 - t0, time.perf_counter() - t1])
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            if step >= warmup:                                   # the first is a warm-up
                times.append(float(t[0]))
                exchanges.append(float(t[1]))
        if world == 1 or (single_too and rank == 0):
            Bw = B.clone().requires_grad_()
            for step in range(warmup + steps):
                t0 = time.perf_counter()
                sparse_mm(A, Bw).sum().backward()
                if step >= warmup:
                    single.append(time.perf_counter() - t0)
        if rank == 0:
            with open(out, "w") as f:
                json.dump({"step": statistics.median(times), "exchange": statistics.median(exchanges),
                           "single": statistics.median(single) if single else None,
                           "threads": torch.get_num_threads()}, f)
    finally:
        dist.destroy_process_group()


def time_step(name: str, cora_path, world: int, steps: int, warmup: int = 1, single_too: bool = False) -> dict:
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "t.json")
        mp.start_processes(_time_worker, args=(world, _free_port(), name, cora_path, steps, out, warmup, single_too),
                           nprocs=world, start_method="spawn")
        with open(out) as f:
            return {"graph": label(name, cora_path), "P": world, **json.load(f)}


# ------------------------------------------------------------------ report
def _mb(x: float) -> str:
    return f"{x / 2**20:.2f}"


def markdown(doc: dict) -> str:
    lines = [f"# dist_sparse_mm ({doc['mode']})", "", f"{doc['machine']}", "",
             f"## Bytes sent per rank per product (forward + backward, float32 B, p = {P_VOLUME})", "",
             "| graph | order | P | halo rows per rank | entries cut | ours: mean MiB | ours: max MiB | "
             "all-gather MiB | all-gather / ours (mean) | (max) |",
             "|---|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for g, rows in doc["volume"].items():
        for r in rows:
            halo = r["halo"] if len(r["halo"]) <= 4 else f"{min(r['halo'])} .. {max(r['halo'])}"
            lines.append(f"| {g} (n={r['n']}, nnz={r['nnz']}) | {r['order']} | {r['P']} | {halo} | {r['cut']} | "
                         f"{_mb(r['ours_mean'])} | {_mb(r['ours_max'])} | {_mb(r['allgather'])} | "
                         f"{r['ratio_mean']:.1f}x | {r['ratio_max']:.1f}x |")
    lines += ["", f"## Time per step (forward + backward, p = {P_TIME}; gloo on loopback)", "",
              f"Load average at the end (1, 5, 15 min): {doc['load']} on {os.cpu_count()} cores.", "",
              "| graph | P | threads per process | ms per step (slowest rank, median) | the two exchanges alone "
              "| one process, sparse_mm |",
              "|---|---:|---:|---:|---:|---:|"]
    for r in doc["time"]:
        single = f"{1e3 * r['single']:.2f}" if r["single"] is not None else ""
        lines.append(f"| {r['graph']} | {r['P']} | {r['threads']} | {1e3 * r['step']:.2f} | {1e3 * r['exchange']:.2f} "
                     f"| {single} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _modes.add_mode_args(p)
    p.add_argument("--cora", help="Cora as a Planetoid .npz (default: a uniform graph of Cora's size)")
    p.add_argument("--out", default=RESULTS)
    args = p.parse_args(argv)
    mode = _modes.mode_of(args)
    case = CASES[mode]
    doc = {"mode": mode, "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
                                    f"torch {torch.__version__}", "volume": {}, "time": []}
    for name in case["volume_graphs"]:
        A = graph(name, args.cora)
        t0 = time.perf_counter()
        Ar, _ = reorder(A, "rcm")
        print(f"{name}: n={A.shape[0]}, nnz={A._nnz()}, RCM in {time.perf_counter() - t0:.1f} s", flush=True)
        doc["volume"][label(name, args.cora)] = [volume_rows(M, parts, order) for order, M in (("own", A), ("RCM", Ar))
                               for parts in case["parts"]]
    for name in case["time_graphs"]:
        for world in case["procs"]:
            doc["time"].append(time_step(name, args.cora, world, case["steps"], case.get("warmup", 1),
                                         case.get("single", False)))
            print(doc["time"][-1], flush=True)
    doc["load"] = [round(x, 2) for x in os.getloadavg()]          # the machine is shared: its load, at the end
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"distributed_{mode}.json"), "w") as f:
        json.dump(doc, f, indent=1)
    text = markdown(doc)
    with open(os.path.join(args.out, f"distributed_{mode}.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    sys.exit(main())
