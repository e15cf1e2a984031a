"""Sparse @ sparse (sparse_mm with a sparse B): the product and its gradient at the operands' entries.

The patterns S (a_ptr, a_col, a_shape) and T (b_ptr, b_col, b_shape), each a SparseCSR's
(global or batched row pointers); the product's pattern P (ptr, col) has global row
pointers and columns, int32 where both patterns' are, else int64 (see _backends.spgemm):
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
from .._core.intake import as_csr, as_csr_values, on_rows
from .._core.saved import load_operands, save_operands
from .._core.sparse_csr import SparseCSR
from .._core.torch_sparse import coo_tensor, csr_tensor
from .._core.undefined_grad import none_for_undefined
from .._core.validate import ProductSpec, check_sparse_operands, eager_only, error, refuse_create_graph
from .._core.view import CSRView, check_arrays, coo_from_values, csr_from_values, view_of


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
    itype = torch.int32 if a_ptr.dtype == b_ptr.dtype == torch.int32 else torch.int64   # view.product_itype
    return a_ptr.new_empty(rows + 1, dtype=itype), a_col.new_empty(nnz, dtype=itype), a.new_empty(nnz)


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


# ---------------------------------------------------------------- sparse_mm with a sparse B
def sparse_sparse_mm(spec: ProductSpec, A, B):
    """sparse_mm with a sparse B, checked against spec: two torch sparse tensors through SparseSparseMatMul
    (eager); a SparseCSR on either side through the custom op (what compile traces),
    the other operand taken as its components."""
    a_shape, b_shape = check_sparse_operands(spec, A, B)
    shape = torch.Size([*a_shape[:-1], b_shape[-1]])
    if isinstance(A, SparseCSR) or isinstance(B, SparseCSR):
        (a, a_values), (b, b_values) = _components(A), _components(B)
        return SparseCSR(*spgemm(a, a_values, b, b_values), tuple(shape))
    return _sparse_sparse_torch(A, B)


def _components(X):
    """(CSRView, values) of a sparse operand, the values differentiable w.r.t. it."""
    if isinstance(X, SparseCSR):
        return X.view(), X.values
    return _tensor_components(X)


@eager_only
def _tensor_components(X: torch.Tensor):
    return as_csr_values(X)


@eager_only
def _sparse_sparse_torch(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    return SparseSparseMatMul.apply(A, B)


def _product(layout, ptr: torch.Tensor, index: torch.Tensor, values: torch.Tensor, shape: torch.Size):
    """The product C from its pattern (global row pointers, and the columns, or for a COO
    layout the COO index array: see _backends.spgemm) and values, as a torch sparse
    tensor of `layout` (torch.sparse_coo or torch.sparse_csr); differentiable in values
    where they carry a graph."""
    learns = values.requires_grad
    if layout == torch.sparse_coo:
        return (coo_from_values if learns else coo_tensor)(index, values, shape, is_coalesced=True)
    if len(shape) == 3:                            # PyTorch's batched CSR: one entry count per item
        b, n = shape[0], shape[1]
        starts = ptr[0:b * n + 1:n] if n else ptr.new_zeros(b + 1)
        counts = starts.diff()
        if b and not bool((counts == counts[0]).all()):
            raise error(ValueError, "the batch items of A @ B hold different numbers of entries, which PyTorch's "
                        "batched CSR cannot hold: take A as COO with three sparse dimensions, or a SparseCSR",
                        f"entries per item: {counts.tolist()}")
        per = int(counts[0]) if b else 0
        ptr = torch.cat([ptr[:-1].reshape(b, n), ptr[n:b * n + 1:n].reshape(b, 1)], 1) - starts[:-1, None] \
            if n else ptr.new_zeros(b, 1)
        index, values = index.reshape(b, per), values.reshape(b, per)
    return (csr_from_values if learns else csr_tensor)(ptr, index, values, shape)


class SparseSparseMatMul(torch.autograd.Function):
    """The autograd Function behind :func:`sparse_mm` with two torch sparse tensors
    (validate with sparse_mm first): C = A @ B, sparse, in A's layout."""

    @staticmethod
    def forward(ctx, A, B):
        ctx.set_materialize_grads(False)     # an undefined gradient reaches backward as None
        a, b = as_csr(A, compress_rows=True), as_csr(B)     # a hypersparse COO A: its kept rows
        ptr, index, values = _backends.spgemm(a, b, A.layout == torch.sparse_coo)
        if any(ctx.needs_input_grad):   # the gradients read both operands' values (one walk gives both)
            save_operands(ctx, [(A, a, True), (B, b, True)])
        return _product(A.layout, ptr, index, values, torch.Size([*A.shape[:-1], B.shape[-1]]))

    @staticmethod
    @none_for_undefined
    def backward(ctx, G):
        refuse_create_graph("sparse_mm with a sparse B", sparse_csr_twice=False)
        ((a, _), (b, _)), _ = load_operands(ctx)
        need_A, need_B = ctx.needs_input_grad
        g = G                                                    # a sparse G: any pattern, checked
        if G.layout != torch.strided:
            g = as_csr(G) if a.rows is None else on_rows(G, a)
        ga, gb = _backends.spgemm_grad(a, b, g, need_A, need_B)
        return (a.grad_like(ga) if need_A else None), (b.grad_like(gb) if need_B else None)
