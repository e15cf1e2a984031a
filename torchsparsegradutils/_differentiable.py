"""Differentiable-to-any-order forms of the three kernels, on a fixed pattern.

With S the pattern of a CSRView holding values `a` (a dense vector, one entry per
stored position):
    spmm(view, a, X)   = S(a) X
    spmm_t(view, a, Y) = S(a)^T Y
    sddmm(view, U, V)  = (dot(U[i,:], V[j,:]) at every stored (i, j))
Each one's backward is made of the others,
    spmm:   da = sddmm(G, X),   dX = spmm_t(a, G)
    spmm_t: da = sddmm(Y, G),   dY = spmm(a, G)
    sddmm:  dU = spmm(g, V),    dV = spmm_t(g, U)
so a backward run with create_graph=True records a graph of the same sparse
kernels: second derivatives (Hessian-vector products) never densify either.
Without create_graph the backward calls the C kernels directly.
"""
import torch

from . import _kernels
from ._csr import CSRView, load_view, save_view


def spmm(view: CSRView, a: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
    return _SpMM.apply(view.ptr, view.col, a, X, view)


def spmm_t(view: CSRView, a: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    return _SpMMT.apply(view.ptr, view.col, a, Y, view)


def sddmm(view: CSRView, U: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    return _SDDMM.apply(view.ptr, view.col, U, V, view)


def _with(view: CSRView, ptr, col, values=None) -> CSRView:
    if values is not None:
        values = values.detach().contiguous()
    return view._replace(ptr=ptr, col=col, values=values)


class _SpMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, ptr, col, a, X, view):
        save_view(ctx, _with(view, ptr, col), a, X)
        return _kernels.spmm(_with(view, ptr, col, a), X.detach())

    @staticmethod
    def backward(ctx, G):
        v, (a, X) = load_view(ctx)
        da = sddmm(v, G, X) if ctx.needs_input_grad[2] else None
        dX = spmm_t(v, a, G) if ctx.needs_input_grad[3] else None
        return None, None, da, dX, None


class _SpMMT(torch.autograd.Function):
    @staticmethod
    def forward(ctx, ptr, col, a, Y, view):
        save_view(ctx, _with(view, ptr, col), a, Y)
        return _kernels.spmm_t(_with(view, ptr, col, a), Y.detach())

    @staticmethod
    def backward(ctx, G):
        v, (a, Y) = load_view(ctx)
        da = sddmm(v, Y, G) if ctx.needs_input_grad[2] else None
        dY = spmm(v, a, G) if ctx.needs_input_grad[3] else None
        return None, None, da, dY, None


class _SDDMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, ptr, col, U, V, view):
        save_view(ctx, _with(view, ptr, col), U, V)
        return _kernels.sddmm(_with(view, ptr, col), U.detach(), V.detach())

    @staticmethod
    def backward(ctx, gg):
        v, (U, V) = load_view(ctx)
        dU = spmm(v, gg, V) if ctx.needs_input_grad[2] else None
        dV = spmm_t(v, gg, U) if ctx.needs_input_grad[3] else None
        return None, None, dU, dV, None
