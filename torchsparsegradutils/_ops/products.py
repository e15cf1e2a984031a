"""The kernels as PyTorch custom operators (torch.library), differentiable to any order.

With S the pattern of a sparse operand (row pointers `ptr`, columns `col`, and
`rows` for a hypersparse COO view, see _core/view.py) of shape `shape` holding
values `a` (one entry per stored position):
    tsgu::spmm(a, X)   = S(a) X
    tsgu::spmm_t(a, Y) = S(a)^T Y
    tsgu::sddmm(U, V)  = (dot(U[i,:], V[j,:]) at every stored (i, j))
        (each with mean=True for D^-1 S(a), D the rows' entry counts: reduce="mean")
    tsgu::spmm_arg(a, X) = (C, arg): C[i,t] = max (or min) over row i's entries e of
                           a[e] X[j(e),t], arg[i,t] that e (reduce="amax"/"amin"); with
                           arg fixed, C = gather_arg(a, X) = a[arg] X[j(arg), t], and
    tsgu::spmm_t_arg(a, arg, Y)[j,t] = sum of a[e] Y[i,t] over the (i, t) whose arg e has j(e) = j
    tsgu::sddmm_arg(arg, U, V)[e]    = sum of U[i,t] V[j(e),t] over the t whose arg is e
    tsgu::spgemm(a, b)   = (ptr, col, c): the product S(a) T(b) of two patterns, its
                           values c on its own pattern (ptr, col) P
    tsgu::spgemm_grad(a, b, g) = (P(g) T(b)^T at S's stored (i, j), S(a)^T P(g) at T's stored (j, c))
    tsgu::trisolve(a, B) = M^{-1} B,  M = S(a) triangular (or S(a)^T with transpose)
    tsgu::lse(a)         = log-sum-exp of S(a) by rows, columns, both or whole items
                           (see _backends.lse): L, one value per group
    tsgu::lse_grad(a, L, G)[e] = sum over the groups of entry e of G * exp(a[e] - L)
    tsgu::lse_wsum(a, L, u)[group] = sum over the group's entries e of u[e] * exp(a[e] - L)
    tsgu::softmax(a)[e]  = exp(a[e] - L) (log: a[e] - L), L the log-sum-exp of the stored
                           values of e's row (by_rows) or column: y, one per entry
                           (a (nnz, H): each head h on its own, and so the two below)
    tsgu::softmax_grad(y, g) = y * (g - S(g * y)) (log: g - exp(y) * S(g)): its values gradient
    tsgu::softmax_gsum(x)[e] = S(x)[e], the sum of x over e's row (or column)
and, for rows i of a dense `a` grouped by relation r(i) (offsets `off`, row order
`perm`, from tsgu::group_rows(idx, R) for relations idx, or segments),
    tsgu::grouped_mm(a, M)[i]    = a[i] @ M[r(i)]
    tsgu::grouped_mm_tn(a, G)[r] = sum_{i: r(i) = r} a[i]^T G[i]
Each one's backward is made of the others,
    spmm:     da = sddmm(G, X),   dX = spmm_t(a, G)
    spmm_t:   da = sddmm(Y, G),   dY = spmm(a, G)
    sddmm:    dU = spmm(g, V),    dV = spmm_t(g, U)
    spgemm:   (da, db) = spgemm_grad(a, b, dc)   (no second derivative)
    gather_arg (and spmm_arg): da = sddmm_arg(G, X),  dX = spmm_t_arg(a, G)
    spmm_t_arg: da = sddmm_arg(Y, H),  dY = gather_arg(a, H)
    sddmm_arg:  dU = gather_arg(g, V),  dV = spmm_t_arg(g, U)
    trisolve: dB = trisolve^T(a, G),   da = -sddmm(dB, X) (of M's entries: S's, transposed)
    lse:      da = lse_grad(a, L, G)
    lse_grad: da = u * lse_grad(a, L, G),  dG = lse_wsum(a, L, u),  dL = -G * dG
    lse_wsum: du = lse_grad(a, L, v),  da = u * du,  dL = -v * lse_wsum(a, L, u)
    softmax:  da = softmax_grad(y, G)
    softmax_grad (u its output's gradient): softmax: dg = softmax_grad(y, u),
              dy = u * (g - S(g y)) - g * S(u y);  log: dg = u - S(u exp(y)),
              dy = -u * exp(y) * S(g)
    softmax_gsum: dx = softmax_gsum(u)
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

from .. import _backends
from .._core.view import CSRView, check_arrays, kernel_array, op_args, view_of


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


# --------------------------------------------------------- sparse @ sparse (sparse_mm)
# The patterns S (a_ptr, a_col, a_shape) and T (b_ptr, b_col, b_shape), each a SparseCSR's
# (global or batched row pointers); the product's pattern P (ptr, col) has global row
# pointers and int64 columns (see _backends.spgemm).
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


def spmm(view: CSRView, a: Tensor, X: Tensor, mean: bool = False) -> Tensor:
    """S(a) X on view's pattern (D^-1 S(a) X with mean), differentiable in a and X."""
    return _spmm(*op_args(view), a, X, mean)


def spmm_t(view: CSRView, a: Tensor, Y: Tensor, mean: bool = False) -> Tensor:
    """S(a)^T Y on view's pattern ((D^-1 S(a))^T Y with mean), differentiable in a and Y."""
    return _spmm_t(*op_args(view), a, Y, mean)


def trisolve(view: CSRView, a: Tensor, B: Tensor, upper: bool, unitriangular: bool, transpose: bool) -> Tensor:
    """M^{-1} B for M = S(a) triangular (S(a)^T with transpose), differentiable in a and B."""
    return _trisolve(*op_args(view), a, B, upper, unitriangular, transpose)


def sddmm(view: CSRView, U: Tensor, V: Tensor, mean: bool = False) -> Tensor:
    """(dot(U[i,:], V[j,:]) at view's stored (i, j), divided by row i's entry count
    with mean), differentiable in U and V."""
    return _sddmm(*op_args(view), U, V, mean)


# ------------------------------------------------- amax / amin (sparse_mm's reduce)
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


# ------------------------------------- softmax (sparse_softmax, sparse_log_softmax)
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



# ------------------------------------------------------ graph attention (graph_attention)
# The pattern S (n, m) of a 2-D SparseCSR (values unused); x (m, H, F), s (m, H), d (n, H);
# dropout: seed None or an int64 tensor of one element, drop (of 2^24) and scale (see
# _backends.gat); slope LeakyReLU's.
@torch.library.custom_op("tsgu::gat", mutates_args=())
def _gat(ptr: Tensor, col: Tensor, shape: List[int], x: Tensor, s: Tensor, d: Tensor, seed: Optional[Tensor],
         drop: int, scale: float, slope: float) -> Tuple[Tensor, Tensor]:
    return _backends.gat(view_of(ptr, col, None, None, shape), kernel_array(x), kernel_array(s), kernel_array(d),
                         seed, drop, scale, slope)


@torch.library.custom_op("tsgu::gat_grad", mutates_args=())
def _gat_grad(ptr: Tensor, col: Tensor, shape: List[int], x: Tensor, s: Tensor, d: Tensor, seed: Optional[Tensor],
              drop: int, scale: float, slope: float, alpha: Tensor, G: Tensor, galpha: Optional[Tensor]
              ) -> Tuple[Tensor, Tensor, Tensor]:
    return _backends.gat_grad(view_of(ptr, col, None, None, shape), kernel_array(x), kernel_array(s),
                              kernel_array(d), seed, drop, scale, slope, kernel_array(alpha), kernel_array(G),
                              None if galpha is None else kernel_array(galpha))


@_gat.register_fake
def _(ptr, col, shape, x, s, d, seed, drop, scale, slope):
    check_arrays(ptr, col, None, shape)
    return x.new_empty(shape[0], *x.shape[1:]), x.new_empty(col.shape[0], x.shape[1])


@_gat_grad.register_fake
def _(ptr, col, shape, x, s, d, seed, drop, scale, slope, alpha, G, galpha):
    check_arrays(ptr, col, None, shape)
    return torch.empty_like(x), torch.empty_like(s), torch.empty_like(d)


def _gat_setup(ctx, inputs, output):
    ptr, col, shape, x, s, d, seed, drop, scale, slope = inputs
    ctx.shape, ctx.dropout, ctx.slope = shape, (drop, scale), slope
    ctx.save_for_backward(ptr, col, x, s, d, seed, output[1])
    ctx.set_materialize_grads(False)          # an unused alpha's gradient stays None: no (nnz, H) zeros


def _gat_backward(ctx, G, galpha):
    ptr, col, x, s, d, seed, alpha = ctx.saved_tensors
    if G is None:
        G = x.new_zeros(ctx.shape[0], *x.shape[1:])
    gx, gs, gd = _gat_grad(ptr, col, ctx.shape, x, s, d, seed, *ctx.dropout, ctx.slope, alpha, G, galpha)
    need = ctx.needs_input_grad
    return (None, None, None, gx if need[3] else None, gs if need[4] else None, gd if need[5] else None,
            None, None, None, None)


_gat.register_autograd(_gat_backward, setup_context=_gat_setup)


def gat(view: CSRView, x: Tensor, s: Tensor, d: Tensor, seed: Optional[Tensor], drop: int, scale: float,
        slope: float) -> Tuple[Tensor, Tensor]:
    """(out, alpha) of graph attention on view's pattern (see _backends.gat), differentiable
    once in x, s and d (through both outputs)."""
    return _gat(view.ptr, view.col, list(view.shape), x, s, d, seed, drop, scale, slope)
