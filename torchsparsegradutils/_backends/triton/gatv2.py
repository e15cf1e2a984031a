"""Fused GATv2 attention in Triton (graph_attention_v2, GATv2Conv): each entry's score
computed from its two rows (sum_c att[h,c] LeakyReLU(xl[j,h,c] + xr[i,h,c] (+ et[e,h,c],
HAS_ET)) (+ b[e,h], HAS_B)), each row's softmax per head (online: one pass keeps the
running max, the sum and the weighted rows of xl; a second turns the stored scores into
alpha), dropout and the weighted sum in one kernel; the backward by rows (the scores'
gradient dz, xr's, et's and each row's share of att's) then by sources (xl's, through
the transpose's pattern), att's the sum of the rows' shares: deterministic, no atomics,
and nothing of size nnz x H x C (but et and its gradient).  Signatures as cpu.py's (see
_backends.gatv2); C is F in the kernels, as in gat.py's.  The dropout draw (GAT's: one
seed, one mask on every route) and the launches are _attention.py's."""
import torch
import triton
import triton.language as tl

from ..._core.view import CSRView
from . import _attention as attn


@triton.jit
def _edge_term(u, et, e, em, hf, hfm, HF, ACC: tl.constexpr, HAS_ET: tl.constexpr):
    """u (BE, BH, BF), the LeakyReLU's argument xl[j] + xr[i] of entries e, plus et[e] with HAS_ET."""
    if HAS_ET:
        u += attn.gather(et, e, em, hf, hfm, HF, ACC)
    return u


@triton.jit
def _gatv2_forward_kernel(ptr, col, xl, xr, att, et, b, seedp, drop, consts, alpha, out, H, F,
                          DROP: tl.constexpr, HAS_ET: tl.constexpr, HAS_B: tl.constexpr, BE: tl.constexpr,
                          BH: tl.constexpr, BF: tl.constexpr, ACC: tl.constexpr):
    """Row i: alpha[e, h] = softmax over the row of the scores z[e, h], and
    out[i, h, :] = sum over the row of the dropped-out alpha times xl[j, h, :]."""
    i, start, end = attn.span(ptr)
    scale, slope = tl.load(consts), tl.load(consts + 1)
    h, hm, hf, hfm, HF = attn.tile(H, F, BH, BF)
    xri = attn.row(xr, i, hf, hfm, HF, ACC)
    a = attn.row(att, 0, hf, hfm, HF, ACC)
    mx = tl.full((BH,), float("-inf"), ACC)
    tot = tl.zeros((BH,), ACC)
    acc = tl.zeros((BH, BF), ACC)
    for e0 in range(start, end, BE):
        e, em, m2, j, at = attn.row_block(e0, end, col, h, hm, H, BE)
        xj = attn.gather(xl, j, em, hf, hfm, HF, ACC)
        u = _edge_term(xj + xri[None, :, :], et, e, em, hf, hfm, HF, ACC, HAS_ET)
        z = tl.sum(tl.where(u > 0, u, slope * u) * a[None, :, :], axis=2)
        if HAS_B:
            z += tl.load(b + e[:, None] * H + h[None, :], mask=m2, other=0).to(ACC)
        tl.store(alpha + at, z.to(alpha.dtype.element_ty), mask=m2)   # for pass 2
        new = tl.maximum(mx, tl.max(tl.where(m2, z, float("-inf")), axis=0))
        new = tl.where(hm, new, 0.0)
        shrink = tl.where(mx == float("-inf"), 0.0, tl.exp(mx - new))
        p = tl.where(m2, tl.exp(z - new[None, :]), 0.0)
        w = tl.where(m2, attn.weights(p, e, h, H, seedp, drop, scale, DROP), 0.0)
        tot = tot * shrink + tl.sum(p, axis=0)
        acc = acc * shrink[:, None] + tl.sum(w[:, :, None] * xj, axis=0)
        mx = new
    inv = 1.0 / tl.where(tot > 0, tot, 1.0)
    tl.store(out + i * HF + hf, (acc * inv[:, None]).to(out.dtype.element_ty), mask=hfm)
    tl.debug_barrier()                        # the scores stored above, read back below
    for e0 in range(start, end, BE):
        _, _, m2, _, at = attn.row_block(e0, end, col, h, hm, H, BE)
        z = tl.load(alpha + at, mask=m2, other=0).to(ACC)
        tl.store(alpha + at, (tl.exp(z - mx[None, :]) * inv[None, :]).to(alpha.dtype.element_ty), mask=m2)


@triton.jit
def _gatv2_grad_rows_kernel(ptr, col, xl, xr, att, et, seedp, drop, consts, alpha, G, galpha, dz, gxr, arows, get,
                            H, F, DROP: tl.constexpr, HAS_GALPHA: tl.constexpr, HAS_ET: tl.constexpr,
                            BE: tl.constexpr, BH: tl.constexpr, BF: tl.constexpr, ACC: tl.constexpr):
    """Row i: ga[e, h] = (dropped-out) dot(G[i, h], xl[j, h]) + galpha[e, h]; the softmax's
    gradient dz = alpha (ga - sum over the row of alpha ga); through the score, du[e, h, c]
    = dz att[h, c] LeakyReLU'(u): gxr[i] its sum over the row, get[e] = du (HAS_ET), and
    arows[i, h, c] = sum over the row of dz LeakyReLU(u).  dz holds ga between the passes."""
    i, start, end = attn.span(ptr)
    scale, slope = tl.load(consts), tl.load(consts + 1)
    h, hm, hf, hfm, HF = attn.tile(H, F, BH, BF)
    Gi = attn.row(G, i, hf, hfm, HF, ACC)
    xri = attn.row(xr, i, hf, hfm, HF, ACC)
    a = attn.row(att, 0, hf, hfm, HF, ACC)
    csum = attn.alpha_grads(start, end, col, xl, Gi, alpha, galpha, dz, h, hm, hf, hfm, H, HF, seedp, drop, scale,
                            DROP, HAS_GALPHA, BE, BH, ACC)
    tl.debug_barrier()
    gr = tl.zeros((BH, BF), ACC)
    ar = tl.zeros((BH, BF), ACC)
    for e0 in range(start, end, BE):
        e, em, m2, j, at = attn.row_block(e0, end, col, h, hm, H, BE)
        gz = attn.score_grads(alpha, dz, at, m2, csum, ACC)
        tl.store(dz + at, gz.to(dz.dtype.element_ty), mask=m2)
        u = _edge_term(attn.gather(xl, j, em, hf, hfm, HF, ACC) + xri[None, :, :], et, e, em, hf, hfm, HF, ACC, HAS_ET)
        k = tl.where(u > 0, 1.0, slope)
        du = gz[:, :, None] * a[None, :, :] * k
        gr += tl.sum(du, axis=0)
        ar += tl.sum(gz[:, :, None] * (k * u), axis=0)
        if HAS_ET:
            tl.store(get + e[:, None, None] * HF + hf[None, :, :], du.to(get.dtype.element_ty),
                     mask=em[:, None, None] & hfm[None, :, :])
    tl.store(gxr + i * HF + hf, gr.to(gxr.dtype.element_ty), mask=hfm)
    tl.store(arows + i * HF + hf, ar.to(arows.dtype.element_ty), mask=hfm)


@triton.jit
def _gatv2_grad_src_kernel(tptr, trow, perm, xl, xr, att, et, seedp, drop, consts, alpha, G, dz, gxl, H, F,
                           DROP: tl.constexpr, HAS_ET: tl.constexpr, BE: tl.constexpr, BH: tl.constexpr,
                           BF: tl.constexpr, ACC: tl.constexpr):
    """Source j (column j's entries e = perm[..], rows i = trow[..], in row order):
    gxl[j] = sum of the dropped-out alpha[e, h] G[i, h, :] + dz[e, h] att[h, :] LeakyReLU'(u)."""
    jj, start, end = attn.span(tptr)
    scale, slope = tl.load(consts), tl.load(consts + 1)
    h, hm, hf, hfm, HF = attn.tile(H, F, BH, BF)
    xj = attn.row(xl, jj, hf, hfm, HF, ACC)
    a = attn.row(att, 0, hf, hfm, HF, ACC)
    acc = tl.zeros((BH, BF), ACC)
    for t0 in range(start, end, BE):
        tm, m2, e, i, at = attn.column_block(t0, end, perm, trow, h, hm, H, BE)
        w = attn.dropped(alpha, at, m2, e, h, H, seedp, drop, scale, DROP, ACC)
        gz = tl.load(dz + at, mask=m2, other=0).to(ACC)
        Gi = attn.gather(G, i, tm, hf, hfm, HF, ACC)
        u = _edge_term(xj[None, :, :] + attn.gather(xr, i, tm, hf, hfm, HF, ACC), et, e, tm, hf, hfm, HF, ACC, HAS_ET)
        k = tl.where(u > 0, 1.0, slope)
        acc += tl.sum(w[:, :, None] * Gi + gz[:, :, None] * a[None, :, :] * k, axis=0)
    tl.store(gxl + jj * HF + hf, acc.to(gxl.dtype.element_ty), mask=hfm)


def gatv2(A: CSRView, xl: torch.Tensor, xr: torch.Tensor, att: torch.Tensor, et, b, seed, drop: int,
          scale: float, slope: float):
    """(out (n, H, C), alpha (nnz, H)): the scores from the two rows, their softmax over
    each row and the weighted rows of xl, one program per row."""
    return attn.forward(_gatv2_forward_kernel, A, xl, (xl, xr, att, et, b), seed, drop, scale, slope,
                        HAS_ET=et is not None, HAS_B=b is not None)


def gatv2_grad(A: CSRView, xl: torch.Tensor, xr: torch.Tensor, att: torch.Tensor, et, seed, drop: int,
               scale: float, slope: float, alpha: torch.Tensor, G: torch.Tensor, galpha):
    """(gxl, gxr, gatt, get, gb): by rows (dz = gb, gxr, get, the rows' shares of att's
    gradient), then by sources (gxl); gatt the rows' shares summed."""
    gxl, gxr, arows = torch.zeros_like(xl), torch.zeros_like(xr), torch.zeros_like(xr)
    get = None if et is None else torch.zeros_like(et)
    has_et = {"HAS_ET": et is not None}
    dz = attn.grad(A, xl, seed, drop, scale, slope, alpha, G, galpha,
                   attn.Pass(_gatv2_grad_rows_kernel, (xl, xr, att, et), (gxr, arows, get), has_et),
                   attn.Pass(_gatv2_grad_src_kernel, (xl, xr, att, et), (gxl,), has_et))
    return gxl, gxr, arows.sum(0), get, dz
