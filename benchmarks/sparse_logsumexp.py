"""Benchmarks of ``sparse_logsumexp`` and ``sparse_bidir_logsumexp``: ours, the published release, plain PyTorch.

Run from the repository root::

    python -m benchmarks.sparse_logsumexp --smoke     # seconds: CI's check that it works
    python -m benchmarks.sparse_logsumexp --quick     # about 30 s
    python -m benchmarks.sparse_logsumexp             # a few minutes on 2 cores

Options as benchmarks/_ops_suite.py lists (--out, --threads, --no-published, --timing, ...).
Every method is timed two ways, reported side by side: in a fresh worker, each on its own
loops; and in one process with the others, interleaved round by round after a warm-up that
allocates like a training step, with CPU time and page faults per call (``--timing fresh``
or ``in-process`` for one of them; the published release only in a fresh worker).
A square graph with 16 entries per row at uniform random columns, float32,
learnable values, include_zeros=True; reductions per row (dim=1), per column
(dim=0) and both (sparse_bidir_logsumexp, "padded").  Methods: ours on a CSR
tensor built with ``torchsparsegradutils.sparse_csr_tensor`` from the values
(whose backward hands the values gradient straight through), ours on a COO
tensor built with ``torch.sparse_coo_tensor`` (whose backward, PyTorch's own,
masks the gradient onto the pattern), the published 0.2.7 release on the same
COO tensor (its CSR path densifies the gradient: n x n), and a plain PyTorch
formulation on the values and index arrays (scatter_reduce amax, scatter_add).
"""
import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")   # before torch loads (see sparse_mm.py)

from . import _ops_suite  # noqa: E402


def _case(n, mode, per_row=16):
    return {"op": "sparse_logsumexp", "label": f"n={n:.0e} x{per_row} {mode}",
            "params": {"n": n, "m": n, "per_row": per_row, "mode": mode}}


GRIDS = {
    "full": [_case(1_000_000, "rows"), _case(1_000_000, "cols"), _case(1_000_000, "bidir")],
    "quick": [_case(100_000, "rows"), _case(100_000, "cols"), _case(100_000, "bidir")],
    "smoke": [_case(256, "rows", 4), _case(256, "cols", 4), _case(256, "bidir", 4)],
}

if __name__ == "__main__":
    sys.exit(_ops_suite.main("sparse_logsumexp", __doc__, GRIDS, ["ours", "plain", "ours COO"]))
