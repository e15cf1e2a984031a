"""Benchmark of ``sparse_mm(A, B, reduce)``, reduce "mean" and "amax": ours, PyTorch's CSR reduce, the scatter formulation.

Run from the repository root::

    python -m benchmarks.reduce --smoke     # seconds: CI's check that it works
    python -m benchmarks.reduce --quick     # about a minute
    python -m benchmarks.reduce             # a few minutes on 2 cores

Options as benchmarks/_ops_suite.py lists (--out, --threads, --no-memory, --timing, ...).
Every method is timed two ways, reported side by side: in a fresh worker, each on its own
loops; and in one process with the others, interleaved round by round after a warm-up that
allocates like a training step, with CPU time and page faults per call (``--timing fresh``
or ``in-process`` for one of them; the published release only in a fresh worker).
Square n x n patterns of benchmarks/_matrices.py, 8 entries per row on average:
uniform random columns, and power-law row degrees (a few hub rows of 10^4 entries,
rows shuffled); values N(0, 1), float32, p = 16, 32 and 64; forward, and forward +
backward (gradients of A's values and of B).  Methods: ours on a leaf CSR tensor,
``torch.sparse.mm(A, B, reduce)`` on the same tensor (PyTorch's reduce: 2D CSR on
the CPU only), and the scatter formulation on the values and index arrays
(``index_select`` of B's rows times the values, ``scatter_reduce`` by row with
``include_self=False``: what GNN code falls back to), all checked against that
formulation in float64 first.  Peak memory is measured per method in a fresh
process; "necessary" is the output, both gradients and, for amax, the int32 arg of
every output element.  Results: benchmarks/results/reduce_{smoke,quick,full}.{json,md,png}.
"""
import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")   # before torch loads (see sparse_mm.py)

from . import _ops_suite  # noqa: E402


def _case(graph, n, p, reduce, per_row=8):
    return {"op": "sparse_mm_reduce", "label": f"{graph} n={n:.0e} p={p} {reduce}",
            "params": {"graph": graph, "n": n, "per_row": per_row, "p": p, "reduce": reduce}}


GRIDS = {
    "full": [_case(g, 100_000, p, r) for g in ("uniform", "powerlaw") for p in (16, 32, 64) for r in ("mean", "amax")],
    "quick": [_case(g, 20_000, 16, r) for g in ("uniform", "powerlaw") for r in ("mean", "amax")],
    "smoke": [_case(g, 256, 4, r) for g in ("uniform", "powerlaw") for r in ("mean", "amax")],
}

if __name__ == "__main__":
    sys.exit(_ops_suite.main("reduce", __doc__, GRIDS, ["ours", "torch CSR", "scatter"],
                             compare=("torch CSR", "scatter"), published=False, plot=True))
