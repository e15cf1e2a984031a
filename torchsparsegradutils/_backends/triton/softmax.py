"""Softmax and log-softmax over each row's stored entries in Triton, one head or H
((nnz, H) values, each head on its own), and their gradient.  Signatures as cpu.py's;
rows only (_backends routes columns elsewhere).  One program per row: the row's max,
its sum of shifted exps, then each entry, BLOCK_E entries at a time.

The shift is the row's max itself, as torch.softmax's: a row holding +inf (or NaN)
is NaN throughout, a row of -inf only is NaN; -inf entries beside finite ones give 0
(log: -inf).  Sums in float32 (float64 for float64), 16-bit values rounded once."""
import torch
import triton
import triton.language as tl

from ..._core.view import CSRView
from ._common import BLOCK_E, acc_type, block, pattern


def _heads(A: CSRView, values: torch.Tensor) -> int:
    return values.shape[-1] if values.dim() > A.col.dim() else 1


@triton.jit
def _softmax_kernel(ptr, v, y, H, LOG: tl.constexpr, BE: tl.constexpr, BH: tl.constexpr, ACC: tl.constexpr):
    """y[e, h] = exp(v[e, h] - L[h]) (log: v[e, h] - L[h]), L the log-sum-exp of head h
    over row r's entries; v and y (nnz, H) contiguous."""
    r = tl.program_id(0)
    h = tl.arange(0, BH)
    hm = h < H
    start = tl.load(ptr + r)
    end = tl.load(ptr + r + 1)
    mx = tl.full((BH,), float("-inf"), ACC)
    for e0 in range(start, end, BE):
        e = e0 + tl.arange(0, BE)
        m2 = (e < end)[:, None] & hm[None, :]
        x = tl.load(v + e[:, None] * H + h[None, :], mask=m2, other=float("-inf")).to(ACC)
        mx = tl.maximum(mx, tl.max(x, axis=0))
    s = tl.zeros((BH,), ACC)
    for e0 in range(start, end, BE):
        e = e0 + tl.arange(0, BE)
        m2 = (e < end)[:, None] & hm[None, :]
        x = tl.load(v + e[:, None] * H + h[None, :], mask=m2, other=0).to(ACC)
        s += tl.sum(tl.where(m2, tl.exp(x - mx[None, :]), 0), axis=0)
    L = mx + tl.log(s)
    for e0 in range(start, end, BE):
        e = e0 + tl.arange(0, BE)
        m2 = (e < end)[:, None] & hm[None, :]
        x = tl.load(v + e[:, None] * H + h[None, :], mask=m2, other=0).to(ACC)
        d = x - L[None, :]
        if not LOG:
            d = tl.exp(d)
        tl.store(y + e[:, None] * H + h[None, :], d.to(y.dtype.element_ty), mask=m2)


@triton.jit
def _softmax_grad_kernel(ptr, y, g, out, H, LOG: tl.constexpr, BE: tl.constexpr, BH: tl.constexpr,
                         ACC: tl.constexpr):
    """out = y * (g - S(g y)) (log: g - exp(y) S(g)), S the sum over row r's entries, per head."""
    r = tl.program_id(0)
    h = tl.arange(0, BH)
    hm = h < H
    start = tl.load(ptr + r)
    end = tl.load(ptr + r + 1)
    S = tl.zeros((BH,), ACC)
    for e0 in range(start, end, BE):
        e = e0 + tl.arange(0, BE)
        m2 = (e < end)[:, None] & hm[None, :]
        at = e[:, None] * H + h[None, :]
        gv = tl.load(g + at, mask=m2, other=0).to(ACC)
        if not LOG:
            gv = gv * tl.load(y + at, mask=m2, other=0).to(ACC)
        S += tl.sum(gv, axis=0)
    for e0 in range(start, end, BE):
        e = e0 + tl.arange(0, BE)
        m2 = (e < end)[:, None] & hm[None, :]
        at = e[:, None] * H + h[None, :]
        gv = tl.load(g + at, mask=m2, other=0).to(ACC)
        yv = tl.load(y + at, mask=m2, other=0).to(ACC)
        if LOG:
            res = gv - tl.exp(yv) * S[None, :]
        else:
            res = yv * (gv - S[None, :])
        tl.store(out + at, res.to(out.dtype.element_ty), mask=m2)


def softmax(A: CSRView, by_rows: bool, log: bool) -> torch.Tensor:
    """Softmax (log-softmax with log) over each row's stored values, shaped like A.values."""
    assert by_rows, "the Triton softmax goes by rows"
    P, H = pattern(A._replace(values=None)), _heads(A, A.values)
    v = A.values.contiguous()
    y = torch.empty_like(v)
    if P.nrows and v.numel():
        _softmax_kernel[(P.nrows,)](P.ptr, v, y, H, LOG=log, BE=BLOCK_E, BH=block(H), ACC=acc_type(v.dtype))
    return y


def softmax_grad(A: CSRView, y: torch.Tensor, g: torch.Tensor, by_rows: bool, log: bool) -> torch.Tensor:
    """The values gradient of softmax for its output y and y's gradient g, shaped like y."""
    assert by_rows, "the Triton softmax goes by rows"
    P, H = pattern(A._replace(values=None)), _heads(A, y)
    y = y.contiguous()
    g = g.to(y.dtype).contiguous()
    out = torch.empty_like(y)
    if P.nrows and y.numel():
        _softmax_grad_kernel[(P.nrows,)](P.ptr, y, g, out, H, LOG=log, BE=BLOCK_E, BH=block(H),
                                         ACC=acc_type(y.dtype))
    return out
