"""sparse_mm's products in Triton: the sum and the mean (D^-1 A, D the rows' entry
counts), and the extremes amax/amin with the entry that gives each (arg), with their
backward.  Signatures as cpu.py's.  Each output row is one program's (a loop over the
row's entries, BLOCK_E at a time); the sums over A's columns (spmm_t, spmm_t_arg) are
rows of the transpose's pattern, so nothing is accumulated atomically.

amax/amin follow csrc/spmm_arg.c: products in entry order, the first of a tie, a NaN
product always taken (so the last NaN wins), an empty row 0 with arg -1, a row whose
products never beat the start value (-inf for amax) keeps it with arg -1; 16-bit
values are multiplied and compared in float32 and rounded once."""
import torch
import triton
import triton.language as tl

from ..._core.view import CSRView, item_rows
from ._common import BLOCK_E, acc_type, block, pattern, transpose


def _out(A: CSRView, X: torch.Tensor, rows: int, dtype=None) -> torch.Tensor:
    """An output of `rows` rows per batch item, 3-D where X is."""
    shape = (A.batch, rows, X.shape[-1]) if X.dim() == 3 else (rows, X.shape[-1])
    return torch.empty(shape, dtype=dtype or X.dtype, device=X.device)


def _rows2(X: torch.Tensor) -> torch.Tensor:
    """X as the contiguous 2-D stack of its items' rows."""
    return item_rows(X).contiguous()


# ------------------------------------------------------------------ sums (and means)
@triton.jit
def _spmm_kernel(ptr, idx, perm, val, optr, X, out, p, MEAN: tl.constexpr, HAS_PERM: tl.constexpr,
                 BE: tl.constexpr, BP: tl.constexpr, ACC: tl.constexpr):
    """out[r, t] = sum over r's entries e of val[e] X[idx[e], t].  HAS_PERM: the pattern
    is a transpose's, its entry e holding value val[perm[e]].  MEAN 1: the sum divided
    by r's entry count; 2: each value divided by its row idx[e]'s count in optr."""
    r = tl.program_id(0)
    t = tl.program_id(1) * BP + tl.arange(0, BP)
    tm = t < p
    start = tl.load(ptr + r)
    end = tl.load(ptr + r + 1)
    acc = tl.zeros((BP,), ACC)
    for e0 in range(start, end, BE):
        e = e0 + tl.arange(0, BE)
        em = e < end
        j = tl.load(idx + e, mask=em, other=0)
        src = e
        if HAS_PERM:
            src = tl.load(perm + e, mask=em, other=0)
        v = tl.load(val + src, mask=em, other=0).to(ACC)
        if MEAN == 2:
            v = v / (tl.load(optr + j + 1, mask=em, other=1) - tl.load(optr + j, mask=em, other=0)).to(ACC)
        x = tl.load(X + j[:, None] * p + t[None, :], mask=em[:, None] & tm[None, :], other=0).to(ACC)
        acc += tl.sum(v[:, None] * x, axis=0)
    if MEAN == 1:
        acc = acc / tl.maximum(end - start, 1).to(ACC)
    tl.store(out + r * p + t, acc.to(out.dtype.element_ty), mask=tm)


def _spmm_launch(ptr, idx, perm, val, optr, X2, out2, mean: int):
    R, p = out2.shape[0], out2.shape[1]
    if R == 0 or p == 0:
        return
    BP = min(block(p), 64)
    _spmm_kernel[(R, triton.cdiv(p, BP))](ptr, idx, perm, val, optr, X2, out2, p, MEAN=mean,
                                          HAS_PERM=perm is not None, BE=BLOCK_E, BP=BP, ACC=acc_type(X2.dtype))


def spmm(A: CSRView, B: torch.Tensor, mean: bool = False) -> torch.Tensor:
    """C = A @ B for every batch item (with mean: D^-1 A @ B)."""
    P = pattern(A)
    C = _out(A, B, A.nrows)
    _spmm_launch(P.ptr, P.col, None, P.values, None, _rows2(B), item_rows(C), 1 if mean else 0)
    return C


def spmm_t(A: CSRView, G: torch.Tensor, mean: bool = False) -> torch.Tensor:
    """A^T @ G for every batch item (with mean: (D^-1 A)^T @ G), by A's columns."""
    P = pattern(A)
    tptr, trow, perm = transpose(P)
    out = _out(A, G, A.ncols)
    _spmm_launch(tptr, trow, perm, P.values, P.ptr, _rows2(G), item_rows(out), 2 if mean else 0)
    return out


@triton.jit
def _sddmm_kernel(ptr, col, arg, G, B, g, p, MEAN: tl.constexpr, HAS_ARG: tl.constexpr, BE: tl.constexpr,
                  BP: tl.constexpr, ACC: tl.constexpr):
    """g[e] = sum over t of G[r, t] B[col[e], t] for the entries e of row r; HAS_ARG: only
    the t whose arg[r, t] is e's offset in the row; MEAN: divided by r's entry count."""
    r = tl.program_id(0)
    start = tl.load(ptr + r)
    end = tl.load(ptr + r + 1)
    for e0 in range(start, end, BE):
        e = e0 + tl.arange(0, BE)
        em = e < end
        j = tl.load(col + e, mask=em, other=0)
        acc = tl.zeros((BE,), ACC)
        for t0 in range(0, p, BP):
            t = t0 + tl.arange(0, BP)
            tm = t < p
            m2 = em[:, None] & tm[None, :]
            gr = tl.load(G + r * p + t, mask=tm, other=0).to(ACC)
            x = tl.load(B + j[:, None] * p + t[None, :], mask=m2, other=0).to(ACC)
            prod = gr[None, :] * x
            if HAS_ARG:
                a = tl.load(arg + r * p + t, mask=tm, other=-1)
                prod = tl.where(a[None, :] == (e - start)[:, None], prod, 0)
            acc += tl.sum(prod, axis=1)
        if MEAN:
            acc = acc / (end - start).to(ACC)
        tl.store(g + e, acc.to(g.dtype.element_ty), mask=em)


def _sddmm_launch(A: CSRView, arg, G, B, mean: bool) -> torch.Tensor:
    P = pattern(A)
    g = torch.empty(P.col.shape, dtype=G.dtype, device=G.device)
    p = G.shape[-1]
    if P.nrows and P.col.numel():
        _sddmm_kernel[(P.nrows,)](P.ptr, P.col, arg, _rows2(G), _rows2(B), g, p, MEAN=mean, HAS_ARG=arg is not None,
                                  BE=BLOCK_E, BP=min(block(p), 64), ACC=acc_type(G.dtype))
    return g.reshape(A.col.shape)


def sddmm(A: CSRView, G: torch.Tensor, B: torch.Tensor, mean: bool = False) -> torch.Tensor:
    """g[e] = dot(G[k][i,:], B[k][j,:]) at every stored entry (divided by row i's count with
    mean), shaped like A.col."""
    return _sddmm_launch(A, None, G, B, mean)


# ------------------------------------------------------------------- amax / amin
@triton.jit
def _spmm_arg_kernel(ptr, col, val, X, out, arg, p, IS_MIN: tl.constexpr, NEED_ARG: tl.constexpr,
                     BE: tl.constexpr, BP: tl.constexpr, ACC: tl.constexpr):
    """out[r, t] = the max (min) over r's entries of val[e] X[col[e], t], arg its offset in
    the row (see the module's docstring for ties and NaN)."""
    r = tl.program_id(0)
    t = tl.program_id(1) * BP + tl.arange(0, BP)
    tm = t < p
    start = tl.load(ptr + r)
    end = tl.load(ptr + r + 1)
    worst = float("inf") if IS_MIN else float("-inf")
    best = tl.full((BP,), worst, ACC)
    at = tl.full((BP,), -1, tl.int64)
    nan_at = tl.full((BP,), -1, tl.int64)
    for e0 in range(start, end, BE):
        e = e0 + tl.arange(0, BE)
        em = e < end
        j = tl.load(col + e, mask=em, other=0)
        v = tl.load(val + e, mask=em, other=0).to(ACC)
        x = tl.load(X + j[:, None] * p + t[None, :], mask=em[:, None] & tm[None, :], other=0).to(ACC)
        prod = v[:, None] * x
        off = (e - start).to(tl.int64)[:, None] + tl.zeros((BE, BP), tl.int64)
        isnan = (prod != prod) & em[:, None]
        nan_at = tl.maximum(nan_at, tl.max(tl.where(isnan, off, -1), axis=0))
        ok = em[:, None] & (prod == prod)
        cand = tl.where(ok, prod, worst)
        cbest = tl.min(cand, axis=0) if IS_MIN else tl.max(cand, axis=0)
        cat = tl.min(tl.where(ok & (cand == cbest[None, :]), off, 2147483647), axis=0)
        take = (cbest < best) if IS_MIN else (cbest > best)      # strictly better: earlier ties stay
        best = tl.where(take, cbest, best)
        at = tl.where(take, cat, at)
    has_nan = nan_at >= 0
    res = tl.where(has_nan, float("nan"), best)
    res = tl.where(end > start, res, 0.0)
    tl.store(out + r * p + t, res.to(out.dtype.element_ty), mask=tm)
    if NEED_ARG:
        tl.store(arg + r * p + t, tl.where(has_nan, nan_at, at).to(tl.int32), mask=tm)


def spmm_arg(A: CSRView, B: torch.Tensor, is_min: bool, need_arg: bool):
    """(C, arg) as cpu.spmm_arg gives them: arg int32 of C's shape, or None unless need_arg."""
    P = pattern(A)
    C = _out(A, B, A.nrows)
    arg = torch.empty(C.shape, dtype=torch.int32, device=B.device) if need_arg else None
    p = B.shape[-1]
    if P.nrows and p:
        BP = min(block(p), 64)
        _spmm_arg_kernel[(P.nrows, triton.cdiv(p, BP))](P.ptr, P.col, P.values, _rows2(B), C, arg, p, IS_MIN=is_min,
                                                         NEED_ARG=need_arg, BE=BLOCK_E, BP=BP,
                                                         ACC=acc_type(B.dtype))
    return C, arg


@triton.jit
def _spmm_t_arg_kernel(tptr, trow, perm, ptr, val, arg, G, out, p, BE: tl.constexpr, BP: tl.constexpr,
                       ACC: tl.constexpr):
    """out[j, t] = sum over column j's entries (rows i, entry perm[e] of A) whose row's
    arg[i, t] names them, of val * G[i, t]: by A's columns, in increasing row order."""
    c = tl.program_id(0)
    t = tl.program_id(1) * BP + tl.arange(0, BP)
    tm = t < p
    start = tl.load(tptr + c)
    end = tl.load(tptr + c + 1)
    acc = tl.zeros((BP,), ACC)
    for e0 in range(start, end, BE):
        e = e0 + tl.arange(0, BE)
        em = e < end
        i = tl.load(trow + e, mask=em, other=0)
        src = tl.load(perm + e, mask=em, other=0)
        off = src - tl.load(ptr + i, mask=em, other=0)
        v = tl.load(val + src, mask=em, other=0).to(ACC)
        m2 = em[:, None] & tm[None, :]
        a = tl.load(arg + i[:, None] * p + t[None, :], mask=m2, other=-1)
        gv = tl.load(G + i[:, None] * p + t[None, :], mask=m2, other=0).to(ACC)
        acc += tl.sum(tl.where(a == off[:, None], v[:, None] * gv, 0), axis=0)
    tl.store(out + c * p + t, acc.to(out.dtype.element_ty), mask=tm)


def spmm_t_arg(A: CSRView, arg: torch.Tensor, G: torch.Tensor) -> torch.Tensor:
    """out[k][j,t] = sum of A.val[e] * G[k][i,t] over the rows i whose arg entry e of
    column t lies in column j (grad_B of spmm_arg)."""
    P = pattern(A)
    tptr, trow, perm = transpose(P)
    out = _out(A, G, A.ncols)
    p = G.shape[-1]
    if P.ncols and p:
        BP = min(block(p), 64)
        _spmm_t_arg_kernel[(P.ncols, triton.cdiv(p, BP))](tptr, trow, perm, P.ptr, P.values, _rows2(arg),
                                                           _rows2(G), out, p, BE=BLOCK_E, BP=BP,
                                                           ACC=acc_type(G.dtype))
    return out


def sddmm_arg(A: CSRView, arg: torch.Tensor, G: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """g[e] = sum of G[k][i,t] * B[k][A.col[e],t] over the columns t whose arg is e,
    shaped like A.col (grad of spmm_arg w.r.t. A's values)."""
    return _sddmm_launch(A, _rows2(arg), G, B, False)
