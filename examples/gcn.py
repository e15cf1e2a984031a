"""Two-layer GCN (Kipf & Welling 2017) for semi-supervised node classification.

    python examples/gcn.py                          # a synthetic community graph, Cora-sized
    python examples/gcn.py --data ../shared/data/cora.npz --seeds 10
    python examples/gcn.py --data ../shared/data/citeseer.npz --compile --no-compare

The data file is a Planetoid graph as NumPy arrays (edge_index, x_indptr/x_indices/
x_data/x_shape, y, train_idx/val_idx/test_idx).  Without --data a stochastic block
model with Cora's size and class count is generated.  Hyper-parameters are the
paper's: 16 hidden units, dropout 0.5, Adam lr 0.01, weight decay 5e-4 on the first
layer, 200 epochs, the model of best validation accuracy tested.  Besides the test
accuracy it prints the time per epoch of the same training step with our sparse_mm,
eager and (with --compile) compiled, and with torch.sparse.mm.
"""
import argparse
import statistics
import time

import numpy as np
import torch

from torchsparsegradutils import sparse_mm
from torchsparsegradutils.nn import gcn_norm


def load(path: str):
    """(features, edge_index, labels, train, val, test) of a Planetoid .npz file."""
    d = np.load(path)
    n, f = (int(v) for v in d["x_shape"])
    x = torch.sparse_csr_tensor(torch.from_numpy(d["x_indptr"]), torch.from_numpy(d["x_indices"]),
                                torch.from_numpy(d["x_data"]), (n, f)).to_dense()
    x = x / x.sum(1, keepdim=True).clamp(min=1)               # row-normalised bag of words
    split = [torch.from_numpy(d[k]) for k in ("train_idx", "val_idx", "test_idx")]
    return x, torch.from_numpy(d["edge_index"]), torch.from_numpy(d["y"]), *split


def synthetic(n: int = 2708, classes: int = 7, features: int = 1433, seed: int = 0):
    """A stochastic block model of Cora's size: ~4 edges per node, 80% inside the class;
    sparse binary features whose rates depend on the class."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, classes, (n,), generator=g)
    e = 2 * n
    src = torch.randint(0, n, (e,), generator=g)
    same = torch.rand(e, generator=g) < 0.8
    by_class = [torch.nonzero(y == c).flatten() for c in range(classes)]
    pick = torch.stack([c[torch.randint(0, len(c), (e,), generator=g)] for c in by_class])   # (classes, e)
    dst = torch.where(same, pick[y[src], torch.arange(e)], torch.randint(0, n, (e,), generator=g))
    keep = src != dst
    edge_index = torch.cat([torch.stack([src, dst]), torch.stack([dst, src])], 1)[:, keep.repeat(2)]
    rates = torch.rand(classes, features, generator=g) ** 4 * 0.05
    x = (torch.rand(n, features, generator=g) < rates[y]).float()
    x = x / x.sum(1, keepdim=True).clamp(min=1)
    perm = torch.randperm(n, generator=g)
    train = torch.cat([perm[y[perm] == c][:20] for c in range(classes)])
    rest = perm[~torch.isin(perm, train)]
    return x, edge_index, y, train, rest[:500], rest[500:1500]


class GCN(torch.nn.Module):
    def __init__(self, f: int, hidden: int, classes: int, matmul=sparse_mm, dropout: float = 0.5):
        super().__init__()
        self.l1, self.l2 = torch.nn.Linear(f, hidden), torch.nn.Linear(hidden, classes)
        self.matmul, self.dropout = matmul, dropout

    def forward(self, A, x):
        h = torch.relu(self.matmul(A, self.l1(torch.nn.functional.dropout(x, self.dropout, self.training))))
        return self.matmul(A, self.l2(torch.nn.functional.dropout(h, self.dropout, self.training)))


def train(model, A, x, y, train_idx, val_idx, test_idx, epochs: int = 200):
    """(test accuracy of the best-validation epoch, median seconds per training step)."""
    opt = torch.optim.Adam([{"params": model.l1.parameters(), "weight_decay": 5e-4},
                            {"params": model.l2.parameters()}], lr=0.01)
    best_val, test_acc, times = -1.0, 0.0, []
    for _ in range(epochs):
        t0 = time.perf_counter()
        model.train()
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(A, x)[train_idx], y[train_idx]).backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        model.eval()
        with torch.no_grad():
            pred = model(A, x).argmax(1)
        val = (pred[val_idx] == y[val_idx]).float().mean().item()
        if val > best_val:
            best_val, test_acc = val, (pred[test_idx] == y[test_idx]).float().mean().item()
    return test_acc, statistics.median(times)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", help="a Planetoid .npz file (default: a synthetic community graph)")
    p.add_argument("--seeds", type=int, default=3, help="training runs, seeds 0..seeds-1")
    p.add_argument("--epochs", type=int, default=200)
    p.add_argument("--compare", action=argparse.BooleanOptionalAction, default=True,
                   help="also train with torch.sparse.mm, to compare the time per step")
    p.add_argument("--compile", action="store_true", help="also train torch.compile(fullgraph=True)'d")
    args = p.parse_args(argv)
    x, edge_index, y, train_idx, val_idx, test_idx = load(args.data) if args.data else synthetic()
    n, classes = x.shape[0], int(y.max()) + 1
    A = gcn_norm(edge_index, n)                               # SparseCSR, built once
    A_torch = A.to_torch()
    print(f"{args.data or 'synthetic SBM'}: {n} nodes, {edge_index.shape[1]} edges, {classes} classes")
    accs, runs = [], {"ours (eager)": []}
    if args.compare:
        runs["torch.sparse.mm"] = []
    if args.compile:
        runs["ours (compiled)"] = []
    for seed in range(args.seeds):
        torch.manual_seed(seed)
        model = GCN(x.shape[1], 16, classes)
        init = {k: v.clone() for k, v in model.state_dict().items()}
        acc, t = train(model, A, x, y, train_idx, val_idx, test_idx, args.epochs)
        accs.append(acc)
        runs["ours (eager)"].append(t)
        for name in [k for k in runs if k != "ours (eager)"]:
            torch.manual_seed(seed)
            other = GCN(x.shape[1], 16, classes, torch.sparse.mm if name == "torch.sparse.mm" else sparse_mm)
            other.load_state_dict(init)
            if name == "ours (compiled)":
                other = torch.compile(other, fullgraph=True)
            runs[name].append(train(other, A_torch if name == "torch.sparse.mm" else A, x, y,
                                    train_idx, val_idx, test_idx, args.epochs)[1])
    mean = sum(accs) / len(accs)
    print(f"test accuracy: mean {100 * mean:.1f}% over {len(accs)} seeds "
          f"(min {100 * min(accs):.1f}%, max {100 * max(accs):.1f}%)")
    base = statistics.median(runs["ours (eager)"])
    for name, ts in runs.items():
        t = statistics.median(ts)
        print(f"  {name:16s} {1e3 * t:7.2f} ms per training step ({base / t:.2f}x ours eager)")
    return mean


if __name__ == "__main__":
    main()
