"""gather_mm and segment_mm: one small matrix product per group of rows.

Both ops compute ``out[i] = a[i] @ b[r(i)]`` for a relation r(i) per row: given
by ``idx_b`` (gather_mm) or by consecutive segments of lengths ``seglen_a``
(segment_mm).  On CPU the rows are grouped by relation once (a counting sort of
``idx_b``, csrc/group_rows.c; segments are groups already) and every kernel
walks the groups: csrc/grouped_mm.c for the forward product and grad_a
(``G @ b[r]^T``), csrc/grouped_mm_tn.c for grad_b (``sum a[i]^T G[i]`` per
relation, without atomics and without an N x D1 x D2 temporary).  Other
devices (CUDA) take the same grouping through PyTorch ops.  The kernels are
the custom operators tsgu::group_rows, tsgu::grouped_mm and tsgu::grouped_mm_tn
(_ops/grouped.py), so both functions compile with torch.compile(fullgraph=True).
"""
import torch

from ._core.validate import GroupedSpec
from ._ops.grouped import run_gather_mm, run_segment_mm

SEGMENT = GroupedSpec("segment_mm", "seglen_a", "R")
GATHER = GroupedSpec("gather_mm", "idx_b", "N")


def segment_mm(a: torch.Tensor, b: torch.Tensor, seglen_a: torch.Tensor) -> torch.Tensor:
    r"""Segmented matrix product: ``out[s_r:e_r] = a[s_r:e_r] @ b[r]`` for consecutive segments.

    With ``seglen_a == [10, 5, 0, 3]`` this computes ``a[0:10] @ b[0]``,
    ``a[10:15] @ b[1]``, nothing for ``b[2]`` and ``a[15:18] @ b[3]``.

    Parameters
    ----------
    a : dense tensor ``(N, D1)``, float32 or float64.
    b : dense tensor ``(R, D1, D2)``, a's dtype and device.
    seglen_a : integer tensor ``(R,)`` of non-negative lengths summing to ``N``
        (on a's device or on the CPU).

    Returns
    -------
    Dense tensor ``(N, D2)``.  Differentiable w.r.t. ``a`` and ``b``.

    Raises
    ------
    ValueError
        Inputs not tensors, wrong ranks, sizes that do not match, a negative
        segment length or lengths not summing to ``N``, different devices.
    TypeError
        Values other than float32/float64, a and b of different dtypes, or
        ``seglen_a`` not of an integer dtype.
    NotImplementedError
        On PyTorch older than 2.4, as in the published release.

    Examples
    --------
    >>> a, b = torch.ones(3, 2), torch.stack([torch.eye(2), 2 * torch.eye(2)])
    >>> segment_mm(a, b, torch.tensor([1, 2]))       # row 0 times b[0], rows 1-2 times b[1]
    tensor([[1., 1.],
            [2., 2.],
            [2., 2.]])
    """
    return run_segment_mm(SEGMENT, a, b, seglen_a)


def gather_mm(a: torch.Tensor, b: torch.Tensor, idx_b: torch.Tensor) -> torch.Tensor:
    r"""Per-row indexed matrix product: ``out[i] = a[i] @ b[idx_b[i]]``.

    Parameters
    ----------
    a : dense tensor ``(N, D1)``, float32 or float64.
    b : dense tensor ``(R, D1, D2)``, a's dtype and device.
    idx_b : int32 or int64 tensor ``(N,)`` on a's device, every value in ``[0, R)``.

    Returns
    -------
    Dense tensor ``(N, D2)``.  Differentiable w.r.t. ``a`` and ``b``; ``b``'s
    gradient is the per-relation sum ``sum_{i: idx_b[i] = r} a[i]^T G[i]``.

    Raises
    ------
    ValueError
        Inputs not tensors, wrong ranks, sizes that do not match, ``idx_b``
        outside ``[0, R)``, different devices.
    TypeError
        Values other than float32/float64, a and b of different dtypes, or
        ``idx_b`` not int32/int64.
    NotImplementedError
        On PyTorch older than 2.4, as in the published release.

    Examples
    --------
    >>> a, b = torch.ones(3, 2), torch.stack([torch.eye(2), 2 * torch.eye(2)])
    >>> gather_mm(a, b, torch.tensor([1, 0, 1]))     # rows 0 and 2 times b[1], row 1 times b[0]
    tensor([[2., 2.],
            [1., 1.],
            [2., 2.]])
    """
    return run_gather_mm(GATHER, a, b, idx_b)
