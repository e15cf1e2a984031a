"""sparse_logsumexp and sparse_bidir_logsumexp: log-sum-exp over the stored values
of a sparse matrix (or a batch of them), by rows, by columns, both, or whole.

Every layout is read as a CSR view without copies (COO coalesced first; CSC as
the CSR view of its transpose, rows and columns swapped).  On CPU the kernels
are csrc/lse_rows.c (per row, and per whole item), csrc/lse_cols.c (per column,
no transpose, no atomics) and csrc/lse_grad.c (the values gradient
``G[group] * exp(v - lse[group])`` written straight into place), called through
_backends.lse / lse_grad.  Other devices (CUDA) take the same steps through PyTorch
scatter ops.  A SparseCSR input goes through the custom operators tsgu::lse and
tsgu::lse_grad (_ops/lse.py), which torch.compile traces; a torch sparse tensor through
the autograd Function SparseLogSumExp, run eagerly.
"""
from typing import Literal, Sequence, Union

import torch
from torch import Tensor

from . import _backends
from ._core.intake import as_csr, check_coo
from ._core.saved import load_operand, save_operand
from ._core.sparse_csr import SparseCSR
from ._core.undefined_grad import none_for_undefined
from ._core.validate import constant_dim, eager_only, refuse_create_graph
from ._core.view import HYPERSPARSE_ROWS_PER_ENTRY, check_arrays
from ._ops.lse import lse

__all__ = ["sparse_logsumexp", "sparse_bidir_logsumexp"]

SUPPORTED_DTYPES = (torch.float32, torch.float64)
_LAYOUTS = (torch.sparse_coo, torch.sparse_csr, torch.sparse_csc)


def sparse_logsumexp(input: Tensor, dim: Union[int, Sequence[int]], keepdim: bool = False,
                     include_zeros: bool = True) -> Tensor:
    r"""Log-sum-exp of a sparse tensor along ``dim``, with :func:`torch.logsumexp`'s shapes.

    Parameters
    ----------
    input : sparse COO, CSR or CSC tensor, ``(r, c)`` or batched ``(b, r, c)`` (each
        slice reduced on its own), float32 or float64, no dense dimensions; or a
        :class:`~torchsparsegradutils.SparseCSR`, which ``torch.compile`` traces (a
        torch sparse tensor breaks the graph there and runs eagerly).
    dim : int or sequence of ints.  2-D: ``1`` (one value per row), ``0`` (one per
        column) or ``[0, 1]`` (a scalar).  3-D: from ``{1, 2}``; the batch axis
        cannot be reduced.  Negative dims count from the end.
    keepdim : keep the reduced dimensions with size 1.
    include_zeros : ``True``: every absent entry counts as a stored 0 (adds
        ``exp(0)``), matching ``torch.logsumexp(input.to_dense(), dim)``.
        ``False``: absent entries are -inf; a group without stored values gives -inf.

    Returns
    -------
    Dense tensor.  Differentiable w.r.t. the stored values: the gradient of a
    value is its softmax weight ``exp(v - lse)`` times the gradient of its group,
    returned on the input's pattern (an uncoalesced COO's on the coalesced one;
    a ``SparseCSR``'s to its ``values``).  With a ``SparseCSR`` the gradient is
    itself differentiable (``create_graph=True``: second derivatives); a torch
    sparse tensor's is not (its backward with ``create_graph=True`` raises
    ``RuntimeError``).

    Raises
    ------
    NotImplementedError
        A layout other than COO/CSR/CSC, a rank other than 2 or 3, or a batched
        input with the batch axis in ``dim``.
    ValueError
        A hybrid sparse tensor (dense dimensions); malformed sparse structure.
    TypeError
        Values other than float32/float64.
    IndexError / RuntimeError
        ``dim`` out of range / empty or repeated, as :func:`torch.logsumexp`.

    Examples
    --------
    >>> A = torch.tensor([[0.0, 2.0], [1.0, 0.0]]).to_sparse()
    >>> sparse_logsumexp(A, dim=1, include_zeros=False)          # absent entries are -inf
    tensor([2., 1.])
    >>> torch.allclose(sparse_logsumexp(A, dim=1), torch.logsumexp(A.to_dense(), dim=1))
    True
    """
    if isinstance(input, SparseCSR):
        return _logsumexp(input, dim, keepdim, include_zeros)
    return _logsumexp_eager(input, dim, keepdim, include_zeros)


def _logsumexp(input, dim, keepdim: bool, include_zeros: bool) -> Tensor:
    _check_input(input, "sparse_logsumexp")
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


def sparse_bidir_logsumexp(input: Tensor, keepdim: bool = False, include_zeros: bool = True,
                           output_layout: Literal["tuple", "padded", "nested"] = "tuple"):
    r"""Column-wise and row-wise log-sum-exp of a sparse tensor in one call.

    For a 2-D input equal to ``(sparse_logsumexp(input, 0), sparse_logsumexp(input, 1))``;
    for a batched ``(b, r, c)`` input to the reductions over dims 1 and 2.

    Parameters
    ----------
    input, include_zeros : as for :func:`sparse_logsumexp`.
    keepdim : keep the reduced dimension (``output_layout="tuple"`` only).
    output_layout : ``"tuple"``: ``(col_lse, row_lse)``, column result first, shapes
        ``(c,)``, ``(r,)`` (batched ``(b, c)``, ``(b, r)``).  ``"padded"``: one tensor
        ``(2, G)`` (batched ``(2, b, G)``), ``G = max(r, c)``, ``[0]`` the column and
        ``[1]`` the row result, each padded with -inf; the tuple's tensors are views
        of it.  ``"nested"``: ``torch.nested.as_nested_tensor([col_lse, row_lse])``.

    Returns
    -------
    A tuple of two dense tensors, or one tensor, as ``output_layout`` says.  Each
    stored value's gradient sums its row's and its column's softmax terms.

    Raises
    ------
    As :func:`sparse_logsumexp`, and ``ValueError`` for an unknown
    ``output_layout`` or ``keepdim=True`` with a layout other than ``"tuple"``.

    Examples
    --------
    >>> A = torch.tensor([[0.0, 2.0], [1.0, 0.0]]).to_sparse()
    >>> cols, rows = sparse_bidir_logsumexp(A, include_zeros=False)
    >>> cols, rows
    (tensor([1., 2.]), tensor([2., 1.]))
    """
    if isinstance(input, SparseCSR):
        return _bidir_logsumexp(input, keepdim, include_zeros, output_layout)
    return _bidir_logsumexp_eager(input, keepdim, include_zeros, output_layout)


def _bidir_logsumexp(input, keepdim: bool, include_zeros: bool, output_layout: str):
    _check_input(input, "sparse_bidir_logsumexp")
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


def _check_input(input, name: str) -> None:
    if not isinstance(input, (Tensor, SparseCSR)) or input.dim() not in (2, 3):
        got = input.dim() if isinstance(input, (Tensor, SparseCSR)) else type(input).__name__
        raise NotImplementedError(f"{name} supports 2-D or batched 3-D sparse tensors, got {got}")
    if input.layout not in _LAYOUTS:
        raise NotImplementedError(f"{name} supports sparse COO, CSR and CSC tensors, got layout {input.layout}")
    if input.dense_dim() != 0:
        raise ValueError(f"{name} requires a sparse tensor with no dense dimensions, got {input.dense_dim()}")
    if isinstance(input, SparseCSR):
        check_arrays(input.crow_indices, input.col_indices, input.values, input.size)
    if input.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{name} supports float32 and float64 values, got {input.dtype}")


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
    """A COO A with more than HYPERSPARSE_ROWS_PER_ENTRY rows per stored entry and
    more rows than columns?"""
    if A.layout != torch.sparse_coo:
        return False
    rows = A.shape[-2] * (A.shape[0] if A.dim() == 3 else 1)
    return rows > HYPERSPARSE_ROWS_PER_ENTRY * (A._nnz() + 1) and A.shape[-2] > A.shape[-1]
