"""Benchmark of ``sparse_mm(A, B)`` with a sparse B (sparse @ sparse): ours, PyTorch's COO and CSR products, SciPy.

Run from the repository root::

    python -m benchmarks.spgemm --smoke     # seconds: CI's check that it works
    python -m benchmarks.spgemm --quick     # about a minute
    python -m benchmarks.spgemm             # a few minutes on 2 cores

Options as benchmarks/_ops_suite.py lists (--out, --threads, --no-memory, --timing, ...).
Every method is timed two ways, reported side by side: in a fresh worker, each on its own
loops; and in one process with the others, interleaved round by round after a warm-up that
allocates like a training step, with CPU time and page faults per call (``--timing fresh``
or ``in-process`` for one of them; the published release only in a fresh worker).
Cases: A @ A of the n x n patterns of benchmarks/_matrices.py with 8 entries per row
on average (uniform random columns; power-law row degrees with hub rows), and a
bag-of-words input (documents of 50 words out of 10^5) times a sparse weight (10^5 x
64, 10% stored); values N(0, 1), float32.  Forward (C = A @ B, sparse) and forward +
backward (gradients of A's and B's values, from a gradient of C's values).  Methods:
ours on leaf COO and CSR tensors; ``torch.sparse.mm`` on the same (its COO @ COO
backward multiplies out G B^T and A^T G, then masks; its CSR @ CSR has no backward);
SciPy's ``A @ B`` (one thread, forward only).  Every method's output (and gradients) is
checked against the product of every pair of entries in float64 first.  Peak memory
per method in a fresh process; "necessary" is C as CSR (values, int64 pointers and
columns) and both values gradients.  The ratios are over ours on CSR tensors ("ours"
is ours on COO tensors, whose product also holds each entry's row).  Results: benchmarks/results/spgemm_{smoke,quick,full}.{json,md,png}.
"""
import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")   # before torch loads (see sparse_mm.py)

from . import _ops_suite  # noqa: E402


def _square(graph, n, per_row=8, torch_coo_backward_skip=None):
    params = {"graph": graph, "n": n, "per_row": per_row}
    if torch_coo_backward_skip:
        params["torch_coo_backward_skip"] = torch_coo_backward_skip
    return {"op": "spgemm", "label": f"{graph} A@A n={n:.0e} {per_row}/row", "params": params}


# PyTorch's COO @ COO backward on the power-law graph took 17 s and 5.3 GB at n = 2e4; at 1e5
# it does not fit this machine's 24 GB
_TOO_BIG = "PyTorch's COO backward: 17 s and 5.3 GB at n=2e4, more than this machine at 1e5"
# and on the bag-of-words input its G @ W^T fills all 1e4 x 1e5 entries (the worker ran out of memory)
_DENSE_GRAD = "PyTorch's COO backward: G @ W^T fills all 1e4 x 1e5 entries (out of memory here)"


def _bow(n, features, out, per_row=50, density=0.1, torch_coo_backward_skip=None):
    params = {"graph": "bow", "n": n, "features": features, "out": out, "per_row": per_row, "density": density}
    if torch_coo_backward_skip:
        params["torch_coo_backward_skip"] = torch_coo_backward_skip
    return {"op": "spgemm", "label": f"bag-of-words {n:.0e} docs x {features:.0e} @ W ({density:.0%} of {out})",
            "params": params}


_SMOKE_SKIP = "smoke mode: skipped as in the full grid (the skip path)"

GRIDS = {
    "full": [_square("uniform", 100_000), _square("powerlaw", 100_000, torch_coo_backward_skip=_TOO_BIG),
             _bow(10_000, 100_000, 64, torch_coo_backward_skip=_DENSE_GRAD)],
    "quick": [_square("uniform", 10_000), _square("powerlaw", 5_000), _bow(1_000, 10_000, 64)],
    # the full grid's kinds of case at a tiny size, one with its PyTorch COO backward skipped
    "smoke": [_square("uniform", 256, 4), _square("powerlaw", 256, 4, torch_coo_backward_skip=_SMOKE_SKIP),
              _bow(64, 512, 16, per_row=8)],
}

if __name__ == "__main__":
    sys.exit(_ops_suite.main("spgemm", __doc__, GRIDS, ["ours CSR", "ours", "torch COO", "torch CSR", "scipy"],
                             compare=("ours", "torch COO", "torch CSR", "scipy"), published=False, plot=True))
