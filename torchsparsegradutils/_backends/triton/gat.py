"""Fused graph attention in Triton (graph_attention, GATConv): the scores (with an
optional per-entry score, HAS_EDGE) and their LeakyReLU,
each row's softmax per head, dropout and the weighted sum of the sources' features in
one kernel; the backward by rows (the scores' gradient, and d's) then by sources
(x's and s's, through the transpose's pattern): deterministic, no atomics, and
nothing of size nnz x H x F.  Signatures as cpu.py's (see _backends.gat); the
dropout draw (the C kernels' hash) and the launches are _attention.py's."""
import torch
import triton
import triton.language as tl

from ..._core.view import CSRView
from . import _attention as attn


@triton.jit
def _score(s, es, j, e, h, H, m2, di, ACC: tl.constexpr, HAS_EDGE: tl.constexpr):
    """The scores before LeakyReLU (BE, BH) of entries e (sources j) and heads h of a row
    with target scores di: s[j, h] + di[h], plus es[e, h] with HAS_EDGE (the C kernels' order)."""
    z = tl.load(s + j[:, None] * H + h[None, :], mask=m2, other=0).to(ACC) + di[None, :]
    if HAS_EDGE:
        z += tl.load(es + e[:, None] * H + h[None, :], mask=m2, other=0).to(ACC)
    return z


@triton.jit
def _gat_forward_kernel(ptr, col, x, s, d, es, seedp, drop, consts, alpha, out, H, F, DROP: tl.constexpr,
                        HAS_EDGE: tl.constexpr, BE: tl.constexpr, BH: tl.constexpr, BF: tl.constexpr,
                        ACC: tl.constexpr):
    """Row i: alpha[e, h] = softmax over the row of LeakyReLU(s[j, h] + d[i, h] (+ es[e, h]
    with HAS_EDGE)), and
    out[i, h, :] = sum over the row of the dropped-out alpha times x[j, h, :]."""
    i, start, end = attn.span(ptr)
    scale, slope = tl.load(consts), tl.load(consts + 1)
    h, hm, hf, hfm, HF = attn.tile(H, F, BH, BF)
    di = tl.load(d + i * H + h, mask=hm, other=0).to(ACC)
    mx = tl.full((BH,), float("-inf"), ACC)
    for e0 in range(start, end, BE):
        e, _, m2, j, _ = attn.row_block(e0, end, col, h, hm, H, BE)
        z = _score(s, es, j, e, h, H, m2, di, ACC, HAS_EDGE)
        z = tl.where(z > 0, z, slope * z)
        mx = tl.maximum(mx, tl.max(tl.where(m2, z, float("-inf")), axis=0))
    mx = tl.where(hm, mx, 0.0)
    tot = tl.zeros((BH,), ACC)
    for e0 in range(start, end, BE):
        e, _, m2, j, _ = attn.row_block(e0, end, col, h, hm, H, BE)
        z = _score(s, es, j, e, h, H, m2, di, ACC, HAS_EDGE)
        z = tl.where(z > 0, z, slope * z)
        tot += tl.sum(tl.where(m2, tl.exp(z - mx[None, :]), 0.0), axis=0)
    inv = 1.0 / tl.where(hm, tot, 1.0)
    acc = tl.zeros((BH, BF), ACC)
    for e0 in range(start, end, BE):
        e, em, m2, j, at = attn.row_block(e0, end, col, h, hm, H, BE)
        z = _score(s, es, j, e, h, H, m2, di, ACC, HAS_EDGE)
        z = tl.where(z > 0, z, slope * z)
        a = tl.exp(z - mx[None, :]) * inv[None, :]
        tl.store(alpha + at, a.to(alpha.dtype.element_ty), mask=m2)
        w = tl.where(m2, attn.weights(a, e, h, H, seedp, drop, scale, DROP), 0.0)
        xj = attn.gather(x, j, em, hf, hfm, HF, ACC)
        acc += tl.sum(w[:, :, None] * xj, axis=0)
    tl.store(out + i * HF + hf, acc.to(out.dtype.element_ty), mask=hfm)


@triton.jit
def _gat_grad_rows_kernel(ptr, col, x, s, d, es, seedp, drop, consts, alpha, G, galpha, dz, gd, H, F,
                          DROP: tl.constexpr, HAS_GALPHA: tl.constexpr, HAS_EDGE: tl.constexpr, BE: tl.constexpr,
                          BH: tl.constexpr, BF: tl.constexpr, ACC: tl.constexpr):
    """Row i: ga[e, h] = (dropped-out) dot(G[i, h], x[j, h]) + galpha[e, h]; the softmax's
    gradient alpha (ga - sum over the row of alpha ga) through LeakyReLU into dz[e, h]
    (es's gradient), and gd[i, h] = its sum over the row.  dz holds ga between the two passes."""
    i, start, end = attn.span(ptr)
    scale, slope = tl.load(consts), tl.load(consts + 1)
    h, hm, hf, hfm, HF = attn.tile(H, F, BH, BF)
    di = tl.load(d + i * H + h, mask=hm, other=0).to(ACC)
    Gi = attn.row(G, i, hf, hfm, HF, ACC)
    c = attn.alpha_grads(start, end, col, x, Gi, alpha, galpha, dz, h, hm, hf, hfm, H, HF, seedp, drop, scale,
                         DROP, HAS_GALPHA, BE, BH, ACC)
    g = tl.zeros((BH,), ACC)
    for e0 in range(start, end, BE):
        e, _, m2, j, at = attn.row_block(e0, end, col, h, hm, H, BE)
        z = _score(s, es, j, e, h, H, m2, di, ACC, HAS_EDGE)
        ge = attn.score_grads(alpha, dz, at, m2, c, ACC)
        ge = tl.where(z > 0, ge, slope * ge)
        g += tl.sum(ge, axis=0)
        tl.store(dz + at, ge.to(dz.dtype.element_ty), mask=m2)
    tl.store(gd + i * H + h, g.to(gd.dtype.element_ty), mask=hm)


@triton.jit
def _gat_grad_src_kernel(tptr, trow, perm, seedp, drop, consts, alpha, G, dz, gx, gs, H, F, DROP: tl.constexpr,
                         BE: tl.constexpr, BH: tl.constexpr, BF: tl.constexpr, ACC: tl.constexpr):
    """Source j (column j's entries e = perm[..], rows i = trow[..], in row order):
    gx[j, h, :] = sum of the dropped-out alpha[e, h] G[i, h, :], gs[j, h] = sum of dz[e, h]."""
    jj, start, end = attn.span(tptr)
    scale = tl.load(consts)
    h, hm, hf, hfm, HF = attn.tile(H, F, BH, BF)
    acc = tl.zeros((BH, BF), ACC)
    g = tl.zeros((BH,), ACC)
    for t0 in range(start, end, BE):
        tm, m2, e, i, at = attn.column_block(t0, end, perm, trow, h, hm, H, BE)
        w = attn.dropped(alpha, at, m2, e, h, H, seedp, drop, scale, DROP, ACC)
        Gi = attn.gather(G, i, tm, hf, hfm, HF, ACC)
        acc += tl.sum(w[:, :, None] * Gi, axis=0)
        g += tl.sum(tl.load(dz + at, mask=m2, other=0).to(ACC), axis=0)
    tl.store(gx + jj * HF + hf, acc.to(gx.dtype.element_ty), mask=hfm)
    tl.store(gs + jj * H + h, g.to(gs.dtype.element_ty), mask=hm)


def gat(A: CSRView, x: torch.Tensor, s: torch.Tensor, d: torch.Tensor, e, seed, drop: int, scale: float,
        slope: float):
    """(out (n, H, F), alpha (nnz, H)): attention over each row's entries and the rows of
    x it weighs, one program per row."""
    return attn.forward(_gat_forward_kernel, A, x, (x, s, d, e), seed, drop, scale, slope, HAS_EDGE=e is not None)


def gat_grad(A: CSRView, x: torch.Tensor, s: torch.Tensor, d: torch.Tensor, e, seed, drop: int, scale: float,
             slope: float, alpha: torch.Tensor, G: torch.Tensor, galpha):
    """(gx, gs, gd, ge): the gradients of gat's out (G) and alpha (galpha, or None) back to
    x, s, d and e: by rows (the scores' gradient dz, which is e's, and gd), then by
    sources (gx, gs)."""
    gd, gx, gs = torch.zeros_like(d), torch.zeros_like(x), torch.zeros_like(s)
    dz = attn.grad(A, x, seed, drop, scale, slope, alpha, G, galpha,
                   attn.Pass(_gat_grad_rows_kernel, (x, s, d, e), (gd,), {"HAS_EDGE": e is not None}),
                   attn.Pass(_gat_grad_src_kernel, (), (gx, gs), {}))
    return gx, gs, gd, dz
