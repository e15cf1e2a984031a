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
import re

import torch

from ._ops.grouped import group_rows, grouped_mm

SUPPORTED_DTYPES = (torch.float32, torch.float64)


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
    _check_torch_version()
    if not all(isinstance(t, torch.Tensor) for t in (a, b, seglen_a)):
        raise ValueError("Inputs should be instances of torch.Tensor")
    if a.dim() != 2 or b.dim() != 3 or seglen_a.dim() != 1:
        raise ValueError(
            "Input tensors have unexpected dimensions: a must be 2D (N, D1), b 3D (R, D1, D2) and "
            f"seglen_a 1D (R,), got {a.dim()}D, {b.dim()}D and {seglen_a.dim()}D"
        )
    _check_operands(a, b, "segment_mm")
    N, R = a.shape[0], b.shape[0]
    if seglen_a.shape[0] != R:
        raise ValueError(f"Incompatible size for inputs: seglen_a has {seglen_a.shape[0]} lengths for R = {R} matrices")
    if seglen_a.is_floating_point() or seglen_a.is_complex() or seglen_a.dtype == torch.bool:
        raise TypeError(f"seglen_a must hold integers, got {seglen_a.dtype}")
    lengths = seglen_a.to(device=a.device, dtype=torch.int64)
    off = torch.cat([lengths.new_zeros(1), torch.cumsum(lengths, 0)])
    if not torch.compiler.is_compiling():   # data-dependent; compiled, the kernels check off instead
        if R and bool((lengths < 0).any()):
            raise ValueError(f"seglen_a must be non-negative, got {seglen_a.tolist() if R <= 16 else 'a negative length'}")
        total = int(off[-1])
        if total != N:
            raise ValueError(f"seglen_a must sum to the number of rows of a ({N}), got {total}")
    return grouped_mm(off, None, a, b)


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
    _check_torch_version()
    if not all(isinstance(t, torch.Tensor) for t in (a, b, idx_b)):
        raise ValueError("Inputs should be instances of torch.Tensor")
    if a.dim() != 2 or b.dim() != 3 or idx_b.dim() != 1:
        raise ValueError(
            "Input tensors have unexpected dimensions: a must be 2D (N, D1), b 3D (R, D1, D2) and "
            f"idx_b 1D (N,), got {a.dim()}D, {b.dim()}D and {idx_b.dim()}D"
        )
    _check_operands(a, b, "gather_mm")
    N, R = a.shape[0], b.shape[0]
    if idx_b.shape[0] != N:
        raise ValueError(f"Incompatible size for inputs: idx_b has {idx_b.shape[0]} entries for N = {N} rows of a")
    if idx_b.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"idx_b must be int32 or int64, got {idx_b.dtype}")
    if idx_b.device != a.device:
        raise ValueError(f"idx_b must be on a's device ({a.device}), got {idx_b.device}")
    if N and not torch.compiler.is_compiling():   # data-dependent; compiled, group_rows checks idx_b
        lo, hi = int(idx_b.min()), int(idx_b.max())
        if lo < 0 or hi >= R:
            raise ValueError(f"idx_b must lie in [0, R) = [0, {R}), got values from {lo} to {hi}")
    off, perm = group_rows(idx_b, R)
    return grouped_mm(off, perm, a, b)


def _check_torch_version() -> None:
    """The published release requires PyTorch >= 2.4 for these ops; keep its contract
    (read at each call, as its tests patch torch.__version__; not while compiling:
    the Dynamo of PyTorch 2.11, for one, cannot trace the regular expression)."""
    if torch.compiler.is_compiling():
        return
    found = re.match(r"(\d+)\.(\d+)", torch.__version__)
    if found and (int(found.group(1)), int(found.group(2))) < (2, 4):
        raise NotImplementedError(f"PyTorch version is too old: {torch.__version__} (gather_mm and segment_mm "
                                  "need PyTorch >= 2.4)")


def _check_operands(a: torch.Tensor, b: torch.Tensor, name: str) -> None:
    if a.layout != torch.strided or b.layout != torch.strided:
        raise ValueError(f"{name} takes dense (strided) tensors, got {a.layout} and {b.layout}")
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"Incompatible size for inputs: a is {tuple(a.shape)} and b is {tuple(b.shape)} "
                         "(a's columns must match b's rows)")
    if a.device != b.device:
        raise ValueError(f"a and b must be on the same device, got {a.device} and {b.device}")
    if a.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{name} supports float32 and float64 values, got a of dtype {a.dtype}")
    if b.dtype != a.dtype:
        raise TypeError(f"a and b must have the same dtype, got {a.dtype} and {b.dtype}")
