"""The triangular solve (sparse_triangular_solve).

With S the pattern of a sparse operand (see the package's docstring) holding values `a`:
    tsgu::trisolve(a, B) = M^{-1} B,  M = S(a) triangular (or S(a)^T with transpose)
with the derivative (made of the products'):
    trisolve: dB = trisolve^T(a, G),   da = -sddmm(dB, X) (of M's entries: S's, transposed)
"""
from typing import List, Optional

import torch
from torch import Tensor

from .. import _backends
from .._core.view import CSRView, check_arrays, op_args, view_of
from .products import _sddmm


@torch.library.custom_op("tsgu::trisolve", mutates_args=())
def _trisolve(ptr: Tensor, col: Tensor, rows: Optional[Tensor], shape: List[int], a: Tensor, B: Tensor,
              upper: bool, unitriangular: bool, transpose: bool) -> Tensor:
    return _backends.trisolve(view_of(ptr, col, a, rows, shape), B, upper, unitriangular, transpose)


@_trisolve.register_fake
def _(ptr, col, rows, shape, a, B, upper, unitriangular, transpose):
    check_arrays(ptr, col, a, shape, rows)
    return torch.empty_like(B)


def trisolve_backward(pattern, a: Tensor, X: Tensor, G: Tensor, flags, need_a: bool):
    """(da, dB) of X = trisolve(a, B) for dL/dX = G; M = A (or A^T): dB = M^{-T} G and
    dM = -dB X^T at the pattern (entry (i, j) of A is entry (j, i) of A^T)."""
    upper, unitriangular, transpose = flags
    dB = _trisolve(*pattern, a, G, upper, unitriangular, not transpose)
    da = None
    if need_a:
        da = -(_sddmm(*pattern, X, dB) if transpose else _sddmm(*pattern, dB, X))
    return da, dB


def _trisolve_setup(ctx, inputs, output):
    ptr, col, rows, shape, a, _, *flags = inputs
    ctx.shape, ctx.flags = shape, flags
    ctx.save_for_backward(ptr, col, rows, a, output)


def _trisolve_autograd(ctx, G):
    ptr, col, rows, a, X = ctx.saved_tensors
    da, dB = trisolve_backward((ptr, col, rows, ctx.shape), a, X, G, ctx.flags, ctx.needs_input_grad[4])
    return None, None, None, None, da, dB if ctx.needs_input_grad[5] else None, None, None, None


_trisolve.register_autograd(_trisolve_autograd, setup_context=_trisolve_setup)


def trisolve(view: CSRView, a: Tensor, B: Tensor, upper: bool, unitriangular: bool, transpose: bool) -> Tensor:
    """M^{-1} B for M = S(a) triangular (S(a)^T with transpose), differentiable in a and B."""
    return _trisolve(*op_args(view), a, B, upper, unitriangular, transpose)
