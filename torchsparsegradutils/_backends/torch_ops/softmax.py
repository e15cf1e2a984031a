"""Softmax (sparse_softmax, sparse_log_softmax) over rows or columns, and its gradient."""
import torch

from ..._core.view import CSRView
from ._common import _HALF, global_csr


def _groups(A: CSRView, by_rows: bool):
    """(group of each entry, number of groups): the global row or column."""
    _, rows, cols = global_csr(A._replace(values=None))
    return (rows, A.batch * A.nrows) if by_rows else (cols, A.batch * A.ncols)


def softmax(A: CSRView, by_rows: bool, log: bool) -> torch.Tensor:
    """As cpu.softmax: the group's max M (not clamped: a group holding +inf, or only
    -inf, is NaN throughout), its sum S of exp(v - M), then (v - M) - log S (its
    exp); values (nnz,) or (nnz, H)."""
    v = A.values
    if v.dtype in _HALF:
        return softmax(A._replace(values=v.float()), by_rows, log).to(v.dtype)
    group, count = _groups(A, by_rows)
    v = _by_entry(v, A.col)
    at = group.unsqueeze(1).expand(v.shape)
    mx = v.new_full((count, v.shape[1]), float("-inf")).scatter_reduce_(0, at, v, "amax")
    shifted = v - mx[group]
    d = shifted - v.new_zeros(mx.shape).index_add_(0, group, shifted.exp()).log()[group]
    return (d if log else d.exp()).reshape(A.values.shape)


def softmax_grad(A: CSRView, y: torch.Tensor, g: torch.Tensor, by_rows: bool, log: bool) -> torch.Tensor:
    """As cpu.softmax_grad."""
    if y.dtype in _HALF:
        return softmax_grad(A, y.float(), g.float(), by_rows, log).to(y.dtype)
    g = g.to(y.dtype)
    if log:
        return g - y.exp() * group_sum(A, g, by_rows)
    return y * (g - group_sum(A, g * y, by_rows))


def group_sum(A: CSRView, x: torch.Tensor, by_rows: bool) -> torch.Tensor:
    """S(x)[e] = the sum of x over e's group (row or column), shaped like x (each head
    on its own for an (nnz, H) x)."""
    group, count = _groups(A, by_rows)
    flat = _by_entry(x, A.col)
    return flat.new_zeros(count, flat.shape[1]).index_add_(0, group, flat).index_select(0, group).reshape(x.shape)


def _by_entry(x: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
    """x, one value per stored entry (shaped like col) or H (col's shape + (H,)), as
    (nnz, 1) or (nnz, H)."""
    return x.reshape(-1, x.shape[-1] if x.dim() > col.dim() else 1)
