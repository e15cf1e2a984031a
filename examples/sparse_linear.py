"""A classifier whose hidden layer is a SparseLinear: 10% of the weights, learned.

    python examples/sparse_linear.py
    python examples/sparse_linear.py --density 0.05 --compile

Data: 10 Gaussian classes in 512 dimensions (a fixed seed).  The model is
SparseLinear(512 -> 256, density) -> ReLU -> Linear(256 -> 10), trained with Adam;
printed: test accuracy, the parameters the sparse layer stores against a dense
nn.Linear's, and the same model with a dense first layer for reference.
"""
import argparse

import torch

from torchsparsegradutils.nn import SparseLinear


def data(n: int, dim: int = 512, classes: int = 10, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(classes, dim, generator=g) * 0.1
    y = torch.randint(0, classes, (n,), generator=g)
    return centers[y] + torch.randn(n, dim, generator=g), y


def fit(model, x, y, xt, yt, epochs: int) -> float:
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(epochs):
        for idx in torch.randperm(x.shape[0]).split(256):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
    with torch.no_grad():
        return (model(xt).argmax(1) == yt).float().mean().item()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--density", type=float, default=0.1)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--train", type=int, default=8000)
    ap.add_argument("--compile", action="store_true", help="train torch.compile(fullgraph=True)'d")
    args = ap.parse_args(argv)
    x, y = data(args.train + 2000)
    x, y, xt, yt = x[:args.train], y[:args.train], x[args.train:], y[args.train:]
    torch.manual_seed(0)
    sparse = SparseLinear(512, 256, density=args.density, generator=torch.Generator().manual_seed(1))
    model = torch.nn.Sequential(sparse, torch.nn.ReLU(), torch.nn.Linear(256, 10))
    dense = torch.nn.Sequential(torch.nn.Linear(512, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    run = torch.compile(model, fullgraph=True) if args.compile else model
    acc = fit(run, x, y, xt, yt, args.epochs)
    acc_dense = fit(dense, x, y, xt, yt, args.epochs)
    print(f"sparse first layer: {sparse.nnz:,} weights stored ({sparse.nnz / (512 * 256):.1%} of 131,072), "
          f"test accuracy {acc:.1%}; dense first layer: {acc_dense:.1%}")
    return acc


if __name__ == "__main__":
    main()
