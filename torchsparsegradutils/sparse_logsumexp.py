"""sparse_logsumexp and sparse_bidir_logsumexp: log-sum-exp over the stored values
of a sparse matrix (or a batch of them), by rows, by columns, both, or whole.

Every layout is read as a CSR view without copies (COO coalesced first; CSC as
the CSR view of its transpose, rows and columns swapped).  On CPU the kernels
are csrc/lse_rows.c (per row, and per whole item), csrc/lse_cols.c (per column,
no transpose, no atomics) and csrc/lse_grad.c (the values gradient
``G[group] * exp(v - lse[group])`` written straight into place).  Other devices
(CUDA) take the same steps through PyTorch scatter ops.
"""
from typing import Literal, Sequence, Union

import torch
from torch import Tensor

from . import _C, _kernels
from ._csr import as_csr, load_operand, plain, save_operand

__all__ = ["sparse_logsumexp", "sparse_bidir_logsumexp"]

SUPPORTED_DTYPES = (torch.float32, torch.float64)
_LAYOUTS = (torch.sparse_coo, torch.sparse_csr, torch.sparse_csc)


def sparse_logsumexp(input: Tensor, dim: Union[int, Sequence[int]], keepdim: bool = False,
                     include_zeros: bool = True) -> Tensor:
    r"""Log-sum-exp of a sparse tensor along ``dim``, with :func:`torch.logsumexp`'s shapes.

    Parameters
    ----------
    input : sparse COO, CSR or CSC tensor, ``(r, c)`` or batched ``(b, r, c)`` (each
        slice reduced on its own), float32 or float64, no dense dimensions.
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
    returned on the input's pattern (an uncoalesced COO's on the coalesced one).

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

    >>> A = torch.tensor([[0.0, 2.0], [1.0, 0.0]]).to_sparse()
    >>> sparse_logsumexp(A, dim=1, include_zeros=False)          # absent entries are -inf
    tensor([2., 1.])
    >>> torch.allclose(sparse_logsumexp(A, dim=1), torch.logsumexp(A.to_dense(), dim=1))
    True
    """
    _check_input(input, "sparse_logsumexp")
    dims = _normalise_dims(dim, input.dim())
    batched = input.dim() == 3
    if batched and 0 in dims:
        raise NotImplementedError("Cannot reduce the batch dimension (0) of a batched 3-D sparse tensor.")
    last, first = input.dim() - 1, input.dim() - 2
    mode = "all" if dims == [first, last] else "rows" if dims == [last] else "cols"
    out = SparseLogSumExp.apply(input, mode, include_zeros)
    if not batched:
        out = out[0]
    if keepdim:
        for d in dims:
            out = out.unsqueeze(d)
    return out


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

    >>> A = torch.tensor([[0.0, 2.0], [1.0, 0.0]]).to_sparse()
    >>> cols, rows = sparse_bidir_logsumexp(A, include_zeros=False)
    >>> cols, rows
    (tensor([1., 2.]), tensor([2., 1.]))
    """
    _check_input(input, "sparse_bidir_logsumexp")
    if output_layout not in ("tuple", "padded", "nested"):
        raise ValueError(f"sparse_bidir_logsumexp: unknown output_layout {output_layout!r}; "
                         "expected 'tuple', 'padded' or 'nested'")
    if keepdim and output_layout != "tuple":
        raise ValueError("sparse_bidir_logsumexp: keepdim is only supported with output_layout='tuple'")
    batched = input.dim() == 3
    col_lse, row_lse, padded = (_bidir_batched if batched else _bidir_2d)(input, include_zeros)
    if output_layout == "padded":
        return padded
    if output_layout == "nested":
        return torch.nested.as_nested_tensor([col_lse, row_lse])
    if keepdim:
        col_lse, row_lse = col_lse.unsqueeze(-2), row_lse.unsqueeze(-1)
    return col_lse, row_lse


def _bidir_2d(input: Tensor, include_zeros: bool):
    """(col_lse (c,), row_lse (r,), padded (2, G)) of a 2-D input; the first two
    are views of the third, one allocation for all."""
    r, c = input.shape
    padded = SparseLogSumExp.apply(input, "both", include_zeros)[:, 0]
    return padded[0, :c], padded[1, :r], padded


def _bidir_batched(input: Tensor, include_zeros: bool):
    """(col_lse (b, c), row_lse (b, r), padded (2, b, G)) of a batched input; views of one allocation."""
    _, r, c = input.shape
    padded = SparseLogSumExp.apply(input, "both", include_zeros)
    return padded[0, :, :c], padded[1, :, :r], padded


def _check_input(input, name: str) -> None:
    if not isinstance(input, Tensor) or input.dim() not in (2, 3):
        got = input.dim() if isinstance(input, Tensor) else type(input).__name__
        raise NotImplementedError(f"{name} supports 2-D or batched 3-D sparse tensors, got {got}")
    if input.layout not in _LAYOUTS:
        raise NotImplementedError(f"{name} supports sparse COO, CSR and CSC tensors, got layout {input.layout}")
    if input.dense_dim() != 0:
        raise ValueError(f"{name} requires a sparse tensor with no dense dimensions, got {input.dense_dim()}")
    if input.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{name} supports float32 and float64 values, got {input.dtype}")


def _normalise_dims(dim, ndim: int):
    """dim as a sorted list of non-negative dims, with torch.logsumexp's errors."""
    dims = [dim] if isinstance(dim, int) else list(dim)
    if not dims:
        raise RuntimeError("sparse_logsumexp: dim must not be an empty sequence")
    for d in dims:
        if not -ndim <= d < ndim:
            raise IndexError(f"Dimension out of range (expected to be in range of [{-ndim}, {ndim - 1}], but got {d})")
    dims = sorted(d % ndim for d in dims)
    if len(set(dims)) != len(dims):
        raise RuntimeError("sparse_logsumexp: dim contains a repeated dimension")
    return dims


class SparseLogSumExp(torch.autograd.Function):
    """Log-sum-exp of a sparse (b, n, m) or (n, m) input, always with a batch axis in
    the output: mode "rows" (b, n), "cols" (b, m), "all" (b,), "both" (2, b, G) with
    [0] the columns and [1] the rows, -inf padded to G = max(n, m)."""

    @staticmethod
    def forward(ctx, input, mode, include_zeros):
        view, transposed = _row_view(input.detach())
        b = view.batch
        n, m = (view.ncols, view.nrows) if transposed else (view.nrows, view.ncols)   # the user's
        if mode == "both":
            out = torch.full((2, b, max(n, m)), float("-inf"), dtype=input.dtype, device=input.device)
            user_rows, user_cols = out[1], out[0]
        elif mode == "all":
            out = torch.empty(b, dtype=input.dtype, device=input.device)
            user_rows = user_cols = None
        else:
            out = torch.empty(b, n if mode == "rows" else m, dtype=input.dtype, device=input.device)
            user_rows, user_cols = (out, None) if mode == "rows" else (None, out)
        view_rows, view_cols = (user_cols, user_rows) if transposed else (user_rows, user_cols)
        if mode == "all":
            _lse_items(view, include_zeros, out)
        if view_rows is not None:
            _lse_groups(view, include_zeros, view_rows, by_rows=True)
        if view_cols is not None:
            _lse_groups(view, include_zeros, view_cols, by_rows=False)
        if ctx.needs_input_grad[0]:
            # the values as they were (an in-place edit before backward raises), and the output
            save_operand(ctx, input, view, True, out)
            ctx.transposed, ctx.mode, ctx.user_shape = transposed, mode, (n, m)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, G):
        view, _, (out,) = load_operand(ctx)
        n, m = ctx.user_shape
        if ctx.mode == "all":      # every row of an item carries the item's lse and gradient
            rows, cols = (out[:, None].expand(-1, view.nrows), G[:, None].expand(-1, view.nrows)), None
        else:                      # (lse, grad) per direction of the user's matrix
            if ctx.mode == "both":
                user_rows, user_cols = (out[1, :, :n], G[1, :, :n]), (out[0, :, :m], G[0, :, :m])
            else:
                user_rows, user_cols = ((out, G), None) if ctx.mode == "rows" else (None, (out, G))
            rows, cols = (user_cols, user_rows) if ctx.transposed else (user_rows, user_cols)
        g = _lse_grad(view, rows, cols)
        grad = view.grad_like(g)
        return (grad.transpose(-2, -1) if ctx.transposed else grad), None, None


def _row_view(A: Tensor):
    """(CSR view, transposed): CSC is read as the CSR view of its transpose."""
    if A.layout == torch.sparse_csc:
        return as_csr(A.transpose(-2, -1)), True
    return as_csr(A), False


def _lse_groups(view, include_zeros: bool, out: Tensor, by_rows: bool) -> None:
    """out[k, g] = lse of row (by_rows) or column g of item k of the view; out is
    (b, w) with w at least the group count, written in place."""
    if _kernels._use_c(view.values):
        args = (view.ptr, view.col, view.values, view.batch, view.nrows, view.ncols, include_zeros, out)
        if by_rows:
            _C.lse_rows(*args, None, torch.get_num_threads())
        else:
            _C.lse_cols(*args, torch.get_num_threads())
        return
    b, count = view.batch, view.nrows if by_rows else view.ncols
    _, rows, cols = _kernels._global_csr(view)
    full = view.ncols if by_rows else view.nrows
    out[:, :count] = _torch_lse(view.values.reshape(-1), rows if by_rows else cols, b * count,
                                full if include_zeros else None).reshape(b, count)


def _lse_items(view, include_zeros: bool, out: Tensor) -> None:
    """out[k] = lse of the whole item k: of its row results, folded in row order."""
    rows = torch.empty(view.batch, view.nrows, dtype=out.dtype, device=out.device)
    if _kernels._use_c(view.values):
        _C.lse_rows(view.ptr, view.col, view.values, view.batch, view.nrows, view.ncols, include_zeros,
                    rows, out.view(1, -1), torch.get_num_threads())
    else:
        _lse_groups(view, include_zeros, rows, by_rows=True)
        out.copy_(torch.logsumexp(rows, dim=1) if view.nrows else torch.full_like(out, float("-inf")))


def _lse_grad(view, rows, cols) -> Tensor:
    """d(sum Gr * row lse + Gc * col lse)/d values of the view, shaped like its values;
    rows and cols are (lse, grad) pairs of (b, n) and (b, m) tensors, or None."""
    if _kernels._use_c(view.values):
        g = torch.empty(1, view.values.numel(), dtype=view.values.dtype)
        arrays = [plain(t).contiguous() if pair is not None else None
                  for pair in (rows, cols) for t in (pair or (None, None))]
        _C.lse_grad(view.ptr, view.col, view.values, view.batch, view.nrows, view.ncols, *arrays, g,
                    torch.get_num_threads())
        return g.reshape(view.values.shape)
    _, r, c = _kernels._global_csr(view)
    v = view.values.reshape(-1)
    g = torch.zeros_like(v)
    for pair, group in ((rows, r), (cols, c)):
        if pair is not None:
            lse, grad = (t.reshape(-1) for t in pair)
            g += grad[group] * (v - lse[group]).exp()
    return g.reshape(view.values.shape)


def _torch_lse(values: Tensor, group: Tensor, ngroups: int, full) -> Tensor:
    """Per group lse of values (PyTorch ops); with full, each group also holds
    full - (its values) zeros.  The same shift rule as csrc (tsgu_lse_shift)."""
    shift = torch.full((ngroups,), float("-inf"), dtype=values.dtype, device=values.device)
    shift.scatter_reduce_(0, group, values, reduce="amax")
    zeros = None
    if full is not None:
        zeros = (full - torch.bincount(group, minlength=ngroups)).to(values.dtype)
        shift = torch.where(zeros > 0, shift.clamp(min=0), shift)
    shift = torch.where(shift.isfinite(), shift, torch.zeros_like(shift))
    s = torch.zeros_like(shift).scatter_add_(0, group, (values - shift[group]).exp())
    if zeros is not None:
        s = s + torch.where(zeros > 0, zeros * (-shift).exp(), torch.zeros_like(s))   # no 0 * inf
    return shift + s.log()
