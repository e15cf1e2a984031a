"""The triangular solve (sparse_triangular_solve).

With S the pattern of a sparse operand (see the package's docstring) holding values `a`:
    tsgu::trisolve(a, B) = M^{-1} B,  M = S(a) triangular (or S(a)^T with transpose)
with the derivative (made of the products'):
    trisolve: dB = trisolve^T(a, G),   da = -sddmm(dB, X) (of M's entries: S's, transposed)

run_trisolve is sparse_triangular_solve: a SparseCSR through this op, which torch.compile
traces; a torch sparse tensor through the autograd Function SparseTriangularSolve, run
eagerly.
"""
from typing import List, Optional

import torch
from torch import Tensor

from .. import _backends
from .._core.intake import as_csr
from .._core.saved import load_operand, save_operand
from .._core.sparse_csr import SparseCSR
from .._core.undefined_grad import none_for_undefined
from .._core.validate import ProductSpec, check_product, eager_only, records_graph, refuse_create_graph
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


def run_trisolve(spec: ProductSpec, A, B: Tensor, upper: bool, unitriangular: bool, transpose: bool) -> Tensor:
    """sparse_triangular_solve of A and B against spec."""
    flags = (bool(upper), bool(unitriangular), bool(transpose))
    if not isinstance(A, SparseCSR):
        return _triangular_solve_torch(spec, A, B, *flags)
    shape = check_product(spec, A, B)
    values = A.values
    if torch.compiler.is_compiling() or records_graph(values, B):
        return trisolve(A.view(), values, B, *flags)
    # what the custom operator runs, without its dispatch (nothing to trace or record)
    return _backends.trisolve_arrays(A.crow_indices, A.col_indices, values, shape, B, *flags)


@eager_only
def _triangular_solve_torch(spec: ProductSpec, A: Tensor, B: Tensor, *flags) -> Tensor:
    shape = check_product(spec, A, B)
    if torch.is_grad_enabled() and (A.requires_grad or B.requires_grad):
        return SparseTriangularSolve.apply(A, B, *flags)
    # nothing to save for a backward (and no graph to record): a CSR A's own arrays
    if A.layout is torch.sparse_csr:
        return _backends.trisolve_arrays(A.crow_indices(), A.col_indices(), A.values(), shape, B, *flags)
    return _backends.trisolve(as_csr(A), B, *flags)


class SparseTriangularSolve(torch.autograd.Function):
    """The autograd Function behind :func:`sparse_triangular_solve` (validate with run_trisolve first)."""

    @staticmethod
    def forward(ctx, A, B, upper, unitriangular, transpose):
        ctx.set_materialize_grads(False)     # an undefined gradient reaches backward as None
        view = as_csr(A.detach())
        X = _backends.trisolve(view, B, upper, unitriangular, transpose)
        ctx.flags = (upper, unitriangular, transpose)
        save_operand(ctx, A, view, True, X)
        return X

    @staticmethod
    @none_for_undefined
    def backward(ctx, G):
        refuse_create_graph("sparse_triangular_solve")
        view, _, (X,) = load_operand(ctx)
        if not (ctx.needs_input_grad[0] or ctx.needs_input_grad[1]):
            return None, None, None, None, None
        g, grad_B = trisolve_backward(op_args(view), view.values, X, G, ctx.flags, ctx.needs_input_grad[0])
        grad_A = view.grad_like(g) if g is not None else None
        return grad_A, grad_B if ctx.needs_input_grad[1] else None, None, None, None
