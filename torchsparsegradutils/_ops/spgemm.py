"""Sparse @ sparse (sparse_mm with a sparse B): the product and its gradient at the operands' entries.

The patterns S (a_ptr, a_col, a_shape) and T (b_ptr, b_col, b_shape), each a SparseCSR's
(global or batched row pointers); the product's pattern P (ptr, col) has global row
pointers and int64 columns (see _backends.spgemm):
    tsgu::spgemm(a, b)   = (ptr, col, c): the product S(a) T(b) of two patterns, its
                           values c on its own pattern (ptr, col) P
    tsgu::spgemm_grad(a, b, g) = (P(g) T(b)^T at S's stored (i, j), S(a)^T P(g) at T's stored (j, c))
with the derivative
    spgemm:   (da, db) = spgemm_grad(a, b, dc)   (no second derivative)
"""
from typing import List, Tuple

import torch
from torch import Tensor

from .. import _backends
from .._core.view import CSRView, check_arrays, view_of


@torch.library.custom_op("tsgu::spgemm", mutates_args=())
def _spgemm(a_ptr: Tensor, a_col: Tensor, a_shape: List[int], a: Tensor, b_ptr: Tensor, b_col: Tensor,
            b_shape: List[int], b: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    return _backends.spgemm(view_of(a_ptr, a_col, a, None, a_shape), view_of(b_ptr, b_col, b, None, b_shape))


@torch.library.custom_op("tsgu::spgemm_grad", mutates_args=())
def _spgemm_grad(a_ptr: Tensor, a_col: Tensor, a_shape: List[int], a: Tensor, b_ptr: Tensor, b_col: Tensor,
                 b_shape: List[int], b: Tensor, ptr: Tensor, col: Tensor, g: Tensor, need_a: bool,
                 need_b: bool) -> Tuple[Tensor, Tensor]:
    A, B = view_of(a_ptr, a_col, a, None, a_shape), view_of(b_ptr, b_col, b, None, b_shape)
    da, db = _backends.spgemm_grad(A, B, view_of(ptr, col, g, None, _product_shape(a_shape, b_shape)), need_a,
                                   need_b)
    return (da if need_a else a.new_empty(0)), (db if need_b else b.new_empty(0))    # empty: not asked for


def _product_shape(a_shape, b_shape) -> List[int]:
    return [*a_shape[:-1], b_shape[-1]]


@_spgemm.register_fake
def _(a_ptr, a_col, a_shape, a, b_ptr, b_col, b_shape, b):
    check_arrays(a_ptr, a_col, a, a_shape)
    check_arrays(b_ptr, b_col, b, b_shape)
    rows = (a_shape[0] if len(a_shape) == 3 else 1) * a_shape[-2]
    nnz = torch.library.get_ctx().new_dynamic_size()         # the product's pattern: known once computed
    return a_ptr.new_empty(rows + 1, dtype=torch.int64), a_col.new_empty(nnz, dtype=torch.int64), a.new_empty(nnz)


@_spgemm_grad.register_fake
def _(a_ptr, a_col, a_shape, a, b_ptr, b_col, b_shape, b, ptr, col, g, need_a, need_b):
    check_arrays(a_ptr, a_col, a, a_shape)
    check_arrays(b_ptr, b_col, b, b_shape)
    return a.new_empty(a_col.shape if need_a else 0), b.new_empty(b_col.shape if need_b else 0)


def _spgemm_setup(ctx, inputs, output):
    a_ptr, a_col, a_shape, a, b_ptr, b_col, b_shape, b = inputs
    ctx.shapes = a_shape, b_shape
    ctx.save_for_backward(a_ptr, a_col, a, b_ptr, b_col, b, output[0], output[1])


def _spgemm_backward(ctx, _, __, dc):
    a_ptr, a_col, a, b_ptr, b_col, b, ptr, col = ctx.saved_tensors
    (a_shape, b_shape), need_a, need_b = ctx.shapes, ctx.needs_input_grad[3], ctx.needs_input_grad[7]
    da, db = _spgemm_grad(a_ptr, a_col, a_shape, a, b_ptr, b_col, b_shape, b, ptr, col, dc, need_a, need_b)
    return None, None, None, da if need_a else None, None, None, None, db if need_b else None


_spgemm.register_autograd(_spgemm_backward, setup_context=_spgemm_setup)


def spgemm(A: CSRView, a: Tensor, B: CSRView, b: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    """(ptr, col, c): the product of A's pattern with values a and B's with values b
    (see _backends.spgemm), c differentiable in a and b."""
    return _spgemm(A.ptr, A.col, list(A.shape), a, B.ptr, B.col, list(B.shape), b)
