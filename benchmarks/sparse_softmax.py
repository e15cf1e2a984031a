"""Benchmark of ``sparse_softmax`` (edge softmax): ours, ``torch.sparse.softmax`` (COO), PyG's scatter softmax.

Run from the repository root::

    python -m benchmarks.sparse_softmax --smoke     # seconds: CI's check that it works
    python -m benchmarks.sparse_softmax --quick     # about a minute
    python -m benchmarks.sparse_softmax             # a few minutes on 2 cores

Options as benchmarks/_ops_suite.py lists (--out, --threads, --no-memory, --timing, ...).
Every method is timed two ways, reported side by side: in a fresh worker, each on its own
loops; and in one process with the others, interleaved round by round after a warm-up that
allocates like a training step, with CPU time and page faults per call (``--timing fresh``
or ``in-process`` for one of them; the published release only in a fresh worker).
Square n x n patterns of benchmarks/_matrices.py, 16 entries per row on average:
uniform random columns, and power-law row degrees (a few hub rows of 10^4 entries,
rows shuffled); values N(0, 1), float32, learnable (the gradient of the values);
softmax over each row (dim=1, the edge softmax of graph attention) and, in the full
mode, over each column (dim=0); forward, and forward + backward.  Multi-head cases
(H=8 heads, 10 entries per row: E = 10^6 edges, the common GAT case): values (E, H),
"ours" on a SparseCSR (a torch sparse tensor holds one value per entry here),
torch.sparse.softmax on a hybrid COO tensor, PyG's scatter softmax on (E, H) values.  Methods: ours on a
COO tensor built with ``torchsparsegradutils.sparse_coo_tensor`` from the values (whose
backward hands the values gradient through), ours on a CSR tensor built with
``torchsparsegradutils.sparse_csr_tensor``, ours on a COO tensor built with
``torch.sparse_coo_tensor`` (the input ``torch.sparse.softmax`` takes; the backward of
PyTorch's constructor masks the gradient onto the pattern, most of this method's
backward), ``torch.sparse.softmax`` on that tensor, and PyG's ``softmax`` written in plain PyTorch on the values and index arrays
(scatter_reduce amax, index_select, exp, scatter_add, index_select, divide), all
checked against the scatter formulation in float64 first.  (dim=1, not -1:
PyTorch 2.13's sparse softmax backward is wrong for a negative dim.)  Peak memory
per method in a fresh process; "necessary" is the output and the values gradient.
Results: benchmarks/results/sparse_softmax_{smoke,quick,full}.{json,md,png}.
"""
import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")   # before torch loads (see sparse_mm.py)

from . import _ops_suite  # noqa: E402


def _case(graph, n, dim, per_row=16, heads=1):
    label = f"{graph} n={n:.0e} x{per_row} {'rows' if dim == 1 else 'cols'}" + (f" H={heads}" if heads > 1 else "")
    return {"op": "sparse_softmax", "label": label,
            "params": {"graph": graph, "n": n, "per_row": per_row, "dim": dim, "heads": heads}}


GRIDS = {
    "full": [_case(g, n, d) for n in (100_000, 1_000_000) for g in ("uniform", "powerlaw") for d in (1, 0)]
    + [_case(g, 100_000, 1, per_row=10, heads=8) for g in ("uniform", "powerlaw")],
    "quick": [_case(g, 100_000, 1) for g in ("uniform", "powerlaw")]
    + [_case("uniform", 100_000, 1, per_row=10, heads=8)],
    # rows and columns (the full grid's dim=0), one value per entry and 8 heads
    "smoke": [_case("uniform", 256, 1, per_row=4), _case("powerlaw", 256, 0, per_row=4),
              _case("uniform", 256, 1, per_row=4, heads=8)],
}

if __name__ == "__main__":
    sys.exit(_ops_suite.main("sparse_softmax", __doc__, GRIDS, ["ours", "ours CSR", "ours torch COO", "torch COO", "scatter"],
                             compare=("torch COO", "scatter"), published=False, plot=True))
