"""Benchmarks of ``gather_mm`` and ``segment_mm``: ours, the published release, plain PyTorch.

Run from the repository root::

    python -m benchmarks.indexed_matmul --smoke     # seconds: CI's check that it works
    python -m benchmarks.indexed_matmul --quick     # about 30 s
    python -m benchmarks.indexed_matmul             # a few minutes on 2 cores

Options as benchmarks/_ops_suite.py lists (--out, --threads, --no-published, --timing, ...).
Every method is timed two ways, reported side by side: in a fresh worker, each on its own
loops; and in one process with the others, interleaved round by round after a warm-up that
allocates like a training step, with CPU time and page faults per call (``--timing fresh``
or ``in-process`` for one of them; the published release only in a fresh worker).
Methods, side by side: ours (C kernels), the published 0.2.7 release (nested
tensors, in its own venv), and a plain PyTorch formulation (rows sorted by
relation, scattered into groups padded to the longest, torch.bmm, gathered
back; autograd through all of it).  Float32, relations uniform over R.
"""
import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")   # before torch loads (see sparse_mm.py)

from . import _ops_suite  # noqa: E402


def _case(op, N, R, D):
    return {"op": op, "label": f"{op} N={N:.0e} R={R} D={D}", "params": {"N": N, "R": R, "D1": D, "D2": D}}


GRIDS = {
    "full": [_case("gather_mm", 1_000_000, 16, 64), _case("gather_mm", 100_000, 64, 128),
             _case("segment_mm", 300_000, 16, 64), _case("segment_mm", 100_000, 64, 128)],
    "quick": [_case("gather_mm", 30_000, 16, 64), _case("segment_mm", 30_000, 16, 64),
              _case("gather_mm", 10_000, 64, 128)],
    "smoke": [_case("gather_mm", 256, 4, 8), _case("segment_mm", 256, 4, 8)],
}

if __name__ == "__main__":
    sys.exit(_ops_suite.main("indexed_matmul", __doc__, GRIDS, ["ours", "plain"]))
