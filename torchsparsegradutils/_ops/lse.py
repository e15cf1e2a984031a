"""Log-sum-exp of a sparse operand's stored values (sparse_logsumexp and friends).

With S the pattern of a sparse operand (see the package's docstring) holding values `a`:
    tsgu::lse(a)         = log-sum-exp of S(a) by rows, columns, both or whole items
                           (see _backends.lse): L, one value per group
    tsgu::lse_grad(a, L, G)[e] = sum over the groups of entry e of G * exp(a[e] - L)
    tsgu::lse_wsum(a, L, u)[group] = sum over the group's entries e of u * exp(a[e] - L)
Each one's backward is made of the others:
    lse:      da = lse_grad(a, L, G)
    lse_grad: da = u * lse_grad(a, L, G),  dG = lse_wsum(a, L, u),  dL = -G * dG
    lse_wsum: du = lse_grad(a, L, v),  da = u * du,  dL = -v * lse_wsum(a, L, u)

run_logsumexp and run_bidir_logsumexp are sparse_logsumexp and sparse_bidir_logsumexp:
a SparseCSR through these ops, which torch.compile traces; a torch sparse tensor through
the autograd Function SparseLogSumExp, run eagerly.
"""
from typing import List

import torch
from torch import Tensor

from .. import _backends
from .._core.intake import as_csr, check_coo
from .._core.saved import load_operand, save_operand
from .._core.sparse_csr import SparseCSR
from .._core.undefined_grad import none_for_undefined
from .._core.validate import SparseSpec, check_sparse, constant_dim, eager_only, refuse_create_graph
from .._core.view import CSRView, check_arrays, hypersparse, view_of


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


def run_logsumexp(spec: SparseSpec, input, dim, keepdim: bool, include_zeros: bool) -> Tensor:
    """sparse_logsumexp of input against its spec."""
    if isinstance(input, SparseCSR):
        return _logsumexp(spec, input, dim, keepdim, include_zeros)
    return _logsumexp_eager(spec, input, dim, keepdim, include_zeros)


def _logsumexp(spec: SparseSpec, input, dim, keepdim: bool, include_zeros: bool) -> Tensor:
    check_sparse(spec, input)
    dims = _normalise_dims(dim, input.dim())
    batched = input.dim() == 3
    if batched and 0 in dims:
        raise NotImplementedError("Cannot reduce the batch dimension (0) of a batched 3-D sparse tensor.")
    last, first = input.dim() - 1, input.dim() - 2
    mode = "all" if dims == [first, last] else "rows" if dims == [last] else "cols"
    out = _reduce(input, mode, include_zeros)
    if not batched:
        out = out[0]
    if keepdim:
        for d in dims:
            out = out.unsqueeze(d)
    return out


_logsumexp_eager = eager_only(_logsumexp)    # torch sparse tensors: a graph break under torch.compile


def run_bidir_logsumexp(spec: SparseSpec, input, keepdim: bool, include_zeros: bool, output_layout: str):
    """sparse_bidir_logsumexp of input against its spec."""
    if isinstance(input, SparseCSR):
        return _bidir_logsumexp(spec, input, keepdim, include_zeros, output_layout)
    return _bidir_logsumexp_eager(spec, input, keepdim, include_zeros, output_layout)


def _bidir_logsumexp(spec: SparseSpec, input, keepdim: bool, include_zeros: bool, output_layout: str):
    check_sparse(spec, input)
    if output_layout not in ("tuple", "padded", "nested"):
        raise ValueError(f"sparse_bidir_logsumexp: unknown output_layout {output_layout!r}; "
                         "expected 'tuple', 'padded' or 'nested'")
    if keepdim and output_layout != "tuple":
        raise ValueError("sparse_bidir_logsumexp: keepdim is only supported with output_layout='tuple'")
    col_lse, row_lse, padded = (_bidir_batched if input.dim() == 3 else _bidir_2d)(input, include_zeros)
    if output_layout == "padded":
        return padded
    if output_layout == "nested":
        return torch.nested.as_nested_tensor([col_lse, row_lse])
    if keepdim:
        col_lse, row_lse = col_lse.unsqueeze(-2), row_lse.unsqueeze(-1)
    return col_lse, row_lse


_bidir_logsumexp_eager = eager_only(_bidir_logsumexp)


def _bidir_2d(input, include_zeros: bool):
    """(col_lse (c,), row_lse (r,), padded (2, G)) of a 2-D input; the first two
    are views of the third, one allocation for all."""
    r, c = input.shape
    padded = _reduce(input, "both", include_zeros)[:, 0]
    return padded[0, :c], padded[1, :r], padded


def _bidir_batched(input, include_zeros: bool):
    """(col_lse (b, c), row_lse (b, r), padded (2, b, G)) of a batched input; views of one allocation."""
    _, r, c = input.shape
    padded = _reduce(input, "both", include_zeros)
    return padded[0, :, :c], padded[1, :, :r], padded


def _reduce(input, mode: str, include_zeros: bool) -> Tensor:
    """The log-sum-exp with a batch axis (shapes: _backends.lse_shape): a SparseCSR
    through the custom op (traced by torch.compile), a torch sparse tensor eagerly."""
    if isinstance(input, SparseCSR):
        return lse(input.view(), input.values, mode, include_zeros)
    return SparseLogSumExp.apply(input, mode, include_zeros)


def _normalise_dims(dim, ndim: int):
    """dim as a sorted list of non-negative dims, with torch.logsumexp's errors."""
    dims = [dim] if isinstance(dim, int) else list(dim)
    if not dims:
        raise RuntimeError("sparse_logsumexp: dim must not be an empty sequence")
    dims = sorted(constant_dim(d, ndim) % ndim for d in dims)
    if len(set(dims)) != len(dims):
        raise RuntimeError("sparse_logsumexp: dim contains a repeated dimension")
    return dims


class SparseLogSumExp(torch.autograd.Function):
    """The eager path of a torch sparse (b, n, m) or (n, m) input: _backends.lse of its CSR
    view (CSC read transposed), always with a batch axis in the output (see
    _backends.lse_shape), and the values gradient on the input's pattern."""

    @staticmethod
    def forward(ctx, input, mode, include_zeros):
        ctx.set_materialize_grads(False)     # an undefined gradient reaches backward as None
        view, transposed = _row_view(input.detach(), mode)
        out = _backends.lse(view, mode, include_zeros, transposed)
        if ctx.needs_input_grad[0]:
            # the values as they were (an in-place edit before backward raises), and the output
            save_operand(ctx, input, view, True, out)
            ctx.transposed, ctx.mode = transposed, mode
        return out

    @staticmethod
    @none_for_undefined
    def backward(ctx, G):
        refuse_create_graph("sparse_logsumexp / sparse_bidir_logsumexp")
        view, _, (out,) = load_operand(ctx)
        grad = view.grad_like(_backends.lse_grad(view, out, G, ctx.mode, ctx.transposed))
        if not ctx.transposed:
            return grad, None, None
        grad = grad.transpose(-2, -1)
        return (grad.coalesce() if grad.layout == torch.sparse_coo else grad), None, None


def _row_view(A: Tensor, mode: str):
    """(CSR view, transposed): CSC is read as the CSR view of its transpose, and so is
    a hypersparse COO with fewer columns than rows when the result has no per-row
    entry (mode "cols" or "all"): its row pointers would be O(rows) where the
    entries and the result are O(nnz + columns).  (The transpose of a COO is not flagged
    coalesced: A's own indices are checked first, as as_csr(A) would.)"""
    if A.layout == torch.sparse_csc or mode in ("cols", "all") and _tall_hypersparse(A):
        if A.layout == torch.sparse_coo:
            check_coo(A)
        return as_csr(A.transpose(-2, -1)), True
    return as_csr(A), False


def _tall_hypersparse(A: Tensor) -> bool:
    """A hypersparse COO A (view.hypersparse) with more rows than columns?"""
    if A.layout != torch.sparse_coo:
        return False
    rows = A.shape[-2] * (A.shape[0] if A.dim() == 3 else 1)
    return hypersparse(rows, A._nnz()) and A.shape[-2] > A.shape[-1]
