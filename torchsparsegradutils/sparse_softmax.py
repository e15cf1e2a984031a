"""sparse_softmax and sparse_log_softmax: softmax over the stored entries of each row
(or column) of a sparse matrix, or of each item of a batch, absent entries left out.

Every layout is read as a CSR view (COO coalesced first, as torch.sparse.softmax does;
CSC as the CSR view of its transpose, rows and columns swapped).  On CPU the kernels
are csrc/softmax_rows.c (max, shifted sum of exps and output, row by row) and
csrc/softmax_grad.c (``y * (g - sum g*y)``, or ``g - exp(y) * sum g`` for the log),
called through _backends.softmax / softmax_grad; columns go through the pattern of the
transpose (csrc/csr_transpose.c).  Other devices take the same steps through PyTorch
scatter ops.  A SparseCSR input goes through the custom operators tsgu::softmax and
tsgu::softmax_grad (_ops/softmax.py), which torch.compile traces and which are differentiable
to any order; a torch sparse tensor through the autograd Function SparseSoftmax, run
eagerly.
"""
from typing import Union

import torch
from torch import Tensor

from . import _backends
from ._core.intake import as_csr
from ._core.saved import load_operand, save_operand
from ._core.sparse_csr import SparseCSR
from ._core.undefined_grad import none_for_undefined
from ._core.validate import (HALF_DTYPES, SUPPORTED_DTYPES, constant_dim, dtype_names, eager_only,
                             refuse_create_graph)
from ._core.view import check_arrays
from ._ops.softmax import softmax

__all__ = ["sparse_softmax", "sparse_log_softmax"]

SOFTMAX_DTYPES = HALF_DTYPES + SUPPORTED_DTYPES
_LAYOUTS = (torch.sparse_coo, torch.sparse_csr, torch.sparse_csc)


class DimensionError(IndexError, ValueError):
    """A ``dim`` out of range: an IndexError as for torch.softmax, and a ValueError."""


def sparse_softmax(A: Union[Tensor, SparseCSR], dim: int = -1) -> Union[Tensor, SparseCSR]:
    r"""Softmax over the stored entries of each row (``dim=-1``) or column (``dim=-2``).

    ``y[i, j] = exp(A[i, j]) / sum_k exp(A[i, k])`` with ``k`` running over row ``i``'s
    stored entries only (absent entries are left out, not zeros): a masked softmax on
    A's pattern, as :func:`torch.sparse.softmax`.  A row without entries stays empty.

    Parameters
    ----------
    A : sparse COO, CSR or CSC tensor, ``(n, m)`` or batched ``(b, n, m)`` (COO with
        three sparse dims, or batched CSR), no dense dimensions; or a
        :class:`~torchsparsegradutils.SparseCSR`, which ``torch.compile`` traces.
        float16, bfloat16 (computed in float32, rounded once), float32 or float64.
        Multi-head: a ``SparseCSR`` whose ``values`` are ``(nnz, H)`` (``col_indices``'
        shape + ``(H,)``, the edge scores of H attention heads, as PyG's GAT holds
        them) takes the softmax of each head on its own, in one kernel call.
    dim : ``-1`` (each row) or ``-2`` (each column); for a 2-D ``A`` also ``1`` / ``0``,
        for a batched one ``2`` / ``1``.  The batch axis cannot be chosen.

    Returns
    -------
    A sparse tensor on A's pattern in A's layout (an uncoalesced COO's result is on the
    coalesced pattern, its duplicates summed first, as :func:`torch.sparse.softmax`),
    or a :class:`SparseCSR` for a ``SparseCSR``.  Differentiable w.r.t. A's values:
    the gradient comes back on A's pattern, never dense (with a ``SparseCSR``, to its
    ``values``, and differentiable again: second derivatives; a torch sparse tensor's
    backward with ``create_graph=True`` raises RuntimeError).

    Raises
    ------
    ValueError
        A dense tensor or a layout other than COO/CSR/CSC, a rank other than 2 or 3, a
        hybrid tensor, ``dim`` naming the batch axis, malformed sparse structure.
    IndexError / ValueError
        ``dim`` out of range (an error that is both).
    TypeError
        Values of another dtype, a ``dim`` that is not an int.

    Examples
    --------
    >>> A = torch.tensor([[0.0, 2.0, 2.0], [1.0, 0.0, 0.0]]).to_sparse()
    >>> sparse_softmax(A).to_dense()      # the absent entries take no share
    tensor([[0.0000, 0.5000, 0.5000],
            [1.0000, 0.0000, 0.0000]])
    """
    return _softmax(A, dim, False, "sparse_softmax")


def sparse_log_softmax(A: Union[Tensor, SparseCSR], dim: int = -1) -> Union[Tensor, SparseCSR]:
    r"""Log-softmax over the stored entries of each row (``dim=-1``) or column (``dim=-2``).

    ``y[i, j] = A[i, j] - log sum_k exp(A[i, k])``, ``k`` over row ``i``'s stored entries,
    as :func:`torch.sparse.log_softmax`.  Arguments, result and errors as
    :func:`sparse_softmax`.

    Examples
    --------
    >>> A = torch.tensor([[0.0, 2.0, 2.0], [1.0, 0.0, 0.0]]).to_sparse()
    >>> sparse_log_softmax(A).values()
    tensor([-0.6931, -0.6931,  0.0000])
    """
    return _softmax(A, dim, True, "sparse_log_softmax")


def _softmax(A, dim, log: bool, name: str):
    by_rows = _check(A, dim, name)
    if isinstance(A, SparseCSR):
        y = softmax(A.view(), A.values, by_rows, log)
        return A._replace(values=y)
    return _softmax_eager(A, by_rows, log)


def _softmax_tensor(A: Tensor, by_rows: bool, log: bool) -> Tensor:
    if A.layout == torch.sparse_csc:         # the CSR of its transpose, rows and columns swapped
        return SparseSoftmax.apply(A.transpose(-2, -1), not by_rows, log).transpose(-2, -1)
    return SparseSoftmax.apply(A, by_rows, log)


_softmax_eager = eager_only(_softmax_tensor)   # torch sparse tensors: a graph break under torch.compile


def _check(A, dim, name: str) -> bool:
    """A's contract; True for a softmax over rows, False over columns."""
    if not isinstance(A, (Tensor, SparseCSR)):
        raise ValueError(f"{name} takes a sparse tensor or a SparseCSR, got {type(A).__name__}")
    if A.layout not in _LAYOUTS:
        hint = "; for a dense tensor use torch.softmax" if A.layout == torch.strided else ""
        raise ValueError(f"{name} takes a sparse COO, CSR or CSC tensor or a SparseCSR, got layout {A.layout}{hint}")
    if A.dim() not in (2, 3):
        raise ValueError(f"{name} takes a 2-D (n, m) or batched 3-D (b, n, m) sparse tensor, got {A.dim()}-D")
    if A.dense_dim() != 0:
        raise ValueError(f"{name} takes a sparse tensor with no dense dimensions, got {A.dense_dim()}")
    if isinstance(A, SparseCSR):
        check_arrays(A.crow_indices, A.col_indices, A.values, A.size, heads=True)
    if A.dtype not in SOFTMAX_DTYPES:
        raise TypeError(f"{name} supports {dtype_names(SOFTMAX_DTYPES)} values, got {A.dtype}")
    if isinstance(dim, bool) or not isinstance(dim, (int, torch.SymInt)):
        raise TypeError(f"{name}: dim must be an int, got {type(dim).__name__}")
    ndim = A.dim()
    d = constant_dim(dim, ndim, DimensionError) % ndim
    if d == 0 and ndim == 3:
        raise ValueError(f"{name}: cannot take the softmax over the batch dimension (0) of a batched 3-D "
                         "sparse tensor; dim must be -1 (rows) or -2 (columns)")
    return d == ndim - 1


class SparseSoftmax(torch.autograd.Function):
    """The eager path of a torch sparse COO/CSR (b, n, m) or (n, m) input: _backends.softmax
    of its CSR view, returned on its pattern; the backward reads the output alone (an
    in-place edit of A's values after the forward cannot change it).  Differentiable
    once: the custom ops of a SparseCSR give second derivatives."""

    @staticmethod
    def forward(ctx, A, by_rows, log):
        ctx.set_materialize_grads(False)     # an undefined gradient reaches backward as None
        view = as_csr(A.detach(), compress_rows=True)
        y = _backends.softmax(view, by_rows, log)
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
