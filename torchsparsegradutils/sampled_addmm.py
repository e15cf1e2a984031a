"""sampled_addmm: ``beta * A + alpha * (X @ Y)`` evaluated only at A's stored entries.

The product at the pattern is an SDDMM, ``p[e] = dot(X[i, :], Y[:, j])`` for every
stored entry ``e = (i, j)``: _backends.sddmm (csrc/sddmm.c on CPU) reads X's rows
and the rows of ``Y^T`` (``Y.mT`` is a free view when Y is itself a transpose, as
``W.t()``; otherwise a copy of Y's k x m, never anything of size nnz x k; the
eager Function makes it once for the forward and grad_X, the custom op, which
saves the view so that an edit of Y in place is caught, in each).  Its
gradients are the sparse products of the pattern holding G = dL/d(result values):
``grad_X = alpha * G @ Y^T`` (spmm) and ``grad_Y = alpha * X^T @ G`` (spmm_t, as
``(G^T @ X)^T``), and ``grad_A = beta * G`` at the pattern: no dense n x m and no
nnz x k temporary.  A SparseCSR goes through the custom operator tsgu::sddmm
(_ops/products.py), which torch.compile traces and which is differentiable to any order;
a torch sparse tensor through the autograd Function SampledAddmm, run eagerly.
"""
from numbers import Real
from typing import Union

import torch
from torch import Tensor

from . import _backends
from ._core.intake import as_csr
from ._core.saved import load_operand, save_operand
from ._core.sparse_csr import SparseCSR
from ._core.undefined_grad import none_for_undefined
from ._core.validate import SUPPORTED_DTYPES, dtype_names, eager_only, refuse_create_graph
from ._core.view import CSRView, check_arrays, kernel_array
from ._ops.products import sddmm

__all__ = ["sampled_addmm"]


def sampled_addmm(A: Union[Tensor, SparseCSR], X: Tensor, Y: Tensor, beta: float = 1.0,
                  alpha: float = 1.0) -> Union[Tensor, SparseCSR]:
    r"""``beta * A + alpha * (X @ Y)`` at A's stored entries only, on A's pattern.

    PyTorch's :func:`torch.sparse.sampled_addmm` contract, for every layout, with
    gradients for A, X and Y that never densify: ``out[i, j] = beta * A[i, j] +
    alpha * sum_t X[i, t] * Y[t, j]`` for each stored ``(i, j)``; nothing else of
    ``X @ Y`` is computed.  (The scores of graph attention, ``q_i . k_j`` on the
    edges, are ``sampled_addmm(A, Q, K.mT, beta=0)``.)

    Parameters
    ----------
    A : sparse COO (coalesced first, as PyTorch does) or CSR tensor ``(n, m)``, or
        batched ``(b, n, m)`` (batched CSR, or COO with three sparse dims: each item
        with its own nnz), no dense dimensions; or a
        :class:`~torchsparsegradutils.SparseCSR` (which ``torch.compile`` traces).
        Multi-head: a 2-D ``SparseCSR`` whose ``values`` are ``(nnz, H)`` takes
        ``X`` ``(H, n, k)`` and ``Y`` ``(H, k, m)`` and gives values ``(nnz, H)``,
        head ``h`` being ``beta * values[:, h] + alpha * (X[h] @ Y[h])`` at the
        pattern.  ``(nnz, H)`` is the layout of the edge scores that
        :func:`sparse_softmax` takes head by head (and PyG's GAT holds); ``X`` and
        ``Y`` are head-major so that each head's product is one batch item of the
        kernels, reading contiguous rows of ``X[h]`` and of ``Y[h]^T``.
    X : dense ``(n, k)`` (``(b, n, k)`` for a batched A), A's dtype and device.
    Y : dense ``(k, m)`` (``(b, k, m)``).  Read as the rows of ``Y^T``: a ``Y``
        that is a transpose (``W.t()``) is read in place, another is copied once
        (k x m).
    beta, alpha : real numbers.  With ``beta == 0`` A's values are ignored (NaN or
        inf in them do not propagate), as PyTorch does.

    Returns
    -------
    A sparse tensor in A's layout on A's pattern (an uncoalesced COO's coalesced
    pattern), or a :class:`SparseCSR` for a ``SparseCSR``; differentiable w.r.t.
    A (or its values), X and Y.

    Raises
    ------
    ValueError
        A not a sparse COO/CSR tensor or SparseCSR, X or Y not dense, ranks or shapes
        that do not fit, devices that differ, malformed sparse structure.
    TypeError
        A dtype other than float32/float64, dtypes that differ, beta or alpha not a
        real number.

    Examples
    --------
    >>> A = torch.tensor([[1.0, 0.0], [0.0, 2.0]]).to_sparse_csr()
    >>> X, Y = torch.ones(2, 3), torch.ones(3, 2)
    >>> sampled_addmm(A, X, Y, beta=0.5).to_dense()
    tensor([[3.5000, 0.0000],
            [0.0000, 4.0000]])
    """
    heads = _check(A, X, Y, beta, alpha)
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
    """(nnz, H) values of H heads: the H products as one batch of H items on A's pattern
    (the kernels take a batch with one pattern per item: H copies of its indices, the
    size of the result's values)."""
    H, nnz = a.shape[-1], view.col.shape[0]
    heads = CSRView(view.ptr.unsqueeze(0).expand(H, -1).contiguous(),
                    view.col.unsqueeze(0).expand(H, -1).contiguous(), None, H, view.nrows, view.ncols,
                    torch.Size((H, view.nrows, view.ncols)))
    p = sddmm(heads, X, Y.mT).reshape(H, nnz).t()
    return _combine(a, p, beta, alpha)


def _check(A, X, Y, beta, alpha) -> bool:
    """The contract; True for a multi-head SparseCSR."""
    name = "sampled_addmm"
    if not isinstance(A, (Tensor, SparseCSR)):
        raise ValueError(f"{name}: A must be a sparse tensor or a SparseCSR, got {type(A).__name__}")
    if A.layout not in (torch.sparse_coo, torch.sparse_csr):
        hint = "; for a dense A use torch.addmm" if A.layout == torch.strided else ""
        raise ValueError(f"{name}: A must be a sparse COO or CSR tensor or a SparseCSR, got layout {A.layout}{hint}")
    if A.dim() not in (2, 3):
        raise ValueError(f"{name}: A must be 2-D (n, m) or batched 3-D (b, n, m), got {A.dim()}-D")
    heads = False
    if isinstance(A, SparseCSR):
        check_arrays(A.crow_indices, A.col_indices, A.values, A.size, heads=True)
        heads = A.values.dim() > A.col_indices.dim()
        if heads and A.dim() != 2:
            raise ValueError(f"{name}: multi-head values (nnz, H) need a 2-D SparseCSR, got size {tuple(A.size)}")
    elif A.dense_dim() != 0:
        raise ValueError(f"{name}: A must have no dense dimensions (hybrid sparse tensors are not supported), "
                         f"got {A.dense_dim()}")
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
