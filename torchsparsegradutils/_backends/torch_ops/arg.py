"""amax / amin (sparse_mm's reduce): the products with the entry each extreme
comes from (arg), and their derivatives with arg fixed."""
import torch

from ..._core.native import STATUS
from ..._core.view import CSRView
from ._common import _HALF, global_csr


def spmm_arg(A: CSRView, B: torch.Tensor, is_min: bool, need_arg: bool):
    """(C, arg) as cpu.spmm_arg gives them (PyTorch's tie and NaN rule: the first entry
    of a tie, the last NaN product), by the scatter formulation: the nnz x p products,
    scatter_reduce'd by row, then the entry that gives each extreme."""
    if B.dtype in _HALF:
        C, arg = spmm_arg(A._replace(values=A.values.float()), B.float(), is_min, need_arg)
        return C.to(B.dtype), arg
    A2, rows, cols = global_csr(A)
    ptr = A2.crow_indices()
    R, p, nnz = A.batch * A.nrows, B.shape[-1], rows.numel()
    P = A2.values().unsqueeze(1) * B.reshape(A.batch * A.ncols, p).index_select(0, cols)
    idx = rows.unsqueeze(1).expand(-1, p)
    start = float("inf") if is_min else float("-inf")
    best = P.new_full((R, p), start).scatter_reduce_(0, idx, P, "amin" if is_min else "amax")
    empty = (ptr[1:] == ptr[:-1]).unsqueeze(1)
    shape = (A.batch, A.nrows, p) if B.dim() == 3 else (A.nrows, p)
    arg = None
    if need_arg:
        e = torch.arange(nnz, device=P.device).unsqueeze(1).expand(-1, p)
        first = e.new_full((R, p), nnz).scatter_reduce_(0, idx, e.masked_fill(P != best[rows], nnz), "amin")
        last_nan = e.new_full((R, p), -1).scatter_reduce_(0, idx, e.masked_fill(~P.isnan(), -1), "amax")
        pick = torch.where(best.isnan(), last_nan, first) - ptr[:-1].unsqueeze(1)
        arg = pick.masked_fill(best == start, -1).to(torch.int32).reshape(shape)   # no entry taken
    return best.masked_fill(empty, 0).reshape(shape), arg


def _arg_entries(A2: torch.Tensor, arg: torch.Tensor):
    """(r, t, e) for the output elements (r, t) whose arg names an entry, e its flat
    index; ValueError where an arg names no entry of its row (as the C kernels)."""
    ptr = A2.crow_indices()
    arg = arg.reshape(ptr.numel() - 1, arg.shape[-1]).long()
    if bool(((arg < -1) | (arg >= (ptr[1:] - ptr[:-1]).unsqueeze(1))).any()):
        raise ValueError(STATUS["EARG"])
    r, t = (arg >= 0).nonzero(as_tuple=True)
    return r, t, ptr[r] + arg[r, t]


def spmm_t_arg(A: CSRView, arg: torch.Tensor, G: torch.Tensor) -> torch.Tensor:
    """As cpu.spmm_t_arg."""
    if G.dtype in _HALF:
        return spmm_t_arg(A._replace(values=A.values.float()), arg, G.float()).to(G.dtype)
    A2, _, cols = global_csr(A)
    r, t, e = _arg_entries(A2, arg)
    p = G.shape[-1]
    out = G.new_zeros(A.batch * A.ncols, p)
    out.index_put_((cols[e], t), A2.values()[e] * G.reshape(A.batch * A.nrows, p)[r, t], accumulate=True)
    return out.reshape((A.batch, A.ncols, p) if G.dim() == 3 else (A.ncols, p))


def sddmm_arg(A: CSRView, arg: torch.Tensor, G: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """As cpu.sddmm_arg."""
    if G.dtype in _HALF:
        return sddmm_arg(A, arg, G.float(), B.float()).to(G.dtype)
    A2, _, cols = global_csr(A)
    r, t, e = _arg_entries(A2, arg)
    p = G.shape[-1]
    g = G.new_zeros(cols.numel())
    G2, B2 = G.reshape(A.batch * A.nrows, p), B.reshape(A.batch * A.ncols, p)
    g.index_put_((e,), G2[r, t] * B2[cols[e], t], accumulate=True)
    return g.reshape(A.col.shape)


def gather_arg(A: CSRView, arg: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
    """out[k][i,t] = A.val[e] * X[k][A.col[e],t] for e the arg entry of (k, i, t), 0
    where there is none: spmm_arg's output as a function of A's values and X with arg
    fixed (its derivatives are sddmm_arg and spmm_t_arg; for second derivatives only)."""
    if X.dtype in _HALF:
        return gather_arg(A._replace(values=A.values.float()), arg, X.float()).to(X.dtype)
    A2, _, cols = global_csr(A)
    r, t, e = _arg_entries(A2, arg)
    p = X.shape[-1]
    out = X.new_zeros(A.batch * A.nrows, p)
    out[r, t] = A2.values()[e] * X.reshape(A.batch * A.ncols, p)[cols[e], t]
    return out.reshape((A.batch, A.nrows, p) if X.dim() == 3 else (A.nrows, p))
