"""sparse_mm over a 1-D row partition on torch.distributed (gloo on CPU, NCCL on CUDA).

A square sparse matrix A (n x n, a graph's adjacency) and a dense B (n x p) are cut
into the same contiguous row ranges, one per rank.  Rank r holds its rows of A as a
:class:`DistSparseCSR`: a local CSR whose columns are its own rows (ids 0 .. n_r - 1)
followed by its halo, the rows of B owned elsewhere that its entries reference (ids
n_r .. n_r + h_r - 1).  ``C = A @ B``, row-partitioned like B, is then:

- forward: one all-to-all of exactly the halo rows of B, then the local SpMM on
  ``[B_r; B_halo]``;
- backward: grad_B from the local ``A_r^T G_r`` into the owned and halo rows, then the
  reverse all-to-all that sums the halo rows into their owners; the gradient of A's
  values from the local SDDMM with the halo rows at hand.

The exchange plan (which local rows go to which rank, which come back) is built once,
when the DistSparseCSR is built, and kept with it.  Every collective waits at most the
operand's ``timeout``; a partition that the ranks do not agree on raises ValueError on
every rank before any data moves.

The partitioning helpers (``partition_rows``, ``partition_report``, ``reorder``) run in
one process on the whole matrix.

This package's modules, each one job: ``_partition`` (the partitioning helpers),
``_collectives`` (the collectives, each bounded by a timeout), ``_sparse_csr``
(:class:`DistSparseCSR`: a rank's part, checked, and its exchange plan) and
``_sparse_mm`` (:func:`dist_sparse_mm` and its autograd Function).
"""
from ._partition import partition_report, partition_rows, reorder
from ._sparse_csr import DEFAULT_TIMEOUT, DistSparseCSR  # noqa: F401  (DEFAULT_TIMEOUT: public, not in __all__)
from ._sparse_mm import DistSparseMatMul, dist_sparse_mm  # noqa: F401  (the Function: public, not in __all__)

__all__ = ["DistSparseCSR", "dist_sparse_mm", "partition_rows", "partition_report", "reorder"]
