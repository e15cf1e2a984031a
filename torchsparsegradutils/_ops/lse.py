"""Log-sum-exp of a sparse operand's stored values (sparse_logsumexp and friends).

With S the pattern of a sparse operand (see the package's docstring) holding values `a`:
    tsgu::lse(a)         = log-sum-exp of S(a) by rows, columns, both or whole items
                           (see _backends.lse): L, one value per group
    tsgu::lse_grad(a, L, G)[e] = sum over the groups of entry e of G * exp(a[e] - L)
    tsgu::lse_wsum(a, L, u)[group] = sum over the group's entries e of u * exp(a[e] - L)
Each one's backward is made of the others:
    lse:      da = lse_grad(a, L, G)
    lse_grad: da = u * lse_grad(a, L, G),  dG = lse_wsum(a, L, u),  dL = -G * dG
    lse_wsum: du = lse_grad(a, L, v),  da = u * du,  dL = -v * lse_wsum(a, L, u)
"""
from typing import List

import torch
from torch import Tensor

from .. import _backends
from .._core.view import CSRView, check_arrays, view_of


@torch.library.custom_op("tsgu::lse", mutates_args=())
def _lse(ptr: Tensor, col: Tensor, shape: List[int], a: Tensor, mode: str, include_zeros: bool) -> Tensor:
    return _backends.lse(view_of(ptr, col, a, None, shape), mode, include_zeros, False)


@torch.library.custom_op("tsgu::lse_grad", mutates_args=())
def _lse_grad(ptr: Tensor, col: Tensor, shape: List[int], a: Tensor, out: Tensor, G: Tensor, mode: str) -> Tensor:
    _backends.check_lse_mode(mode)
    return _backends.lse_grad(view_of(ptr, col, a, None, shape), out, G, mode, False)


@_lse.register_fake
def _(ptr, col, shape, a, mode, include_zeros):
    check_arrays(ptr, col, a, shape)
    return a.new_empty(_backends.lse_shape(shape, mode, False))


@_lse_grad.register_fake
def _(ptr, col, shape, a, out, G, mode):
    check_arrays(ptr, col, a, shape)
    _backends.check_lse_mode(mode)
    return torch.empty_like(a)


@torch.library.custom_op("tsgu::lse_wsum", mutates_args=())
def _lse_wsum(ptr: Tensor, col: Tensor, shape: List[int], a: Tensor, out: Tensor, u: Tensor, mode: str) -> Tensor:
    _backends.check_lse_mode(mode)
    return _backends.lse_wsum(view_of(ptr, col, a, None, shape), out, u, mode)


@_lse_wsum.register_fake
def _(ptr, col, shape, a, out, u, mode):
    check_arrays(ptr, col, a, shape)
    _backends.check_lse_mode(mode)
    return torch.empty_like(out)


def _lse_setup(ctx, inputs, output):
    ptr, col, shape, a, mode, _ = inputs
    ctx.shape, ctx.mode = shape, mode
    ctx.save_for_backward(ptr, col, a, output)


def _lse_backward(ctx, G):
    ptr, col, a, out = ctx.saved_tensors
    da = _lse_grad(ptr, col, ctx.shape, a, out, G, ctx.mode) if ctx.needs_input_grad[3] else None
    return None, None, None, da, None, None


def _lse_pair_setup(ctx, inputs, output):
    ptr, col, shape, a, out, y, mode = inputs
    ctx.shape, ctx.mode = shape, mode
    ctx.save_for_backward(ptr, col, a, out, y, output)


def _lse_grad_backward(ctx, u):
    """g = lse_grad(a, out, G), g[e] = sum over e's groups of G * exp(a[e] - out):
    da = u * g, dG = lse_wsum(a, out, u), dout = -G * dG."""
    ptr, col, a, out, G, g = ctx.saved_tensors
    need_a, need_out, need_G = ctx.needs_input_grad[3:6]
    s = _lse_wsum(ptr, col, ctx.shape, a, out, u, ctx.mode) if need_out or need_G else None
    return (None, None, None, u * g if need_a else None, -G * s if need_out else None,
            s if need_G else None, None)


def _lse_wsum_backward(ctx, v):
    """s = lse_wsum(a, out, u), s = sum over a group of u * exp(a - out):
    du = lse_grad(a, out, v), da = u * du, dout = -v * s."""
    ptr, col, a, out, u, s = ctx.saved_tensors
    need_a, need_out, need_u = ctx.needs_input_grad[3:6]
    du = _lse_grad(ptr, col, ctx.shape, a, out, v, ctx.mode) if need_a or need_u else None
    return (None, None, None, u * du if need_a else None, -v * s if need_out else None,
            du if need_u else None, None)


_lse.register_autograd(_lse_backward, setup_context=_lse_setup)
_lse_grad.register_autograd(_lse_grad_backward, setup_context=_lse_pair_setup)
_lse_wsum.register_autograd(_lse_wsum_backward, setup_context=_lse_pair_setup)


def lse(view: CSRView, a: Tensor, mode: str, include_zeros: bool) -> Tensor:
    """Log-sum-exp of S(a) on view's pattern (mode and shapes: _backends.lse), differentiable in a."""
    return _lse(view.ptr, view.col, list(view.shape), a, mode, include_zeros)
