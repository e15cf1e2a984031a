"""Log-sum-exp (sparse_logsumexp): by row, column, item or both, and its derivatives."""
import torch

from ..._core.view import CSRView
from ._common import global_csr


def lse_groups(view: CSRView, include_zeros: bool, out: torch.Tensor, by_rows: bool) -> None:
    """As cpu.lse_groups."""
    b, count = view.batch, view.nrows if by_rows else view.ncols
    _, rows, cols = global_csr(view)
    full = view.ncols if by_rows else view.nrows
    out[:, :count] = _torch_lse(view.values.reshape(-1), rows if by_rows else cols, b * count,
                                full if include_zeros else None).reshape(b, count)


def lse_items(view: CSRView, include_zeros: bool, out: torch.Tensor) -> None:
    """As cpu.lse_items."""
    rows = torch.empty(view.batch, view.nrows, dtype=out.dtype, device=out.device)
    lse_groups(view, include_zeros, rows, by_rows=True)
    out.copy_(torch.logsumexp(rows, dim=1) if view.nrows else torch.full_like(out, float("-inf")))


def lse_grad(view: CSRView, rows, cols) -> torch.Tensor:
    """As cpu.lse_grad."""
    _, r, c = global_csr(view)
    v = view.values.reshape(-1)
    g = torch.zeros_like(v)
    for pair, group in ((rows, r), (cols, c)):
        if pair is not None:
            lse, grad = (t.reshape(-1) for t in pair)
            g += grad[group] * (v - lse[group]).exp()
    return g.reshape(view.values.shape)


def lse_wsum(A: CSRView, out: torch.Tensor, u: torch.Tensor, mode: str) -> torch.Tensor:
    """s[group] = sum over the group's stored values v of u * exp(v - out[group]), shaped
    like out = lse(A, mode, .., False) (0 in the padding of "both"): the derivative of
    lse_grad w.r.t. its G (second derivatives only, on every device)."""
    _, rows, cols = global_csr(A)
    b, n, m = A.batch, A.nrows, A.ncols
    v, u = A.values.reshape(-1), u.reshape(-1)

    def group_sums(lse: torch.Tensor, group: torch.Tensor, count: int) -> torch.Tensor:
        w = u * (v - lse.reshape(-1)[group]).exp()
        return v.new_zeros(b * count).index_add_(0, group, w).reshape(b, count)

    if mode == "all":
        return group_sums(out, rows // max(n, 1), 1).reshape(b)
    if mode != "both":
        return group_sums(out, rows, n) if mode == "rows" else group_sums(out, cols, m)
    s = torch.zeros_like(out)
    s[1, :, :n], s[0, :, :m] = group_sums(out[1, :, :n], rows, n), group_sums(out[0, :, :m], cols, m)
    return s


def _torch_lse(values: torch.Tensor, group: torch.Tensor, ngroups: int, full) -> torch.Tensor:
    """Per group lse of values; with full, each group also holds full - (its values)
    zeros.  The same shift rule as csrc (tsgu_lse_shift)."""
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
