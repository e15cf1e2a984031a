"""Grouped products (gather_mm, segment_mm): each row of a dense operand times its relation's matrix.

For rows i of a dense `a` grouped by relation r(i) (offsets `off`, row order `perm`,
from tsgu::group_rows(idx, R) for relations idx, or segments):
    tsgu::grouped_mm(a, M)[i]    = a[i] @ M[r(i)]
    tsgu::grouped_mm_tn(a, G)[r] = sum_{i: r(i) = r} a[i]^T G[i]
Each one's backward is made of the others (H: out's gradient):
    grouped_mm:    da = grouped_mm(G, M^T),   dM = grouped_mm_tn(a, G)
    grouped_mm_tn: da = grouped_mm(G, H^T),   dG = grouped_mm(a, H)

run_segment_mm and run_gather_mm are segment_mm and gather_mm.
"""
import re
from typing import Optional, Tuple

import torch
from torch import Tensor

from .. import _backends
from .._core.validate import GroupedSpec, check_grouped


@torch.library.custom_op("tsgu::group_rows", mutates_args=())
def group_rows(idx: Tensor, R: int) -> Tuple[Tensor, Tensor]:
    """(off (R+1,), perm (n,)): the rows grouped by relation idx[i] in [0, R)."""
    return _backends.group_rows(idx, R)


@torch.library.custom_op("tsgu::grouped_mm", mutates_args=())
def grouped_mm(off: Tensor, perm: Optional[Tensor], a: Tensor, M: Tensor) -> Tensor:
    """out[i] = a[i] @ M[r(i)], differentiable in a and M."""
    return _backends.grouped_mm(off, perm, a, M)


@torch.library.custom_op("tsgu::grouped_mm_tn", mutates_args=())
def grouped_mm_tn(off: Tensor, perm: Optional[Tensor], a: Tensor, G: Tensor) -> Tensor:
    """out[r] = sum over the rows i of group r of a[i]^T G[i], differentiable in a and G."""
    return _backends.grouped_mm_tn(off, perm, a, G)


@group_rows.register_fake
def _(idx, R):
    return idx.new_empty(R + 1, dtype=torch.int64), idx.new_empty(idx.shape[0], dtype=torch.int64)


@grouped_mm.register_fake
def _(off, perm, a, M):
    return a.new_empty(a.shape[0], M.shape[2])


@grouped_mm_tn.register_fake
def _(off, perm, a, G):
    return a.new_empty(off.shape[0] - 1, a.shape[1], G.shape[1])


def _grouped_setup(ctx, inputs, output):
    off, perm, a, X = inputs      # each gradient reads the other operand only
    ctx.save_for_backward(off, perm, a if ctx.needs_input_grad[3] else None,
                          X if ctx.needs_input_grad[2] else None)


def _grouped_mm_backward(ctx, G):
    off, perm, a, M = ctx.saved_tensors
    da = grouped_mm(off, perm, G, M.transpose(1, 2)) if ctx.needs_input_grad[2] else None
    dM = grouped_mm_tn(off, perm, a, G) if ctx.needs_input_grad[3] else None
    return None, None, da, dM


def _grouped_mm_tn_backward(ctx, H):
    off, perm, a, G = ctx.saved_tensors
    da = grouped_mm(off, perm, G, H.transpose(1, 2)) if ctx.needs_input_grad[2] else None
    dG = grouped_mm(off, perm, a, H) if ctx.needs_input_grad[3] else None
    return None, None, da, dG


grouped_mm.register_autograd(_grouped_mm_backward, setup_context=_grouped_setup)
grouped_mm_tn.register_autograd(_grouped_mm_tn_backward, setup_context=_grouped_setup)


def run_segment_mm(spec: GroupedSpec, a: Tensor, b: Tensor, seglen_a: Tensor) -> Tensor:
    """segment_mm against spec."""
    _check_torch_version()
    check_grouped(spec, a, b, seglen_a)
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


def run_gather_mm(spec: GroupedSpec, a: Tensor, b: Tensor, idx_b: Tensor) -> Tensor:
    """gather_mm against spec."""
    _check_torch_version()
    check_grouped(spec, a, b, idx_b)
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
