"""The products: S(a) X, S(a)^T Y and the sampled products at S's stored entries.

With S the pattern of a sparse operand (see the package's docstring) holding values `a`:
    tsgu::spmm(a, X)   = S(a) X
    tsgu::spmm_t(a, Y) = S(a)^T Y
    tsgu::sddmm(U, V)  = (dot(U[i,:], V[j,:]) at every stored (i, j))
        (each with mean=True for D^-1 S(a), D the rows' entry counts: reduce="mean")
    tsgu::sddmm_heads(U, V) = (dot(U[h][i,:], V[h][j,:]) at every stored (i, j), for each
        head h): (H, nnz), H heads on one pattern (multi-head sampled_addmm)
Each one's backward is made of the others:
    spmm:     da = sddmm(G, X),   dX = spmm_t(a, G)
    spmm_t:   da = sddmm(Y, G),   dY = spmm(a, G)
    sddmm:    dU = spmm(g, V),    dV = spmm_t(g, U)
    sddmm_heads: the same, on H copies of the pattern as a batch
"""
from functools import partial
from typing import List, Optional

import torch
from torch import Tensor

from .. import _backends
from .._core.intake import as_csr, values_of
from .._core.sparse_csr import SparseCSR
from .._core.saved import load_operand, save_operand
from .._core.undefined_grad import none_for_undefined
from .._core.validate import (ProductSpec, check_dense_a, check_operands, check_product, check_reduce, eager_only,
                              records_graph)
from .._core.view import CSRView, check_arrays, head_copies, op_args, view_of
from .arg import sddmm_arg, spmm_arg, spmm_t_arg
from .spgemm import sparse_sparse_mm


@torch.library.custom_op("tsgu::spmm", mutates_args=())
def _spmm(ptr: Tensor, col: Tensor, rows: Optional[Tensor], shape: List[int], a: Tensor, X: Tensor,
          mean: bool = False) -> Tensor:
    return _backends.spmm(view_of(ptr, col, a, rows, shape), X, mean)


@torch.library.custom_op("tsgu::spmm_t", mutates_args=())
def _spmm_t(ptr: Tensor, col: Tensor, rows: Optional[Tensor], shape: List[int], a: Tensor, Y: Tensor,
            mean: bool = False) -> Tensor:
    return _backends.spmm_t(view_of(ptr, col, a, rows, shape), Y, mean)


@torch.library.custom_op("tsgu::sddmm", mutates_args=())
def _sddmm(ptr: Tensor, col: Tensor, rows: Optional[Tensor], shape: List[int], U: Tensor, V: Tensor,
           mean: bool = False) -> Tensor:
    return _backends.sddmm(view_of(ptr, col, None, rows, shape), U, V, mean)


@_spmm.register_fake
def _(ptr, col, rows, shape, a, X, mean=False):
    check_arrays(ptr, col, a, shape, rows)
    return X.new_empty((*shape[:-1], X.shape[-1]))


@_spmm_t.register_fake
def _(ptr, col, rows, shape, a, Y, mean=False):
    check_arrays(ptr, col, a, shape, rows)
    return Y.new_empty((*shape[:-2], shape[-1], Y.shape[-1]))


@_sddmm.register_fake
def _(ptr, col, rows, shape, U, V, mean=False):
    check_arrays(ptr, col, None, shape, rows)
    return U.new_empty(col.shape)


def _setup(ctx, inputs, output):
    ptr, col, rows, shape, x, y, mean = inputs
    ctx.shape, ctx.mean = shape, mean
    ctx.save_for_backward(ptr, col, rows, x, y)


# mean: the matrix is D^-1 S(a) in all three, so each one's backward keeps it
def _spmm_backward(ctx, G):
    ptr, col, rows, a, X = ctx.saved_tensors
    pattern = (ptr, col, rows, ctx.shape)
    da = _sddmm(*pattern, G, X, ctx.mean) if ctx.needs_input_grad[4] else None
    dX = _spmm_t(*pattern, a, G, ctx.mean) if ctx.needs_input_grad[5] else None
    return None, None, None, None, da, dX, None


def _spmm_t_backward(ctx, G):
    ptr, col, rows, a, Y = ctx.saved_tensors
    pattern = (ptr, col, rows, ctx.shape)
    da = _sddmm(*pattern, Y, G, ctx.mean) if ctx.needs_input_grad[4] else None
    dY = _spmm(*pattern, a, G, ctx.mean) if ctx.needs_input_grad[5] else None
    return None, None, None, None, da, dY, None


def _sddmm_backward(ctx, gg):
    ptr, col, rows, U, V = ctx.saved_tensors
    pattern = (ptr, col, rows, ctx.shape)
    dU = _spmm(*pattern, gg, V, ctx.mean) if ctx.needs_input_grad[4] else None
    dV = _spmm_t(*pattern, gg, U, ctx.mean) if ctx.needs_input_grad[5] else None
    return None, None, None, None, dU, dV, None


_spmm.register_autograd(_spmm_backward, setup_context=_setup)
_spmm_t.register_autograd(_spmm_t_backward, setup_context=_setup)
_sddmm.register_autograd(_sddmm_backward, setup_context=_setup)


@torch.library.custom_op("tsgu::sddmm_heads", mutates_args=())
def _sddmm_heads(ptr: Tensor, col: Tensor, shape: List[int], U: Tensor, V: Tensor) -> Tensor:
    return _backends.sddmm_heads(view_of(ptr, col, None, None, shape), U, V)


@_sddmm_heads.register_fake
def _(ptr, col, shape, U, V):
    check_arrays(ptr, col, None, shape)
    return U.new_empty((U.shape[0], col.shape[0]))


def _sddmm_heads_setup(ctx, inputs, output):
    ptr, col, shape, U, V = inputs
    ctx.shape = shape
    ctx.save_for_backward(ptr, col, U, V)


def _sddmm_heads_backward(ctx, gg):
    ptr, col, U, V = ctx.saved_tensors
    pattern = op_args(head_copies(ptr, col, U.shape[0], ctx.shape))
    dU = _spmm(*pattern, gg, V) if ctx.needs_input_grad[3] else None
    dV = _spmm_t(*pattern, gg, U) if ctx.needs_input_grad[4] else None
    return None, None, None, dU, dV


_sddmm_heads.register_autograd(_sddmm_heads_backward, setup_context=_sddmm_heads_setup)


def spmm(view: CSRView, a: Tensor, X: Tensor, mean: bool = False) -> Tensor:
    """S(a) X on view's pattern (D^-1 S(a) X with mean), differentiable in a and X."""
    return _spmm(*op_args(view), a, X, mean)


def spmm_t(view: CSRView, a: Tensor, Y: Tensor, mean: bool = False) -> Tensor:
    """S(a)^T Y on view's pattern ((D^-1 S(a))^T Y with mean), differentiable in a and Y."""
    return _spmm_t(*op_args(view), a, Y, mean)


def sddmm(view: CSRView, U: Tensor, V: Tensor, mean: bool = False) -> Tensor:
    """(dot(U[i,:], V[j,:]) at view's stored (i, j), divided by row i's entry count
    with mean), differentiable in U and V."""
    return _sddmm(*op_args(view), U, V, mean)


def sddmm_heads(view: CSRView, U: Tensor, V: Tensor) -> Tensor:
    """(dot(U[h][i,:], V[h][j,:]) at the 2-D view's stored (i, j), for each head h of U
    (H, n, k) and V (H, m, k)): (H, nnz), differentiable in U and V."""
    return _sddmm_heads(view.ptr, view.col, list(view.shape), U, V)


def spmm_reduce(view: CSRView, a: Tensor, X: Tensor, reduce: str) -> Tensor:
    """S(a) X with sparse_mm's reduce ("sum", "mean", "amax" or "amin") on view's pattern,
    differentiable in a and X (through tsgu::spmm, or tsgu::spmm_arg for the extrema)."""
    if reduce in ("sum", "mean"):
        return spmm(view, a, X, reduce == "mean")
    return spmm_arg(view, a, X, reduce == "amin")[0]


# ---------------------------------------------------------------- sparse_mm
_is_compiling = torch.compiler.is_compiling     # one global read on the hot path, not three


def run_mm(spec: ProductSpec, A, B, reduce: str):
    """sparse_mm of A and B against spec: a SparseCSR A with a dense B through the custom
    ops where a graph is recorded or traced, else straight to the route; with a sparse B
    sparse_sparse_mm; a torch tensor A tensor_mm."""
    if reduce != "sum":
        reduce = check_reduce(reduce, B)
    sparse_b = isinstance(B, SparseCSR) or (isinstance(B, torch.Tensor) and B.layout is not torch.strided)
    if isinstance(A, SparseCSR) and not sparse_b:
        operands = check_operands(spec, A, B)
        values = A.values
        if _is_compiling() or records_graph(values, B):
            check_product(spec, A, B, operands)
            return spmm_reduce(A.view(), values, B, reduce)
        # what the custom operator runs, without its dispatch (nothing to trace or record)
        return _backends.spmm_arrays(A.crow_indices, A.col_indices, values, operands[0], B, reduce,
                                     partial(check_product, spec, A, B, operands))
    if sparse_b and not (isinstance(A, torch.Tensor) and A.layout is torch.strided):   # dense @ sparse: tensor_mm
        return sparse_sparse_mm(spec, A, B)
    return tensor_mm(spec, A, B, reduce)


@eager_only
def tensor_mm(spec: ProductSpec, A: torch.Tensor, B, reduce: str) -> torch.Tensor:
    """sparse_mm of a torch tensor A: sparse (COO or CSR) with a dense B, through
    SparseMatMul where a graph is recorded, else straight to the route; or dense, as
    torch.sparse.mm takes it (_dense_a_mm)."""
    if isinstance(A, torch.Tensor) and A.layout is torch.strided:
        return _dense_a_mm(spec, A, B, reduce)
    operands = check_operands(spec, A, B)
    if records_graph(A, B):
        check_product(spec, A, B, operands)
        return SparseMatMul.apply(A, B, reduce)
    # what the Function's forward does, without a graph
    return _backends.spmm_tensor(A, B, operands[0], reduce, partial(check_product, spec, A, B, operands))


def _dense_a_mm(spec: ProductSpec, X: torch.Tensor, B, reduce: str) -> torch.Tensor:
    """A dense X times B: with a dense B their product (torch.matmul); with a sparse B
    (COO, CSR or SparseCSR) C = (B^T X^T)^T on B's pattern, so that B's gradient is
    sparse, at B's stored entries (X^T G there), as torch.sparse.mm's is."""
    if reduce != "sum":
        raise ValueError(f"reduce={reduce!r} needs a sparse A: with a dense A, sparse_mm takes reduce='sum' "
                         "only (as torch.sparse.mm does)")
    check_dense_a(spec, X, B)
    if isinstance(B, SparseCSR):
        return spmm_t(B.view(), B.values, X.mT).mT.contiguous()     # row-major, as torch.sparse.mm's
    if B.layout is torch.strided:
        return torch.matmul(X, B)
    return DenseSparseMatMul.apply(X, B)


class DenseSparseMatMul(torch.autograd.Function):
    """The autograd Function behind sparse_mm(X, B) with a dense X and a torch sparse B
    (validate first): C = X @ B = (B^T X^T)^T on B's pattern; grad_X = (B G^T)^T and
    grad_B = X^T G at B's stored entries."""

    @staticmethod
    def forward(ctx, X, B):
        ctx.set_materialize_grads(False)     # an undefined gradient reaches backward as None
        view = as_csr(B, compress_rows=True)         # reads B (no graph is recorded in forward)
        C = _backends.spmm_t(view, X.mT).mT.contiguous()            # row-major, as torch.sparse.mm's
        # grad_X reads B's values; grad_B reads only the pattern and X
        save_operand(ctx, B, view, ctx.needs_input_grad[0], X if ctx.needs_input_grad[1] else None)
        return C

    @staticmethod
    @none_for_undefined
    def backward(ctx, G):
        view, B, (X,) = load_operand(ctx)
        need_X, need_B = ctx.needs_input_grad
        Gt = G.mT
        if torch.is_grad_enabled():  # create_graph=True: record a graph of the same sparse kernels
            grad_X = spmm(view, values_of(B, view.values), Gt).mT if need_X else None
            grad_B = view.grad_like(sddmm(view, X.mT, Gt)) if need_B else None
        else:
            grad_X = _backends.spmm(view, Gt).mT if need_X else None
            grad_B = view.grad_like(_backends.sddmm(view, X.mT, Gt)) if need_B else None
        return grad_X, grad_B


class SparseMatMul(torch.autograd.Function):
    """The autograd Function behind :func:`sparse_mm` (validate with run_mm first):
    A @ B with reduce "sum" (the default), "mean", "amax" or "amin"."""

    @staticmethod
    def forward(ctx, A, B, reduce="sum"):
        ctx.set_materialize_grads(False)     # an undefined gradient reaches backward as None
        view = as_csr(A, compress_rows=True)         # reads A (no graph is recorded in forward)
        arg = None
        if reduce == "sum":
            C = _backends.spmm(view, B)
        elif reduce == "mean":
            C = _backends.spmm(view, B, mean=True)
        else:
            C, arg = _backends.spmm_arg(view, B, reduce == "amin")
        ctx.mean = reduce == "mean"
        # grad_B = A^T G reads A's values; grad_A reads only the pattern (and arg)
        save_operand(ctx, A, view, ctx.needs_input_grad[1], B if ctx.needs_input_grad[0] else None, arg)
        return C

    @staticmethod
    @none_for_undefined
    def backward(ctx, G):
        view, A, (B, arg) = load_operand(ctx)
        need_A, need_B = ctx.needs_input_grad[:2]
        grad_A = grad_B = None
        if torch.is_grad_enabled():  # create_graph=True: record a graph of the same sparse kernels
            values = values_of(A, view.values) if need_B else None
            if arg is not None:
                grad_A = view.grad_like(sddmm_arg(view, arg, G, B)) if need_A else None
                grad_B = spmm_t_arg(view, values, arg, G) if need_B else None
            else:
                grad_A = view.grad_like(sddmm(view, G, B, ctx.mean)) if need_A else None
                grad_B = spmm_t(view, values, G, ctx.mean) if need_B else None
        elif arg is not None:
            grad_A = view.grad_like(_backends.sddmm_arg(view, arg, G, B)) if need_A else None
            grad_B = _backends.spmm_t_arg(view, arg, G) if need_B else None
        else:
            grad_A = view.grad_like(_backends.sddmm(view, G, B, ctx.mean)) if need_A else None
            grad_B = _backends.spmm_t(view, G, ctx.mean) if need_B else None
        return grad_A, grad_B, None
