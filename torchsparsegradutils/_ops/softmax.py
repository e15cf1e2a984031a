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

run_softmax is sparse_softmax and sparse_log_softmax: a SparseCSR through these ops,
which torch.compile traces; a torch sparse tensor through the autograd Function
SparseSoftmax, run eagerly.
"""
from typing import List

import torch
from torch import Tensor

from .. import _backends
from .._core.saved import load_operand, save_operand
from .._core.sparse_csr import SparseCSR
from .._core.undefined_grad import none_for_undefined
from .._core.validate import SparseSpec, check_sparse, constant_dim, eager_only, refuse_create_graph
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


class DimensionError(IndexError, ValueError):
    """A ``dim`` out of range: an IndexError as for torch.softmax, and a ValueError."""


def run_softmax(spec: SparseSpec, A, dim, log: bool):
    """sparse_softmax (sparse_log_softmax with log) of A against its spec."""
    check_sparse(spec, A)
    by_rows = _by_rows(spec.name, A.dim(), dim)
    if isinstance(A, SparseCSR):
        return A._replace(values=softmax(A.view(), A.values, by_rows, log))
    return _softmax_eager(A, by_rows, log)


def _by_rows(name: str, ndim: int, dim) -> bool:
    """True for a softmax over rows, False over columns; dim's errors."""
    if isinstance(dim, bool) or not isinstance(dim, (int, torch.SymInt)):
        raise TypeError(f"{name}: dim must be an int, got {type(dim).__name__}")
    d = constant_dim(dim, ndim, DimensionError) % ndim
    if d == 0 and ndim == 3:
        raise ValueError(f"{name}: cannot take the softmax over the batch dimension (0) of a batched 3-D "
                         "sparse tensor; dim must be -1 (rows) or -2 (columns)")
    return d == ndim - 1


def _softmax_tensor(A: Tensor, by_rows: bool, log: bool) -> Tensor:
    if A.layout == torch.sparse_csc:         # the CSR of its transpose, rows and columns swapped
        return SparseSoftmax.apply(A.transpose(-2, -1), not by_rows, log).transpose(-2, -1)
    return SparseSoftmax.apply(A, by_rows, log)


_softmax_eager = eager_only(_softmax_tensor)   # torch sparse tensors: a graph break under torch.compile


class SparseSoftmax(torch.autograd.Function):
    """The eager path of a torch sparse COO/CSR (b, n, m) or (n, m) input: the softmax of
    its CSR view (_backends.softmax_tensor, which makes the view), returned on its
    pattern; the backward reads the output alone (an in-place edit of A's values after
    the forward cannot change it).  Differentiable once: the custom ops of a SparseCSR
    give second derivatives."""

    @staticmethod
    def forward(ctx, A, by_rows, log):
        ctx.set_materialize_grads(False)     # an undefined gradient reaches backward as None
        view, y = _backends.softmax_tensor(A.detach(), by_rows, log)
        if ctx.needs_input_grad[0]:
            save_operand(ctx, A, view, False, y)
            ctx.by_rows, ctx.log = by_rows, log
        return view.grad_like(y)

    @staticmethod
    @none_for_undefined
    def backward(ctx, G):
        refuse_create_graph("sparse_softmax / sparse_log_softmax")
        view, _, (y,) = load_operand(ctx)
        g = view.values_at(G).reshape(y.shape)
        return view.grad_like(_backends.softmax_grad(view, y, g, ctx.by_rows, ctx.log)), None, None
