"""Fused GATv2 attention in Triton (graph_attention_v2, GATv2Conv): each entry's score
computed from its two rows (sum_c att[h,c] LeakyReLU(xl[j,h,c] + xr[i,h,c] (+ et[e,h,c],
HAS_ET)) (+ b[e,h], HAS_B)), each row's softmax per head (online: one pass keeps the
running max, the sum and the weighted rows of xl; a second turns the stored scores into
alpha), dropout and the weighted sum in one kernel; the backward by rows (the scores'
gradient dz, xr's, et's and each row's share of att's) then by sources (xl's, through
the transpose's pattern), att's the sum of the rows' shares: deterministic, no atomics,
and nothing of size nnz x H x C (but et and its gradient).  Signatures as cpu.py's (see
_backends.gatv2).  Dropout draws the GAT kernels' counter hash (gat.py's _weights): one
seed, one mask on every route."""
import torch
import triton
import triton.language as tl

from ..._core.view import CSRView
from ._common import BLOCK_E, acc_type, block, pattern, transpose
from .gat import _consts, _weights


@triton.jit
def _gatv2_forward_kernel(ptr, col, xl, xr, att, et, b, seedp, drop, consts, alpha, out, H, C,
                          DROP: tl.constexpr, HAS_ET: tl.constexpr, HAS_B: tl.constexpr, BE: tl.constexpr,
                          BH: tl.constexpr, BC: tl.constexpr, ACC: tl.constexpr):
    """Row i: alpha[e, h] = softmax over the row of the scores z[e, h], and
    out[i, h, :] = sum over the row of the dropped-out alpha times xl[j, h, :]."""
    i = tl.program_id(0)
    scale, slope = tl.load(consts), tl.load(consts + 1)
    h = tl.arange(0, BH)
    c = tl.arange(0, BC)
    hm = h < H
    hc = h[:, None] * C + c[None, :]
    hcm = hm[:, None] & (c < C)[None, :]
    HC = H * C
    start = tl.load(ptr + i)
    end = tl.load(ptr + i + 1)
    xri = tl.load(xr + i * HC + hc, mask=hcm, other=0).to(ACC)
    a = tl.load(att + hc, mask=hcm, other=0).to(ACC)
    mx = tl.full((BH,), float("-inf"), ACC)
    tot = tl.zeros((BH,), ACC)
    acc = tl.zeros((BH, BC), ACC)
    for e0 in range(start, end, BE):
        e = e0 + tl.arange(0, BE)
        em = e < end
        m2 = em[:, None] & hm[None, :]
        m3 = em[:, None, None] & hcm[None, :, :]
        j = tl.load(col + e, mask=em, other=0)
        xj = tl.load(xl + j[:, None, None] * HC + hc[None, :, :], mask=m3, other=0).to(ACC)
        u = xj + xri[None, :, :]
        if HAS_ET:
            u += tl.load(et + e[:, None, None] * HC + hc[None, :, :], mask=m3, other=0).to(ACC)
        z = tl.sum(tl.where(u > 0, u, slope * u) * a[None, :, :], axis=2)
        if HAS_B:
            z += tl.load(b + e[:, None] * H + h[None, :], mask=m2, other=0).to(ACC)
        tl.store(alpha + e[:, None] * H + h[None, :], z.to(alpha.dtype.element_ty), mask=m2)   # for pass 2
        new = tl.maximum(mx, tl.max(tl.where(m2, z, float("-inf")), axis=0))
        new = tl.where(hm, new, 0.0)
        shrink = tl.where(mx == float("-inf"), 0.0, tl.exp(mx - new))
        p = tl.where(m2, tl.exp(z - new[None, :]), 0.0)
        w = tl.where(m2, _weights(p, e, h, H, seedp, drop, scale, DROP), 0.0)
        tot = tot * shrink + tl.sum(p, axis=0)
        acc = acc * shrink[:, None] + tl.sum(w[:, :, None] * xj, axis=0)
        mx = new
    inv = 1.0 / tl.where(tot > 0, tot, 1.0)
    tl.store(out + i * HC + hc, (acc * inv[:, None]).to(out.dtype.element_ty), mask=hcm)
    tl.debug_barrier()                        # the scores stored above, read back below
    for e0 in range(start, end, BE):
        e = e0 + tl.arange(0, BE)
        m2 = (e < end)[:, None] & hm[None, :]
        z = tl.load(alpha + e[:, None] * H + h[None, :], mask=m2, other=0).to(ACC)
        tl.store(alpha + e[:, None] * H + h[None, :], (tl.exp(z - mx[None, :]) * inv[None, :]).to(
            alpha.dtype.element_ty), mask=m2)


@triton.jit
def _gatv2_grad_rows_kernel(ptr, col, xl, xr, att, et, seedp, drop, consts, alpha, G, galpha, dz, gxr, arows, get,
                            H, C, DROP: tl.constexpr, HAS_GALPHA: tl.constexpr, HAS_ET: tl.constexpr,
                            BE: tl.constexpr, BH: tl.constexpr, BC: tl.constexpr, ACC: tl.constexpr):
    """Row i: ga[e, h] = (dropped-out) dot(G[i, h], xl[j, h]) + galpha[e, h]; the softmax's
    gradient dz = alpha (ga - sum over the row of alpha ga); through the score, du[e, h, c]
    = dz att[h, c] LeakyReLU'(u): gxr[i] its sum over the row, get[e] = du (HAS_ET), and
    arows[i, h, c] = sum over the row of dz LeakyReLU(u).  dz holds ga between the passes."""
    i = tl.program_id(0)
    scale, slope = tl.load(consts), tl.load(consts + 1)
    h = tl.arange(0, BH)
    c = tl.arange(0, BC)
    hm = h < H
    hc = h[:, None] * C + c[None, :]
    hcm = hm[:, None] & (c < C)[None, :]
    HC = H * C
    start = tl.load(ptr + i)
    end = tl.load(ptr + i + 1)
    Gi = tl.load(G + i * HC + hc, mask=hcm, other=0).to(ACC)
    xri = tl.load(xr + i * HC + hc, mask=hcm, other=0).to(ACC)
    a = tl.load(att + hc, mask=hcm, other=0).to(ACC)
    csum = tl.zeros((BH,), ACC)
    for e0 in range(start, end, BE):
        e = e0 + tl.arange(0, BE)
        em = e < end
        m2 = em[:, None] & hm[None, :]
        at = e[:, None] * H + h[None, :]
        j = tl.load(col + e, mask=em, other=0)
        xj = tl.load(xl + j[:, None, None] * HC + hc[None, :, :], mask=em[:, None, None] & hcm[None, :, :],
                     other=0).to(ACC)
        ga = _weights(tl.sum(Gi[None, :, :] * xj, axis=2), e, h, H, seedp, drop, scale, DROP)
        if HAS_GALPHA:
            ga += tl.load(galpha + at, mask=m2, other=0).to(ACC)
        al = tl.load(alpha + at, mask=m2, other=0).to(ACC)
        csum += tl.sum(tl.where(m2, al * ga, 0.0), axis=0)
        tl.store(dz + at, ga.to(dz.dtype.element_ty), mask=m2)
    tl.debug_barrier()
    gr = tl.zeros((BH, BC), ACC)
    ar = tl.zeros((BH, BC), ACC)
    for e0 in range(start, end, BE):
        e = e0 + tl.arange(0, BE)
        em = e < end
        m2 = em[:, None] & hm[None, :]
        m3 = em[:, None, None] & hcm[None, :, :]
        at = e[:, None] * H + h[None, :]
        j = tl.load(col + e, mask=em, other=0)
        al = tl.load(alpha + at, mask=m2, other=0).to(ACC)
        gz = tl.where(m2, al * (tl.load(dz + at, mask=m2, other=0).to(ACC) - csum[None, :]), 0.0)
        tl.store(dz + at, gz.to(dz.dtype.element_ty), mask=m2)
        u = tl.load(xl + j[:, None, None] * HC + hc[None, :, :], mask=m3, other=0).to(ACC) + xri[None, :, :]
        if HAS_ET:
            u += tl.load(et + e[:, None, None] * HC + hc[None, :, :], mask=m3, other=0).to(ACC)
        k = tl.where(u > 0, 1.0, slope)
        du = gz[:, :, None] * a[None, :, :] * k
        gr += tl.sum(du, axis=0)
        ar += tl.sum(gz[:, :, None] * (k * u), axis=0)
        if HAS_ET:
            tl.store(get + e[:, None, None] * HC + hc[None, :, :], du.to(get.dtype.element_ty), mask=m3)
    tl.store(gxr + i * HC + hc, gr.to(gxr.dtype.element_ty), mask=hcm)
    tl.store(arows + i * HC + hc, ar.to(arows.dtype.element_ty), mask=hcm)


@triton.jit
def _gatv2_grad_src_kernel(tptr, trow, perm, xl, xr, att, et, seedp, drop, consts, alpha, G, dz, gxl, H, C,
                           DROP: tl.constexpr, HAS_ET: tl.constexpr, BE: tl.constexpr, BH: tl.constexpr,
                           BC: tl.constexpr, ACC: tl.constexpr):
    """Source j (column j's entries e = perm[..], rows i = trow[..], in row order):
    gxl[j] = sum of the dropped-out alpha[e, h] G[i, h, :] + dz[e, h] att[h, :] LeakyReLU'(u)."""
    jj = tl.program_id(0)
    scale, slope = tl.load(consts), tl.load(consts + 1)
    h = tl.arange(0, BH)
    c = tl.arange(0, BC)
    hm = h < H
    hc = h[:, None] * C + c[None, :]
    hcm = hm[:, None] & (c < C)[None, :]
    HC = H * C
    start = tl.load(tptr + jj)
    end = tl.load(tptr + jj + 1)
    xj = tl.load(xl + jj * HC + hc, mask=hcm, other=0).to(ACC)
    a = tl.load(att + hc, mask=hcm, other=0).to(ACC)
    acc = tl.zeros((BH, BC), ACC)
    for t0 in range(start, end, BE):
        t = t0 + tl.arange(0, BE)
        tm = t < end
        m2 = tm[:, None] & hm[None, :]
        m3 = tm[:, None, None] & hcm[None, :, :]
        e = tl.load(perm + t, mask=tm, other=0)
        i = tl.load(trow + t, mask=tm, other=0)
        at = e[:, None] * H + h[None, :]
        w = tl.where(m2, _weights(tl.load(alpha + at, mask=m2, other=0).to(ACC), e, h, H, seedp, drop, scale,
                                  DROP), 0.0)
        gz = tl.load(dz + at, mask=m2, other=0).to(ACC)
        Gi = tl.load(G + i[:, None, None] * HC + hc[None, :, :], mask=m3, other=0).to(ACC)
        u = xj[None, :, :] + tl.load(xr + i[:, None, None] * HC + hc[None, :, :], mask=m3, other=0).to(ACC)
        if HAS_ET:
            u += tl.load(et + e[:, None, None] * HC + hc[None, :, :], mask=m3, other=0).to(ACC)
        k = tl.where(u > 0, 1.0, slope)
        acc += tl.sum(w[:, :, None] * Gi + gz[:, :, None] * a[None, :, :] * k, axis=0)
    tl.store(gxl + jj * HC + hc, acc.to(gxl.dtype.element_ty), mask=hcm)


def _blocks(x: torch.Tensor):
    _, H, C = x.shape
    return dict(BE=BLOCK_E, BH=block(H), BC=block(C), ACC=acc_type(x.dtype))


def gatv2(A: CSRView, xl: torch.Tensor, xr: torch.Tensor, att: torch.Tensor, et, b, seed, drop: int,
          scale: float, slope: float):
    """(out (n, H, C), alpha (nnz, H)): the scores from the two rows, their softmax over
    each row and the weighted rows of xl, one program per row."""
    P = pattern(A)
    n, (_, H, C) = A.nrows, xl.shape
    out = torch.zeros(n, H, C, dtype=xl.dtype, device=xl.device)
    alpha = torch.empty(P.col.shape[0], H, dtype=xl.dtype, device=xl.device)
    if n and H:
        _gatv2_forward_kernel[(n,)](P.ptr, P.col, xl, xr, att, et, b, seed, drop, _consts(xl, scale, slope),
                                    alpha, out, H, C, DROP=bool(drop), HAS_ET=et is not None,
                                    HAS_B=b is not None, **_blocks(xl))
    return out, alpha


def gatv2_grad(A: CSRView, xl: torch.Tensor, xr: torch.Tensor, att: torch.Tensor, et, seed, drop: int,
               scale: float, slope: float, alpha: torch.Tensor, G: torch.Tensor, galpha):
    """(gxl, gxr, gatt, get, gb): by rows (dz = gb, gxr, get, the rows' shares of att's
    gradient), then by sources (gxl); gatt the rows' shares summed."""
    P = pattern(A)
    n, (m, H, C) = A.nrows, xl.shape
    dz = torch.zeros_like(alpha)
    gxl, gxr, arows = torch.zeros_like(xl), torch.zeros_like(xr), torch.zeros_like(xr)
    get = None if et is None else torch.zeros_like(et)
    if not (H and P.col.numel()):
        return gxl, gxr, torch.zeros_like(att), get, dz
    G = G.contiguous()
    consts = _consts(xl, scale, slope)
    _gatv2_grad_rows_kernel[(n,)](P.ptr, P.col, xl, xr, att, et, seed, drop, consts, alpha, G, galpha, dz, gxr,
                                  arows, get, H, C, DROP=bool(drop), HAS_GALPHA=galpha is not None,
                                  HAS_ET=et is not None, **_blocks(xl))
    tptr, trow, perm = transpose(P)
    _gatv2_grad_src_kernel[(m,)](tptr, trow, perm, xl, xr, att, et, seed, drop, consts, alpha, G, dz, gxl, H, C,
                                 DROP=bool(drop), HAS_ET=et is not None, **_blocks(xl))
    return gxl, gxr, arows.sum(0), get, dz
