"""The bilinear form f(p) = x^T A(p) y with a huge sparse A, and its gradient w.r.t. A's
stored values, in O(nnz) memory.

    python examples/bilinear.py                   # n = 10^7 rows and columns, 3 entries per row
    python examples/bilinear.py --n 100000

A has values = exp(p) on a fixed random pattern.  f = x^T (A y) is sparse_mm with a
single right-hand-side column, and df/dvalues[e] = x[i] y[j] at each stored (i, j):
nothing of size n x n exists at any point (that matrix would hold 10^14 entries).
The gradient is checked against x[i] * y[j] computed directly, and the peak memory is
printed next to what the arrays themselves take.
"""
import argparse
import resource
import time

import torch

from torchsparsegradutils import SparseCSR, sparse_mm


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--per-row", type=int, default=3)
    args = ap.parse_args(argv)
    n, k = args.n, args.per_row
    gen = torch.Generator().manual_seed(0)
    itype = torch.int32 if n * k < 2**31 else torch.int64
    crow = torch.arange(0, n * k + 1, k, dtype=itype)
    col = torch.randint(0, n - k + 1, (n, k), generator=gen, dtype=itype).sort(1).values
    col += torch.arange(k, dtype=itype)                                  # strictly increasing in each row
    p = torch.zeros(n * k, requires_grad=True)
    x, y = torch.randn(n, 1, generator=gen), torch.randn(n, 1, generator=gen)
    t0 = time.perf_counter()
    A = SparseCSR(crow, col.reshape(-1).contiguous(), p.exp(), (n, n))
    f = (x * sparse_mm(A, y)).sum()
    f.backward()
    elapsed = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024     # before the check below
    rows = torch.repeat_interleave(torch.arange(n), k)
    expected = (x[rows, 0] * y[col.reshape(-1).long(), 0]) * p.detach().exp()   # chain rule through exp
    err = (p.grad - expected).abs().max().item()
    arrays = sum(t.numel() * t.element_size() for t in (crow, col, p, p.grad, x, y))
    print(f"n = {n:,}, nnz = {n * k:,}: f = {f.item():.4f}, forward + backward {elapsed:.2f} s, "
          f"max |grad - x_i y_j e^p| = {err:.1e}")
    print(f"peak memory {peak / 2**30:.2f} GiB (the whole process, PyTorch included); the arrays "
          f"themselves {arrays / 2**30:.2f} GiB; a dense A would need {n * n * 4 / 2**30:,.3g} GiB")
    return err


if __name__ == "__main__":
    main()
