"""Full-graph GCN training on P processes, the graph's rows partitioned among them.

    torchrun --nproc-per-node 2 examples/gcn_distributed.py --check
    torchrun --nproc-per-node 4 examples/gcn_distributed.py --data cora.npz --reorder rcm --check

Rank 0 holds the normalised adjacency (gcn.py's synthetic graph, or a Planetoid .npz
with --data) and scatters its rows, balanced by entries (optionally renumbered first
with --reorder, to cut the halo); each rank keeps its rows of the features and labels.
Each layer's product with the adjacency is dist_sparse_mm: one all-to-all of the halo
rows, then the local product.  The weights are replicated: after backward their
gradients are summed over the ranks (the all-reduce that DistributedDataParallel
does), each rank's loss being its share of the full-graph loss, so every rank takes
the step that one process takes on the whole graph.  Dropout is off, so that the two
draw the same.  After --steps steps rank 0 trains one process on the whole graph
with sparse_mm and compares the parameters; with --check it exits with status 1 when
they differ beyond float tolerance (--rtol).  Backend: gloo (CPU), or NCCL with --cuda.
"""
import argparse
import datetime
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gcn import load, planetoid_file, synthetic  # noqa: E402

from torchsparsegradutils import sparse_mm  # noqa: E402
from torchsparsegradutils.distributed import DistSparseCSR, dist_sparse_mm, partition_report, reorder  # noqa: E402
from torchsparsegradutils.nn import gcn_adjacency  # noqa: E402

TIMEOUT = datetime.timedelta(seconds=60)


class GCN(torch.nn.Module):
    """Two GCN layers, A l2(relu(A l1(x))) with each product by A through `matmul`; no
    dropout (the runs are compared step by step)."""

    def __init__(self, f: int, hidden: int, classes: int, matmul=sparse_mm):
        super().__init__()
        self.l1, self.l2 = torch.nn.Linear(f, hidden), torch.nn.Linear(hidden, classes)
        self.matmul = matmul

    def forward(self, A, x):
        return self.matmul(A, self.l2(torch.relu(self.matmul(A, self.l1(x)))))


def train(model, A, x, y, train_mask, n_train: int, steps: int, matmul_is_dist: bool):
    """Adam steps on the full-graph loss (this rank's share of it where distributed);
    returns the median seconds per step."""
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        opt.zero_grad()
        out = model(A, x)
        loss = torch.nn.functional.cross_entropy(out[train_mask], y[train_mask], reduction="sum") / n_train
        loss.backward()
        if matmul_is_dist:
            for p in model.parameters():                      # DDP's all-reduce of the weights' gradients
                if not dist.all_reduce(p.grad, async_op=True).wait(TIMEOUT):
                    raise RuntimeError(f"the gradients' all-reduce did not finish within {TIMEOUT}")
        opt.step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=planetoid_file,
                   help="a Planetoid .npz file (default: gcn.py's synthetic community graph)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--reorder", choices=["rcm", "bfs"], help="renumber the nodes first, to cut the halo")
    p.add_argument("--check", action="store_true", help="exit 1 unless one process reaches the same parameters")
    p.add_argument("--rtol", type=float, default=1e-4,
                   help="how close counts as the same (relative; absolute: rtol / 10); 0: bit for bit")
    p.add_argument("--cuda", action="store_true", help="NCCL, one GPU per rank (LOCAL_RANK)")
    args = p.parse_args(argv)
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if args.cuda else torch.device("cpu")
    if args.cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if args.cuda else "gloo", timeout=TIMEOUT)
    rank, world = dist.get_rank(), dist.get_world_size()
    try:
        x, edge_index, y, train_idx, _, _ = load(args.data) if args.data else synthetic()
        x = x.to_torch().to_dense()                            # gcn.py's sparse features, made dense here
        n, classes = x.shape[0], int(y.max()) + 1
        A = gcn_adjacency(edge_index, n).to_torch()
        train_mask = torch.zeros(n, dtype=torch.bool)
        train_mask[train_idx] = True
        if args.reorder:                                       # every rank renumbers alike (deterministic)
            A, perm = reorder(A, args.reorder)
            x, y, train_mask = x[perm], y[perm], train_mask[perm]
        part = DistSparseCSR.from_global(A.to(device) if rank == 0 else None, timeout=TIMEOUT)
        rows = slice(part.start, part.end)
        torch.manual_seed(0)
        model = GCN(x.shape[1], 16, classes, matmul=dist_sparse_mm).to(device)
        t_dist = train(model, part, x[rows].to(device), y[rows].to(device), train_mask[rows].to(device),
                       len(train_idx), args.steps, True)
        ok = True
        if rank == 0:
            report = partition_report(A, part.bounds)
            print(f"{args.data or 'synthetic SBM'}: {n} nodes, {world} ranks; rows per rank "
                  f"{[r['rows'] for r in report]}, halo rows per rank {[r['halo'] for r in report]}, "
                  f"{sum(r['cut'] for r in report)} of {A._nnz()} entries cut")
            torch.manual_seed(0)
            single = GCN(x.shape[1], 16, classes).to(device)
            t_one = train(single, A.to(device), x.to(device), y.to(device), train_mask.to(device), len(train_idx),
                          args.steps, False)
            pairs = [(a.detach(), b.detach()) for a, b in zip(model.parameters(), single.parameters())]
            diff = max(float((a - b).abs().max()) for a, b in pairs)
            ok = all(torch.allclose(a, b, rtol=args.rtol, atol=args.rtol / 10) for a, b in pairs)
            print(f"after {args.steps} steps: largest parameter difference from one process {diff:.2e} "
                  f"({'same' if ok else 'DIFFERENT'}); {1e3 * t_dist:.1f} ms per step on {world} ranks, "
                  f"{1e3 * t_one:.1f} ms in one process")
    finally:
        dist.destroy_process_group()
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
