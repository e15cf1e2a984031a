"""Graph attention on a pattern (graph_attention): scores at the stored entries, a softmax
over each row's stored entries, and the product with them as values, fused (never an
E x H x F temporary).

The pattern S (n, m) of a 2-D SparseCSR (values unused); x (m, H, F), s (m, H), d (n, H),
e (nnz, H) a score per stored entry added to s[j] + d[i] (or None); dropout: seed None or
an int64 tensor of one element, drop (of 2^24) and scale (see _backends.gat); slope
LeakyReLU's:
    tsgu::gat(x, s, d, e)  = (out, alpha): out (n, H, F), alpha (nnz, H) the attention weights (before dropout)
    tsgu::gat_grad(x, s, d, e, alpha, G, galpha) = (dx, ds, dd, de), given the gradients G of
                          out and galpha (or None) of alpha; de (the scores' gradient) is made
                          whether or not e is given (the kernels need it anyway)
with the derivative
    gat:      (dx, ds, dd, de) = gat_grad(...)   (no second derivative)
"""
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from .. import _backends
from .._core.view import CSRView, check_arrays, kernel_array, view_of


def _opt(t: Optional[Tensor]) -> Optional[Tensor]:
    return None if t is None else kernel_array(t)


@torch.library.custom_op("tsgu::gat", mutates_args=())
def _gat(ptr: Tensor, col: Tensor, shape: List[int], x: Tensor, s: Tensor, d: Tensor, e: Optional[Tensor],
         seed: Optional[Tensor], drop: int, scale: float, slope: float) -> Tuple[Tensor, Tensor]:
    return _backends.gat(view_of(ptr, col, None, None, shape), kernel_array(x), kernel_array(s), kernel_array(d),
                         _opt(e), seed, drop, scale, slope)


@torch.library.custom_op("tsgu::gat_grad", mutates_args=())
def _gat_grad(ptr: Tensor, col: Tensor, shape: List[int], x: Tensor, s: Tensor, d: Tensor, e: Optional[Tensor],
              seed: Optional[Tensor], drop: int, scale: float, slope: float, alpha: Tensor, G: Tensor,
              galpha: Optional[Tensor]) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    return _backends.gat_grad(view_of(ptr, col, None, None, shape), kernel_array(x), kernel_array(s),
                              kernel_array(d), _opt(e), seed, drop, scale, slope, kernel_array(alpha),
                              kernel_array(G), _opt(galpha))


@_gat.register_fake
def _(ptr, col, shape, x, s, d, e, seed, drop, scale, slope):
    check_arrays(ptr, col, None, shape)
    return x.new_empty(shape[0], *x.shape[1:]), x.new_empty(col.shape[0], x.shape[1])


@_gat_grad.register_fake
def _(ptr, col, shape, x, s, d, e, seed, drop, scale, slope, alpha, G, galpha):
    check_arrays(ptr, col, None, shape)
    return torch.empty_like(x), torch.empty_like(s), torch.empty_like(d), torch.empty_like(alpha)


def _gat_setup(ctx, inputs, output):
    ptr, col, shape, x, s, d, e, seed, drop, scale, slope = inputs
    ctx.shape, ctx.dropout, ctx.slope = shape, (drop, scale), slope
    ctx.save_for_backward(ptr, col, x, s, d, e, seed, output[1])
    ctx.set_materialize_grads(False)          # an unused alpha's gradient stays None: no (nnz, H) zeros


def _gat_backward(ctx, G, galpha):
    ptr, col, x, s, d, e, seed, alpha = ctx.saved_tensors
    if G is None:
        G = x.new_zeros(ctx.shape[0], *x.shape[1:])
    gx, gs, gd, ge = _gat_grad(ptr, col, ctx.shape, x, s, d, e, seed, *ctx.dropout, ctx.slope, alpha, G, galpha)
    need = ctx.needs_input_grad
    return (None, None, None, gx if need[3] else None, gs if need[4] else None, gd if need[5] else None,
            ge if need[6] else None, None, None, None, None)


_gat.register_autograd(_gat_backward, setup_context=_gat_setup)


def gat(view: CSRView, x: Tensor, s: Tensor, d: Tensor, e: Optional[Tensor], seed: Optional[Tensor], drop: int,
        scale: float, slope: float) -> Tuple[Tensor, Tensor]:
    """(out, alpha) of graph attention on view's pattern (see _backends.gat), differentiable
    once in x, s, d and e (through both outputs)."""
    return _gat(view.ptr, view.col, list(view.shape), x, s, d, e, seed, drop, scale, slope)
