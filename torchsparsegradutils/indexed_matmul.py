"""gather_mm and segment_mm: one small matrix product per group of rows.

Both ops compute ``out[i] = a[i] @ b[r(i)]`` for a relation r(i) per row: given
by ``idx_b`` (gather_mm) or by consecutive segments of lengths ``seglen_a``
(segment_mm).  On CPU the rows are grouped by relation once (a counting sort of
``idx_b``, csrc/group_rows.c; segments are groups already) and every kernel
walks the groups: csrc/grouped_mm.c for the forward product and grad_a
(``G @ b[r]^T``), csrc/grouped_mm_tn.c for grad_b (``sum a[i]^T G[i]`` per
relation, without atomics and without an N x D1 x D2 temporary).  Other
devices (CUDA) take the same grouping through PyTorch ops.
"""
import re

import torch

from . import _C, _kernels
from ._csr import plain

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
    off = torch.zeros(R + 1, dtype=torch.int64, device=a.device)
    torch.cumsum(lengths, 0, out=off[1:])
    if R and bool((lengths < 0).any()):
        raise ValueError(f"seglen_a must be non-negative, got {seglen_a.tolist() if R <= 16 else 'a negative length'}")
    total = int(off[-1])
    if total != N:
        raise ValueError(f"seglen_a must sum to the number of rows of a ({N}), got {total}")
    return GroupedMM.apply(a, b, off, None)


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
    if N:
        lo, hi = int(idx_b.min()), int(idx_b.max())
        if lo < 0 or hi >= R:
            raise ValueError(f"idx_b must lie in [0, R) = [0, {R}), got values from {lo} to {hi}")
    return GroupedMM.apply(a, b, None, idx_b)


def _check_torch_version() -> None:
    """The published release requires PyTorch >= 2.4 for these ops; keep its contract."""
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


class GroupedMM(torch.autograd.Function):
    """``out[i] = a[i] @ b[r(i)]`` with the groups given either by segment offsets
    ``off`` (R+1,) or by ``idx_b`` (N,); validate with gather_mm/segment_mm first."""

    @staticmethod
    def forward(ctx, a, b, off, idx_b):
        if _kernels._use_c(a, b):
            perm = None
            if idx_b is not None:
                off = torch.empty(b.shape[0] + 1, dtype=torch.int64)
                perm = torch.empty(a.shape[0], dtype=torch.int64)
                _C.group_rows(idx_b.contiguous(), b.shape[0], off, perm)
            out = torch.empty(a.shape[0], b.shape[2], dtype=a.dtype)
            _C.grouped_mm(off, perm, _kernels._dense_for_c(a), _kernels._dense_for_c(b), out,
                          torch.get_num_threads())
        else:
            off, perm = _torch_groups(b.shape[0], off, idx_b)
            out = _torch_grouped_mm(a, b, off, perm)
        need_a, need_b = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        # the tensors themselves, so that an in-place edit before backward raises
        ctx.save_for_backward(a if need_b else None, b if need_a else None, off, perm)
        return out

    @staticmethod
    def backward(ctx, G):
        a, b, off, perm = ctx.saved_tensors
        grad_a = grad_b = None
        if _kernels._use_c(G):
            G = _kernels._dense_for_c(G)
            if ctx.needs_input_grad[0]:
                grad_a = torch.empty(G.shape[0], b.shape[1], dtype=G.dtype)
                _C.grouped_mm(off, perm, G, plain(b).transpose(1, 2).contiguous(), grad_a,
                              torch.get_num_threads())
            if ctx.needs_input_grad[1]:
                grad_b = torch.empty(off.shape[0] - 1, a.shape[1], G.shape[1], dtype=G.dtype)
                _C.grouped_mm_tn(off, perm, _kernels._dense_for_c(a), G, grad_b, torch.get_num_threads())
        else:
            if ctx.needs_input_grad[0]:
                grad_a = _torch_grouped_mm(G, b.transpose(1, 2), off, perm)
            if ctx.needs_input_grad[1]:
                grad_b = _torch_grouped_mm_tn(a, G, off, perm)
        return grad_a, grad_b, None, None


def _torch_groups(R: int, off, idx_b):
    """(off, perm) of the grouping in PyTorch ops: perm None for segments; for
    idx_b a stable sort by relation."""
    if idx_b is None:
        return off, None
    perm = torch.argsort(idx_b, stable=True)
    off = torch.zeros(R + 1, dtype=torch.int64, device=idx_b.device)
    torch.cumsum(torch.bincount(idx_b, minlength=R), 0, out=off[1:])
    return off, perm


def _torch_grouped_mm(a: torch.Tensor, M: torch.Tensor, off: torch.Tensor, perm) -> torch.Tensor:
    """out[i] = a[i] @ M[r] for the rows of group r: one mm per relation on the
    rows in group order (PyTorch ops, for devices the C kernels cannot read)."""
    a_grouped = a if perm is None else a.index_select(0, perm)
    parts = torch.split(a_grouped, torch.diff(off).tolist())
    out_grouped = torch.cat([p @ M[r] for r, p in enumerate(parts)]) if parts else a.new_empty(0, M.shape[2])
    if perm is None:
        return out_grouped
    return torch.empty_like(out_grouped).index_copy_(0, perm, out_grouped)


def _torch_grouped_mm_tn(a: torch.Tensor, G: torch.Tensor, off: torch.Tensor, perm) -> torch.Tensor:
    """out[r] = sum over the rows i of group r of a[i]^T G[i], in PyTorch ops."""
    lengths = torch.diff(off).tolist()
    a_grouped = a if perm is None else a.index_select(0, perm)
    G_grouped = G if perm is None else G.index_select(0, perm)
    out = a.new_empty(len(lengths), a.shape[1], G.shape[1])
    for r, (ap, gp) in enumerate(zip(torch.split(a_grouped, lengths), torch.split(G_grouped, lengths))):
        torch.mm(ap.t(), gp, out=out[r])
    return out
