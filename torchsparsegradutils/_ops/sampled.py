"""sampled_addmm: ``beta * A + alpha * (X @ Y)`` at A's stored entries, the SDDMM of
products.py (tsgu::sddmm) combined with A's values.

run_sampled_addmm is sampled_addmm: a SparseCSR through tsgu::sddmm, which torch.compile
traces and which is differentiable to any order; a torch sparse tensor through the
autograd Function SampledAddmm, run eagerly.
"""
from numbers import Real

import torch
from torch import Tensor

from .. import _backends
from .._core.intake import as_csr
from .._core.saved import load_operand, save_operand
from .._core.sparse_csr import SparseCSR
from .._core.undefined_grad import none_for_undefined
from .._core.validate import SUPPORTED_DTYPES, SparseSpec, check_sparse, dtype_names, eager_only, refuse_create_graph
from .._core.view import CSRView, kernel_array
from .products import sddmm, sddmm_heads


def run_sampled_addmm(spec: SparseSpec, A, X: Tensor, Y: Tensor, beta, alpha):
    """sampled_addmm of A, X and Y against spec."""
    check_sparse(spec, A)
    heads = _check_factors(spec.name, A, X, Y, beta, alpha)
    if isinstance(A, SparseCSR):
        view = A.view()
        if heads:
            return A._replace(values=_multi_head(view, A.values, X, Y, beta, alpha))
        return A._replace(values=_combine(A.values, sddmm(view, X, Y.mT), beta, alpha))
    return _sampled_addmm_eager(A, X, Y, beta, alpha)


def _combine(a: Tensor, p: Tensor, beta, alpha) -> Tensor:
    """beta * a + alpha * p, a left out when beta is 0 (as PyTorch: its NaNs do not spread)."""
    p = p if alpha == 1 else alpha * p
    if beta == 0:
        return p
    return p + (a if beta == 1 else beta * a)


def _multi_head(view: CSRView, a: Tensor, X: Tensor, Y: Tensor, beta, alpha) -> Tensor:
    """(nnz, H) values of H heads: the H products on A's one pattern (tsgu::sddmm_heads,
    (H, nnz): its transpose is read in place by the combination)."""
    return _combine(a, sddmm_heads(view, X, Y.mT).t(), beta, alpha)


def _check_factors(name: str, A, X, Y, beta, alpha) -> bool:
    """What the spec leaves to the op: a multi-head SparseCSR's rank, X and Y against A,
    the dtypes and devices, beta and alpha.  True for a multi-head SparseCSR."""
    heads = isinstance(A, SparseCSR) and A.values.dim() > A.col_indices.dim()
    if heads and A.dim() != 2:
        raise ValueError(f"{name}: multi-head values (nnz, H) need a 2-D SparseCSR, got size {tuple(A.size)}")
    for M, which in ((X, "X"), (Y, "Y")):
        if not isinstance(M, Tensor) or M.layout != torch.strided:
            got = M.layout if isinstance(M, Tensor) else type(M).__name__
            raise ValueError(f"{name}: {which} must be a dense (strided) tensor, got {got}")
    want = 3 if heads else A.dim()
    if X.dim() != want or Y.dim() != want:
        what = "(H, n, k) and (H, k, m) for values of H heads" if heads else f"{want}-D like A"
        raise ValueError(f"{name}: X and Y must be {what}, got {X.dim()}-D and {Y.dim()}-D")
    n, m = A.shape[-2], A.shape[-1]
    batch = (A.values.shape[-1],) if heads else tuple(A.shape[:-2])
    if tuple(X.shape[:-2]) != batch or tuple(Y.shape[:-2]) != batch or X.shape[-2] != n or Y.shape[-1] != m \
            or X.shape[-1] != Y.shape[-2]:
        lead = "H, " if heads else "b, " if batch else ""
        raise ValueError(f"{name}: for A of size {tuple(A.shape)}{' with ' + str(batch[0]) + ' heads' if heads else ''}"
                         f", X must be ({lead}{n}, k) and Y ({lead}k, {m}); got X {tuple(X.shape)} and "
                         f"Y {tuple(Y.shape)}")
    dtype, device = A.dtype, A.device
    if dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{name} supports {dtype_names(SUPPORTED_DTYPES)} values, got A of dtype {dtype}")
    if X.dtype != dtype or Y.dtype != dtype:
        raise TypeError(f"{name}: A, X and Y must have one dtype, got {dtype}, {X.dtype} and {Y.dtype}")
    if X.device != device or Y.device != device:
        raise ValueError(f"{name}: A, X and Y must be on one device, got {device}, {X.device} and {Y.device}")
    for s, which in ((beta, "beta"), (alpha, "alpha")):
        if isinstance(s, bool) or not isinstance(s, (Real, torch.SymFloat, torch.SymInt)):
            raise TypeError(f"{name}: {which} must be a real number, got {type(s).__name__}")
    return heads


def _sampled_addmm_tensor(A: Tensor, X: Tensor, Y: Tensor, beta, alpha) -> Tensor:
    return SampledAddmm.apply(A, X, Y, beta, alpha)


_sampled_addmm_eager = eager_only(_sampled_addmm_tensor)   # torch sparse tensors: a graph break under compile


class SampledAddmm(torch.autograd.Function):
    """The eager path of a torch sparse COO/CSR A: the SDDMM of A's CSR view
    (_backends.sddmm) combined with A's values, returned on A's pattern; the
    backward: beta * G at the pattern for A, spmm / spmm_t of G's values on A's
    pattern for X and Y.  Differentiable once (a SparseCSR gives second derivatives)."""

    @staticmethod
    def forward(ctx, A, X, Y, beta, alpha):
        ctx.set_materialize_grads(False)     # an undefined gradient reaches backward as None
        view = as_csr(A.detach(), compress_rows=True)
        Yt = Y.detach().mT.contiguous()
        values = _combine(view.values, _backends.sddmm(view, X.detach(), Yt).reshape(view.values.shape), beta,
                          alpha)
        need_x, need_y = ctx.needs_input_grad[1:3]    # Y saved with Yt: its edits in place are caught
        save_operand(ctx, A, view, False, X if need_y else None, Y if need_x else None, Yt if need_x else None)
        ctx.beta, ctx.alpha = beta, alpha
        return view.grad_like(values)

    @staticmethod
    @none_for_undefined
    def backward(ctx, G):
        refuse_create_graph("sampled_addmm")
        view, _, (X, _, Yt) = load_operand(ctx)
        g = kernel_array(view.values_at(G))
        need_a, need_x, need_y = ctx.needs_input_grad[:3]
        gview = view._replace(values=g if ctx.alpha == 1 else ctx.alpha * g)
        gA = view.grad_like(g if ctx.beta == 1 else ctx.beta * g) if need_a else None
        gX = _backends.spmm(gview, Yt) if need_x else None
        gY = _backends.spmm_t(gview, X).mT if need_y else None
        return gA, gX, gY, None, None
