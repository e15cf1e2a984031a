"""amax / amin (sparse_mm's reduce): the products that keep, per output element, the entry giving it.

With S the pattern of a sparse operand (see the package's docstring) holding values `a`:
    tsgu::spmm_arg(a, X) = (C, arg): C[i,t] = max (or min) over row i's entries e of
                           a[e] X[j(e),t], arg[i,t] that e (reduce="amax"/"amin"); with
                           arg fixed, C = gather_arg(a, X) = a[arg] X[j(arg), t], and
    tsgu::spmm_t_arg(a, arg, Y)[j,t] = sum of a[e] Y[i,t] over the (i, t) whose arg e has j(e) = j
    tsgu::sddmm_arg(arg, U, V)[e]    = sum of U[i,t] V[j(e),t] over the t whose arg is e
Each one's backward is made of the others (arg is never differentiated):
    gather_arg (and spmm_arg): da = sddmm_arg(G, X),  dX = spmm_t_arg(a, G)
    spmm_t_arg: da = sddmm_arg(Y, H),  dY = gather_arg(a, H)
    sddmm_arg:  dU = gather_arg(g, V),  dV = spmm_t_arg(g, U)
"""
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from .. import _backends
from .._core.view import CSRView, check_arrays, op_args, view_of


@torch.library.custom_op("tsgu::spmm_arg", mutates_args=())
def _spmm_arg(ptr: Tensor, col: Tensor, rows: Optional[Tensor], shape: List[int], a: Tensor, X: Tensor,
              is_min: bool) -> Tuple[Tensor, Tensor]:
    return _backends.spmm_arg(view_of(ptr, col, a, rows, shape), X, is_min)


@torch.library.custom_op("tsgu::spmm_t_arg", mutates_args=())
def _spmm_t_arg(ptr: Tensor, col: Tensor, rows: Optional[Tensor], shape: List[int], a: Tensor, arg: Tensor,
                Y: Tensor) -> Tensor:
    return _backends.spmm_t_arg(view_of(ptr, col, a, rows, shape), arg, Y)


@torch.library.custom_op("tsgu::sddmm_arg", mutates_args=())
def _sddmm_arg(ptr: Tensor, col: Tensor, rows: Optional[Tensor], shape: List[int], arg: Tensor, U: Tensor,
               V: Tensor) -> Tensor:
    return _backends.sddmm_arg(view_of(ptr, col, None, rows, shape), arg, U, V)


@torch.library.custom_op("tsgu::gather_arg", mutates_args=())
def _gather_arg(ptr: Tensor, col: Tensor, rows: Optional[Tensor], shape: List[int], a: Tensor, arg: Tensor,
                X: Tensor) -> Tensor:
    return _backends.gather_arg(view_of(ptr, col, a, rows, shape), arg, X)


def _arg_shape(shape, rows, p):
    """The shape of spmm_arg's arg: C's, or (kept rows, p) for a hypersparse view."""
    return (rows.shape[0], p) if rows is not None else (*shape[:-1], p)


@_spmm_arg.register_fake
def _(ptr, col, rows, shape, a, X, is_min):
    check_arrays(ptr, col, a, shape, rows)
    p = X.shape[-1]
    return X.new_empty((*shape[:-1], p)), X.new_empty(_arg_shape(shape, rows, p), dtype=torch.int32)


@_spmm_t_arg.register_fake
def _(ptr, col, rows, shape, a, arg, Y):
    check_arrays(ptr, col, a, shape, rows)
    return Y.new_empty((*shape[:-2], shape[-1], Y.shape[-1]))


@_sddmm_arg.register_fake
def _(ptr, col, rows, shape, arg, U, V):
    check_arrays(ptr, col, None, shape, rows)
    return U.new_empty(col.shape)


@_gather_arg.register_fake
def _(ptr, col, rows, shape, a, arg, X):
    check_arrays(ptr, col, a, shape, rows)
    return X.new_empty((*shape[:-1], X.shape[-1]))


# the derivatives of the arg ops: see the module's docstring (arg is never differentiated)
def _arg_setup(ctx, inputs, output):
    ptr, col, rows, shape, *operands = inputs      # (a, arg, X), (a, arg, Y) or (arg, U, V)
    ctx.shape = shape
    ctx.save_for_backward(ptr, col, rows, *operands)


def _spmm_arg_setup(ctx, inputs, output):
    ptr, col, rows, shape, a, X, _ = inputs
    ctx.shape = shape
    ctx.save_for_backward(ptr, col, rows, a, output[1], X)     # as gather_arg's (a, arg, X)


def _gathered_grads(ctx, G, need_a: bool, need_X: bool):
    """(da, dX) of gather_arg(a, X) with arg fixed."""
    ptr, col, rows, a, arg, X = ctx.saved_tensors
    pattern = (ptr, col, rows, ctx.shape)
    return (_sddmm_arg(*pattern, arg, G, X) if need_a else None,
            _spmm_t_arg(*pattern, a, arg, G) if need_X else None)


def _spmm_arg_backward(ctx, G, _):
    da, dX = _gathered_grads(ctx, G, ctx.needs_input_grad[4], ctx.needs_input_grad[5])
    return None, None, None, None, da, dX, None


def _gather_arg_backward(ctx, G):
    da, dX = _gathered_grads(ctx, G, ctx.needs_input_grad[4], ctx.needs_input_grad[6])
    return None, None, None, None, da, None, dX


def _spmm_t_arg_backward(ctx, H):
    ptr, col, rows, a, arg, Y = ctx.saved_tensors
    pattern = (ptr, col, rows, ctx.shape)
    da = _sddmm_arg(*pattern, arg, Y, H) if ctx.needs_input_grad[4] else None
    dY = _gather_arg(*pattern, a, arg, H) if ctx.needs_input_grad[6] else None
    return None, None, None, None, da, None, dY


def _sddmm_arg_backward(ctx, u):
    ptr, col, rows, arg, U, V = ctx.saved_tensors
    pattern = (ptr, col, rows, ctx.shape)
    dU = _gather_arg(*pattern, u, arg, V) if ctx.needs_input_grad[5] else None
    dV = _spmm_t_arg(*pattern, u, arg, U) if ctx.needs_input_grad[6] else None
    return None, None, None, None, None, dU, dV


_spmm_arg.register_autograd(_spmm_arg_backward, setup_context=_spmm_arg_setup)
_gather_arg.register_autograd(_gather_arg_backward, setup_context=_arg_setup)
_spmm_t_arg.register_autograd(_spmm_t_arg_backward, setup_context=_arg_setup)
_sddmm_arg.register_autograd(_sddmm_arg_backward, setup_context=_arg_setup)


def spmm_arg(view: CSRView, a: Tensor, X: Tensor, is_min: bool) -> Tuple[Tensor, Tensor]:
    """(C, arg): the max (min with is_min) of S(a)'s row products with X and the entry
    giving each (see _backends.spmm_arg); C differentiable in a and X."""
    return _spmm_arg(*op_args(view), a, X, is_min)


def spmm_t_arg(view: CSRView, a: Tensor, arg: Tensor, Y: Tensor) -> Tensor:
    """S(a)^T Y through arg's entries alone (_backends.spmm_t_arg), differentiable in a and Y."""
    return _spmm_t_arg(*op_args(view), a, arg, Y)


def sddmm_arg(view: CSRView, arg: Tensor, U: Tensor, V: Tensor) -> Tensor:
    """sum over arg's columns of U[i,t] V[j,t] at each stored (i, j) (_backends.sddmm_arg),
    differentiable in U and V."""
    return _sddmm_arg(*op_args(view), arg, U, V)
