"""A two-layer GCN (Kipf & Welling 2017) with sparse features and learnable edge weights.

    python examples/gcn.py                                   # a built-in synthetic graph, Cora-sized
    python examples/gcn.py --data cora.npz                   # a Planetoid graph (examples/planetoid_npz.py)

What the library is for, on one model:
- sparse features: the bag-of-words rows x (1-2% dense) stay a SparseCSR; x W is
  sparse_mm(x, W^T), and dropout drops x's stored values (nn.dropout);
- learnable edge weights: every edge has a weight w_e = softplus(theta_e), a parameter; the
  normalised adjacency gcn_adjacency(edge_index, n, w) is rebuilt from them every step, and
  sparse_mm's backward gives their gradient at the stored entries only.  PyTorch's own
  torch.sparse.mm on a COO adjacency builds the dense n x n gradient G H^T there first.

It trains our model with the paper's hyper-parameters (16 hidden units, dropout 0.5, Adam lr
0.01, weight decay 5e-4 on the first layer, 200 epochs, the test accuracy of the epoch of best
validation accuracy), then times a few training steps of the same model, from the same
weights, written with torch.sparse.mm and (when installed) PyTorch Geometric, and ends with a
summary table: accuracy, ms per step, the speed-up, and the peak memory of one step.
"""
import argparse
import contextlib
import ctypes
import os
import statistics
import time
import warnings

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")   # threads sleep, not spin, while they wait

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from torchsparsegradutils import SparseCSR  # noqa: E402
from torchsparsegradutils.nn import GCNConv, dropout, gcn_adjacency  # noqa: E402



PLANETOID_KEYS = ("x_shape", "x_indptr", "x_indices", "x_data", "edge_index", "y", "train_idx", "val_idx", "test_idx")


def planetoid_file(path: str) -> str:
    """--data's argparse type: path, if it is a Planetoid .npz (the arrays load reads);
    otherwise an ArgumentTypeError, which argparse reports in one line."""
    try:
        d = np.load(path)
    except FileNotFoundError:
        raise argparse.ArgumentTypeError(f"no such file: {path}") from None
    except (OSError, ValueError):             # a folder, an unreadable file, or one that is not NumPy's
        raise argparse.ArgumentTypeError(f"{path} is not a readable .npz file") from None
    if not isinstance(d, np.lib.npyio.NpzFile):
        raise argparse.ArgumentTypeError(f"{path} is a single NumPy array, not a .npz archive")
    with d:
        missing = [k for k in PLANETOID_KEYS if k not in d.files]
    if missing:
        raise argparse.ArgumentTypeError(f"{path} is not a Planetoid .npz: it lacks {', '.join(missing)}")
    return path


def load(path: str):
    """(x as a row-normalised SparseCSR, edge_index, labels, train, val, test) of a Planetoid .npz."""
    d = np.load(path)
    n, f = (int(v) for v in d["x_shape"])
    crow = torch.from_numpy(d["x_indptr"]).long()
    x = SparseCSR(crow, torch.from_numpy(d["x_indices"]).long(), torch.from_numpy(d["x_data"]).float(), (n, f))
    split = [torch.from_numpy(d[k]) for k in ("train_idx", "val_idx", "test_idx")]
    return row_normalised(x), torch.from_numpy(d["edge_index"]), torch.from_numpy(d["y"]), *split


def row_normalised(x: SparseCSR) -> SparseCSR:
    rows = torch.repeat_interleave(torch.arange(x.size[0]), x.crow_indices.diff())
    total = torch.zeros(x.size[0]).index_add_(0, rows, x.values).clamp(min=1)
    return x._replace(values=x.values / total[rows])


def synthetic(n: int = 2708, classes: int = 7, features: int = 1433, seed: int = 0):
    """A stochastic block model of Cora's size: ~4 edges per node, 80% inside the class;
    sparse binary bag-of-words features whose rates depend on the class."""
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
    words = torch.rand(n, features, generator=g) < rates[y]
    crow = torch.cat([torch.zeros(1, dtype=torch.int64), words.sum(1).cumsum(0)])
    x = SparseCSR(crow, words.nonzero()[:, 1], torch.ones(int(crow[-1])), (n, features))
    perm = torch.randperm(n, generator=g)
    train = torch.cat([perm[y[perm] == c][:20] for c in range(classes)])
    rest = perm[~torch.isin(perm, train)]
    return row_normalised(x), edge_index, y, train, rest[:500], rest[500:1500]


class GCN(torch.nn.Module):
    """dropout -> GCNConv -> ReLU -> dropout -> GCNConv on A(w) = gcn_adjacency(edge_index, n, w),
    w = softplus(theta) one learnable weight per edge (1 at the start)."""

    def __init__(self, features: int, hidden: int, classes: int, edge_index: torch.Tensor, num_nodes: int):
        super().__init__()
        self.conv1, self.conv2 = GCNConv(features, hidden), GCNConv(hidden, classes)
        self.register_buffer("edge_index", edge_index)
        self.num_nodes = num_nodes
        self.theta = torch.nn.Parameter(torch.full((edge_index.shape[1],), float(np.log(np.e - 1))))

    def adjacency(self) -> SparseCSR:
        return gcn_adjacency(self.edge_index, self.num_nodes, edge_weight=F.softplus(self.theta))

    def forward(self, x):
        A = self.adjacency()
        h = F.relu(self.conv1(dropout(x, 0.5, self.training), A))
        return self.conv2(dropout(h, 0.5, self.training), A)


class TorchSparseGCN(GCN):
    """The same model and parameters, every product through torch.sparse.mm on COO tensors."""

    def forward(self, x):
        S = self.adjacency()
        rows = torch.repeat_interleave(torch.arange(self.num_nodes), S.crow_indices.diff())
        with warnings.catch_warnings():      # PyTorch's note on its constructor's unchecked invariants
            warnings.filterwarnings("ignore", message="Sparse invariant checks are implicitly disabled")
            A = torch.sparse_coo_tensor(torch.stack([rows, S.col_indices]), S.values, S.size)
            x = torch.sparse_coo_tensor(x.indices(), F.dropout(x.values(), 0.5, self.training), x.shape)   # x: COO
        h = F.relu(torch.sparse.mm(A, torch.sparse.mm(x, self.conv1.lin.weight.t())) + self.conv1.bias)
        h = F.dropout(h, 0.5, self.training)
        return torch.sparse.mm(A, h @ self.conv2.lin.weight.t()) + self.conv2.bias


def pyg_model(features: int, hidden: int, classes: int, edge_index: torch.Tensor, num_nodes: int):
    """The same model in PyTorch Geometric (dense features, as its examples use), or None."""
    try:
        from torch_geometric.nn import GCNConv as PygGCNConv
    except ImportError:
        return None

    class PygGCN(GCN):
        def __init__(self):
            super().__init__(features, hidden, classes, edge_index, num_nodes)
            self.conv1, self.conv2 = PygGCNConv(features, hidden), PygGCNConv(hidden, classes)

        def forward(self, x):
            w = F.softplus(self.theta)
            h = F.relu(self.conv1(F.dropout(x, 0.5, self.training), self.edge_index, w))
            return self.conv2(F.dropout(h, 0.5, self.training), self.edge_index, w)

    return PygGCN()


def optimizer(model: GCN) -> torch.optim.Optimizer:
    return torch.optim.Adam([{"params": [*model.conv1.parameters(), model.theta], "weight_decay": 5e-4},
                             {"params": model.conv2.parameters()}], lr=0.01)


@contextlib.contextmanager
def peak_memory(out: dict):
    """out["peak"]: the process's peak resident memory inside the block above its memory at
    the start, in bytes (Linux: /proc/self/clear_refs and VmHWM; elsewhere None).  glibc is
    told to give blocks of 64 kB and more back to the system when they are freed, so that
    memory one step freed cannot hide what the next one allocates."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 16)                         # M_MMAP_THRESHOLD: fixed, 64 kB
        libc.mallopt(-1, 1 << 17)                         # M_TRIM_THRESHOLD
        libc.malloc_trim(0)

    def kb(key):
        with open("/proc/self/status") as fh:
            return next(int(line.split()[1]) for line in fh if line.startswith(key + ":"))
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        base = kb("VmRSS")
    except OSError:
        base = None
    yield
    out["peak"] = (kb("VmHWM") - base) * 1024 if base is not None else None


def train_step(model, opt, x, y, idx) -> None:
    model.train()
    opt.zero_grad()
    F.cross_entropy(model(x)[idx], y[idx]).backward()
    opt.step()


def progress(total: int, desc: str):
    """tqdm's bar where tqdm is installed, else a plain line rewritten in place."""
    try:
        from tqdm import tqdm
        return tqdm(total=total, desc=desc, leave=False)
    except ImportError:
        return _Line(total, desc)


class _Line:
    def __init__(self, total: int, desc: str):
        self.total, self.desc, self.n = total, desc, 0

    def update(self, k: int = 1):
        self.n += k
        if self.n == self.total or self.n % 10 == 0:
            print(f"\r{self.desc}: {self.n}/{self.total}", end="", flush=True)

    def set_postfix_str(self, s: str):
        self.desc = self.desc.split(" [")[0] + f" [{s}]"

    def close(self):
        print()


def train(model, x, y, train_idx, val_idx, test_idx, epochs: int):
    """(test accuracy of the best-validation epoch, the step times in seconds)."""
    opt = optimizer(model)
    best_val, test_acc, times = -1.0, 0.0, []
    bar = progress(epochs, "training")
    for _ in range(epochs):
        t0 = time.perf_counter()
        train_step(model, opt, x, y, train_idx)
        times.append(time.perf_counter() - t0)
        model.eval()
        with torch.no_grad():
            pred = model(x).argmax(1)
        val = (pred[val_idx] == y[val_idx]).float().mean().item()
        if val > best_val:
            best_val, test_acc = val, (pred[test_idx] == y[test_idx]).float().mean().item()
        bar.set_postfix_str(f"val {100 * val:.1f}%")
        bar.update()
    bar.close()
    return test_acc, times


def time_steps(model, x, y, idx, steps: int):
    """(median seconds per step, peak bytes of one step) over `steps` training steps."""
    opt = optimizer(model)
    train_step(model, opt, x, y, idx)                       # warm-up
    mem = {}
    with peak_memory(mem):
        train_step(model, opt, x, y, idx)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        train_step(model, opt, x, y, idx)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), mem["peak"]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=planetoid_file,
                   help="a Planetoid .npz file (default: a synthetic community graph)")
    p.add_argument("--epochs", type=int, default=200)
    p.add_argument("--compare-steps", type=int, default=10,
                   help="training steps timed for each model (0: train ours only)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    x, edge_index, y, train_idx, val_idx, test_idx = load(args.data) if args.data else synthetic()
    n, f = x.size
    classes = int(y.max()) + 1
    print(f"{args.data or 'synthetic SBM'}: {n} nodes, {edge_index.shape[1]} edges, {classes} classes, "
          f"{f} features ({100 * x.values.numel() / (n * f):.1f}% dense, kept sparse), "
          f"{torch.get_num_threads()} threads")
    torch.manual_seed(args.seed)
    model = GCN(f, 16, classes, edge_index, n)
    init = {k: v.clone() for k, v in model.state_dict().items()}
    acc, _ = train(model, x, y, train_idx, val_idx, test_idx, args.epochs)
    if not args.compare_steps:
        print(f"test accuracy {100 * acc:.1f}%")
        return acc
    models = [("ours (sparse_mm)", GCN(f, 16, classes, edge_index, n), x),
              ("torch.sparse.mm", TorchSparseGCN(f, 16, classes, edge_index, n), x.to_torch().to_sparse_coo())]
    pyg = pyg_model(f, 16, classes, edge_index, n)
    if pyg is not None:
        models.append(("PyG (dense x)", pyg, x.to_torch().to_dense()))
    rows, ref = [], None
    for name, other, xi in models:
        other.load_state_dict(init)                           # the same weights in every model
        other.eval()
        with torch.no_grad():
            out = other(xi)
        ref = out if ref is None else ref
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)   # the same function, before timing it
        rows.append((name, *time_steps(other, xi, y, train_idx, args.compare_steps)))
    print()
    print("| model | test accuracy | ms/step | ours faster by | peak MB of a step |")
    print("|---|---:|---:|---:|---:|")
    for name, t, peak in rows:
        print(f"| {name} | {f'{100 * acc:.1f}%' if name == rows[0][0] else '-'} | {1e3 * t:.2f} | "
              f"{t / rows[0][1]:.1f}x | {f'{peak / 1e6:.1f}' if peak is not None else '-'} |")
    print(f"\n(accuracy: {args.epochs} epochs, the test accuracy of the best-validation epoch; ms/step: median of "
          f"{args.compare_steps} steps from the same weights; torch.sparse.mm's backward builds the dense "
          f"{n} x {n} gradient of the adjacency, {4 * n * n / 1e6:.0f} MB)")
    return acc


if __name__ == "__main__":
    main()
