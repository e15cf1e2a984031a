"""Grouped products (gather_mm, segment_mm): each row of a dense operand times its relation's matrix.

For rows i of a dense `a` grouped by relation r(i) (offsets `off`, row order `perm`,
from tsgu::group_rows(idx, R) for relations idx, or segments):
    tsgu::grouped_mm(a, M)[i]    = a[i] @ M[r(i)]
    tsgu::grouped_mm_tn(a, G)[r] = sum_{i: r(i) = r} a[i]^T G[i]
Each one's backward is made of the others (H: out's gradient):
    grouped_mm:    da = grouped_mm(G, M^T),   dM = grouped_mm_tn(a, G)
    grouped_mm_tn: da = grouped_mm(G, H^T),   dG = grouped_mm(a, H)
"""
from typing import Optional, Tuple

import torch
from torch import Tensor

from .. import _backends


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
