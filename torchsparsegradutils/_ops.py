"""The kernels as PyTorch custom operators (torch.library), differentiable to any order.

With S the pattern of a sparse operand (row pointers `ptr`, columns `col`, and
`rows` for a hypersparse COO view, see _core/view.py) of shape `shape` holding
values `a` (one entry per stored position):
    tsgu::spmm(a, X)   = S(a) X
    tsgu::spmm_t(a, Y) = S(a)^T Y
    tsgu::sddmm(U, V)  = (dot(U[i,:], V[j,:]) at every stored (i, j))
    tsgu::trisolve(a, B) = M^{-1} B,  M = S(a) triangular (or S(a)^T with transpose)
    tsgu::lse(a)         = log-sum-exp of S(a) by rows, columns, both or whole items
                           (see _backends.lse): L, one value per group
    tsgu::lse_grad(a, L, G)[e] = sum over the groups of entry e of G * exp(a[e] - L)
    tsgu::lse_wsum(a, L, u)[group] = sum over the group's entries e of u[e] * exp(a[e] - L)
and, for rows i of a dense `a` grouped by relation r(i) (offsets `off`, row order
`perm`, from tsgu::group_rows(idx, R) for relations idx, or segments),
    tsgu::grouped_mm(a, M)[i]    = a[i] @ M[r(i)]
    tsgu::grouped_mm_tn(a, G)[r] = sum_{i: r(i) = r} a[i]^T G[i]
Each one's backward is made of the others,
    spmm:     da = sddmm(G, X),   dX = spmm_t(a, G)
    spmm_t:   da = sddmm(Y, G),   dY = spmm(a, G)
    sddmm:    dU = spmm(g, V),    dV = spmm_t(g, U)
    trisolve: dB = trisolve^T(a, G),   da = -sddmm(dB, X) (of M's entries: S's, transposed)
    lse:      da = lse_grad(a, L, G)
    lse_grad: da = u * lse_grad(a, L, G),  dG = lse_wsum(a, L, u),  dL = -G * dG
    lse_wsum: du = lse_grad(a, L, v),  da = u * du,  dL = -v * lse_wsum(a, L, u)
    grouped_mm:    da = grouped_mm(G, M^T),   dM = grouped_mm_tn(a, G)
    grouped_mm_tn: da = grouped_mm(G, H^T),   dG = grouped_mm(a, H)   (H: out's gradient)
so a backward run with create_graph=True records a graph of the same kernels
(second derivatives never densify), and torch.compile traces them as single
nodes with the shapes their fake implementations give.  They take only dense tensors: Dynamo cannot take torch
sparse tensors, so a compiled program passes the components (see SparseCSR).
"""
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from . import _backends
from ._core.view import CSRView, check_arrays, op_args, view_of


@torch.library.custom_op("tsgu::spmm", mutates_args=())
def _spmm(ptr: Tensor, col: Tensor, rows: Optional[Tensor], shape: List[int], a: Tensor, X: Tensor) -> Tensor:
    return _backends.spmm(view_of(ptr, col, a, rows, shape), X)


@torch.library.custom_op("tsgu::spmm_t", mutates_args=())
def _spmm_t(ptr: Tensor, col: Tensor, rows: Optional[Tensor], shape: List[int], a: Tensor, Y: Tensor) -> Tensor:
    return _backends.spmm_t(view_of(ptr, col, a, rows, shape), Y)


@torch.library.custom_op("tsgu::sddmm", mutates_args=())
def _sddmm(ptr: Tensor, col: Tensor, rows: Optional[Tensor], shape: List[int], U: Tensor, V: Tensor) -> Tensor:
    return _backends.sddmm(view_of(ptr, col, None, rows, shape), U, V)


@torch.library.custom_op("tsgu::trisolve", mutates_args=())
def _trisolve(ptr: Tensor, col: Tensor, rows: Optional[Tensor], shape: List[int], a: Tensor, B: Tensor,
              upper: bool, unitriangular: bool, transpose: bool) -> Tensor:
    return _backends.trisolve(view_of(ptr, col, a, rows, shape), B, upper, unitriangular, transpose)


# The fake implementations check the pattern's arrays as the real ones do (view_of),
# so that what the real op refuses never gets an output shape.
@_trisolve.register_fake
def _(ptr, col, rows, shape, a, B, upper, unitriangular, transpose):
    check_arrays(ptr, col, a, shape, rows)
    return torch.empty_like(B)


@_spmm.register_fake
def _(ptr, col, rows, shape, a, X):
    check_arrays(ptr, col, a, shape, rows)
    return X.new_empty((*shape[:-1], X.shape[-1]))


@_spmm_t.register_fake
def _(ptr, col, rows, shape, a, Y):
    check_arrays(ptr, col, a, shape, rows)
    return Y.new_empty((*shape[:-2], shape[-1], Y.shape[-1]))


@_sddmm.register_fake
def _(ptr, col, rows, shape, U, V):
    check_arrays(ptr, col, None, shape, rows)
    return U.new_empty(col.shape)


def _setup(ctx, inputs, output):
    ptr, col, rows, shape, x, y = inputs
    ctx.shape = shape
    ctx.save_for_backward(ptr, col, rows, x, y)


def _spmm_backward(ctx, G):
    ptr, col, rows, a, X = ctx.saved_tensors
    pattern = (ptr, col, rows, ctx.shape)
    da = _sddmm(*pattern, G, X) if ctx.needs_input_grad[4] else None
    dX = _spmm_t(*pattern, a, G) if ctx.needs_input_grad[5] else None
    return None, None, None, None, da, dX


def _spmm_t_backward(ctx, G):
    ptr, col, rows, a, Y = ctx.saved_tensors
    pattern = (ptr, col, rows, ctx.shape)
    da = _sddmm(*pattern, Y, G) if ctx.needs_input_grad[4] else None
    dY = _spmm(*pattern, a, G) if ctx.needs_input_grad[5] else None
    return None, None, None, None, da, dY


def _sddmm_backward(ctx, gg):
    ptr, col, rows, U, V = ctx.saved_tensors
    pattern = (ptr, col, rows, ctx.shape)
    dU = _spmm(*pattern, gg, V) if ctx.needs_input_grad[4] else None
    dV = _spmm_t(*pattern, gg, U) if ctx.needs_input_grad[5] else None
    return None, None, None, None, dU, dV


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
_spmm.register_autograd(_spmm_backward, setup_context=_setup)
_spmm_t.register_autograd(_spmm_t_backward, setup_context=_setup)
_sddmm.register_autograd(_sddmm_backward, setup_context=_setup)


def spmm(view: CSRView, a: Tensor, X: Tensor) -> Tensor:
    """S(a) X on view's pattern, differentiable in a and X."""
    return _spmm(*op_args(view), a, X)


def spmm_t(view: CSRView, a: Tensor, Y: Tensor) -> Tensor:
    """S(a)^T Y on view's pattern, differentiable in a and Y."""
    return _spmm_t(*op_args(view), a, Y)


def trisolve(view: CSRView, a: Tensor, B: Tensor, upper: bool, unitriangular: bool, transpose: bool) -> Tensor:
    """M^{-1} B for M = S(a) triangular (S(a)^T with transpose), differentiable in a and B."""
    return _trisolve(*op_args(view), a, B, upper, unitriangular, transpose)


def sddmm(view: CSRView, U: Tensor, V: Tensor) -> Tensor:
    """(dot(U[i,:], V[j,:]) at view's stored (i, j)), differentiable in U and V."""
    return _sddmm(*op_args(view), U, V)


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


@torch.library.custom_op("tsgu::group_rows", mutates_args=())
def group_rows(idx: Tensor, R: int) -> Tuple[Tensor, Tensor]:
    """(off (R+1,), perm (n,)): the rows grouped by relation idx[i] in [0, R)."""
    return _backends.group_rows(idx, R)


@torch.library.custom_op("tsgu::grouped_mm", mutates_args=())
def grouped_mm(off: Tensor, perm: Optional[Tensor], a: Tensor, M: Tensor) -> Tensor:
    """out[i] = a[i] @ M[r(i)], differentiable in a and M."""
    return _backends.grouped_mm(off, perm, a, M)


@torch.library.custom_op("tsgu::grouped_mm_tn", mutates_args=())
def grouped_mm_tn(off: Tensor, perm: Optional[Tensor], a: Tensor, G: Tensor) -> Tensor:
    """out[r] = sum over the rows i of group r of a[i]^T G[i], differentiable in a and G."""
    return _backends.grouped_mm_tn(off, perm, a, G)


@group_rows.register_fake
def _(idx, R):
    return idx.new_empty(R + 1, dtype=torch.int64), idx.new_empty(idx.shape[0], dtype=torch.int64)


@grouped_mm.register_fake
def _(off, perm, a, M):
    return a.new_empty(a.shape[0], M.shape[2])


@grouped_mm_tn.register_fake
def _(off, perm, a, G):
    return a.new_empty(off.shape[0] - 1, a.shape[1], G.shape[1])


def _grouped_setup(ctx, inputs, output):
    off, perm, a, X = inputs      # each gradient reads the other operand only
    ctx.save_for_backward(off, perm, a if ctx.needs_input_grad[3] else None,
                          X if ctx.needs_input_grad[2] else None)


def _grouped_mm_backward(ctx, G):
    off, perm, a, M = ctx.saved_tensors
    da = grouped_mm(off, perm, G, M.transpose(1, 2)) if ctx.needs_input_grad[2] else None
    dM = grouped_mm_tn(off, perm, a, G) if ctx.needs_input_grad[3] else None
    return None, None, da, dM


def _grouped_mm_tn_backward(ctx, H):
    off, perm, a, G = ctx.saved_tensors
    da = grouped_mm(off, perm, G, H.transpose(1, 2)) if ctx.needs_input_grad[2] else None
    dG = grouped_mm(off, perm, a, H) if ctx.needs_input_grad[3] else None
    return None, None, da, dG


grouped_mm.register_autograd(_grouped_mm_backward, setup_context=_grouped_setup)
grouped_mm_tn.register_autograd(_grouped_mm_tn_backward, setup_context=_grouped_setup)

