"""Softmax over a sparse operand's stored values (sparse_softmax, sparse_log_softmax).

With S the pattern of a sparse operand (see the package's docstring) holding values `a`
((nnz,), or (nnz, H): each head h on its own, in all three):
    tsgu::softmax(a)[e]  = exp(a[e] - L) (log: a[e] - L), L the log-sum-exp of the stored
                           values of e's row (by_rows) or column: y, one per entry
    tsgu::softmax_grad(y, g) = y * (g - S(g * y)) (log: g - exp(y) * S(g)): its values gradient
    tsgu::softmax_gsum(x)[e] = S(x)[e], the sum of x over e's row (or column)
Each one's backward is made of the others:
    softmax:  da = softmax_grad(y, G)
    softmax_grad (u its output's gradient): softmax: dg = softmax_grad(y, u),
              dy = u * (g - S(g y)) - g * S(u y);  log: dg = u - S(u exp(y)),
              dy = -u * exp(y) * S(g)
    softmax_gsum: dx = softmax_gsum(u)
"""
from typing import List

import torch
from torch import Tensor

from .. import _backends
from .._core.view import CSRView, check_arrays, view_of


@torch.library.custom_op("tsgu::softmax", mutates_args=())
def _softmax(ptr: Tensor, col: Tensor, shape: List[int], a: Tensor, by_rows: bool, log: bool) -> Tensor:
    return _backends.softmax(view_of(ptr, col, a, None, shape, heads=True), by_rows, log)


@torch.library.custom_op("tsgu::softmax_grad", mutates_args=())
def _softmax_grad(ptr: Tensor, col: Tensor, shape: List[int], y: Tensor, g: Tensor, by_rows: bool,
                  log: bool) -> Tensor:
    check_arrays(ptr, col, g, shape, heads=True)
    return _backends.softmax_grad(view_of(ptr, col, y, None, shape, heads=True)._replace(values=None), y, g, by_rows,
                                  log)


@torch.library.custom_op("tsgu::softmax_gsum", mutates_args=())
def _softmax_gsum(ptr: Tensor, col: Tensor, shape: List[int], x: Tensor, by_rows: bool) -> Tensor:
    return _backends.group_sum(view_of(ptr, col, x, None, shape, heads=True), x, by_rows)


@_softmax.register_fake
def _(ptr, col, shape, a, by_rows, log):
    check_arrays(ptr, col, a, shape, heads=True)
    return torch.empty_like(a)


@_softmax_grad.register_fake
def _(ptr, col, shape, y, g, by_rows, log):
    check_arrays(ptr, col, y, shape, heads=True)
    check_arrays(ptr, col, g, shape, heads=True)
    return torch.empty_like(y)


@_softmax_gsum.register_fake
def _(ptr, col, shape, x, by_rows):
    check_arrays(ptr, col, x, shape, heads=True)
    return torch.empty_like(x)


def _softmax_setup(ctx, inputs, output):
    ptr, col, shape, _, by_rows, log = inputs
    ctx.shape, ctx.by_rows, ctx.log = shape, by_rows, log
    ctx.save_for_backward(ptr, col, output)


def _softmax_backward(ctx, G):
    ptr, col, y = ctx.saved_tensors
    da = _softmax_grad(ptr, col, ctx.shape, y, G, ctx.by_rows, ctx.log) if ctx.needs_input_grad[3] else None
    return None, None, None, da, None, None


def _softmax_grad_setup(ctx, inputs, output):
    ptr, col, shape, y, g, by_rows, log = inputs
    ctx.shape, ctx.by_rows, ctx.log = shape, by_rows, log
    ctx.save_for_backward(ptr, col, y, g)


def _softmax_grad_backward(ctx, u):
    """gv = softmax_grad(y, g), linear in g: for softmax the map is self-adjoint (dg =
    softmax_grad(y, u)), for log-softmax its adjoint is u - S(u exp(y)); dy by the
    product rule through S (softmax_gsum)."""
    ptr, col, y, g = ctx.saved_tensors
    need_y, need_g = ctx.needs_input_grad[3:5]
    S = lambda x: _softmax_gsum(ptr, col, ctx.shape, x, ctx.by_rows)  # noqa: E731
    dg = dy = None
    if ctx.log:
        e = y.exp()
        dg = u - S(u * e) if need_g else None
        dy = -u * e * S(g) if need_y else None
    else:
        dg = _softmax_grad(ptr, col, ctx.shape, y, u, ctx.by_rows, False) if need_g else None
        dy = u * (g - S(g * y)) - g * S(u * y) if need_y else None
    return None, None, None, dy, dg, None, None


def _softmax_gsum_setup(ctx, inputs, output):
    ptr, col, shape, _, by_rows = inputs
    ctx.shape, ctx.by_rows = shape, by_rows
    ctx.save_for_backward(ptr, col)


def _softmax_gsum_backward(ctx, u):
    ptr, col = ctx.saved_tensors
    dx = _softmax_gsum(ptr, col, ctx.shape, u, ctx.by_rows) if ctx.needs_input_grad[3] else None
    return None, None, None, dx, None


_softmax.register_autograd(_softmax_backward, setup_context=_softmax_setup)
_softmax_grad.register_autograd(_softmax_grad_backward, setup_context=_softmax_grad_setup)
_softmax_gsum.register_autograd(_softmax_gsum_backward, setup_context=_softmax_gsum_setup)


def softmax(view: CSRView, a: Tensor, by_rows: bool, log: bool) -> Tensor:
    """Softmax (log-softmax with log) of S(a) over each row's (by_rows) or column's stored
    values, one per entry, differentiable in a to any order."""
    return _softmax(view.ptr, view.col, list(view.shape), a, by_rows, log)
