"""What the graph-attention kernels (gat.py, gatv2.py) share: the dropout draw; a
program's pieces (its span of entries, its tile of heads by features, a block of a row's
or a column's entries, row loads and gathers, the dropped-out weights, the softmax
gradient's two passes); and the launches: the forward over the rows, the gradient by
rows then by sources (through the transpose's pattern).  The kernels, which differ in
their math, stay in their modules.

Dropout draws the same counter-based hash as the C kernels (csrc/tsgu_gat.h,
tsgu_gat_draw: SplitMix64's finaliser of seed + (q+1) * golden ratio, q = e*H + h,
its top 24 bits below `drop`), so one seed gives the same mask on every route and in
both families; the seed is read on the device (no synchronisation)."""
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from ..._core.view import CSRView
from ._common import BLOCK_E, acc_type, block, pattern, transpose


@triton.jit
def _kept(seed, q, drop):
    """The dropout factor's mask of elements q (int64): True where tsgu_gat_draw >= drop."""
    z = seed + (q.to(tl.uint64) + 1) * 0x9E3779B97F4A7C15
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB
    return ((z ^ (z >> 31)) >> 40).to(tl.int64) >= drop


@triton.jit
def weights(alpha, e, h, H, seedp, drop, scale, DROP: tl.constexpr):
    """alpha (BE, BH) of entries e and heads h after dropout: 0 where dropped, else alpha * scale."""
    if DROP:
        seed = tl.load(seedp).to(tl.uint64, bitcast=True)
        keep = _kept(seed, e[:, None].to(tl.int64) * H + h[None, :], drop)
        alpha = tl.where(keep, alpha * scale, 0.0)
    return alpha


@triton.jit
def tile(H, F, BH: tl.constexpr, BF: tl.constexpr):
    """(h, hm, hf, hfm, HF): the heads (BH,) and their mask, a row's (head, feature)
    offsets (BH, BF) in an (., H, F) tensor, their mask, and its row stride H * F."""
    h = tl.arange(0, BH)
    f = tl.arange(0, BF)
    hm = h < H
    return h, hm, h[:, None] * F + f[None, :], hm[:, None] & (f < F)[None, :], H * F


@triton.jit
def span(ptr):
    """(k, start, end): this program's row (or, on the transpose's pattern, column) k and
    its entries' range."""
    k = tl.program_id(0)
    return k, tl.load(ptr + k), tl.load(ptr + k + 1)


@triton.jit
def row_block(e0, end, col, h, hm, H, BE: tl.constexpr):
    """(e, em, m2, j, at): a row's entries e0.. (BE,) before end, their mask, the (entry,
    head) mask, their sources and their offsets in an (nnz, H) tensor."""
    e = e0 + tl.arange(0, BE)
    em = e < end
    return e, em, em[:, None] & hm[None, :], tl.load(col + e, mask=em, other=0), e[:, None] * H + h[None, :]


@triton.jit
def column_block(t0, end, perm, trow, h, hm, H, BE: tl.constexpr):
    """(tm, m2, e, i, at): a column's entries t0.. (BE,) before end on the transpose's
    pattern: their mask, the (entry, head) mask, their positions e in the row-major
    arrays, their rows and their offsets in an (nnz, H) tensor."""
    t = t0 + tl.arange(0, BE)
    tm = t < end
    e = tl.load(perm + t, mask=tm, other=0)
    return tm, tm[:, None] & hm[None, :], e, tl.load(trow + t, mask=tm, other=0), e[:, None] * H + h[None, :]


@triton.jit
def dropped(alpha, at, m2, e, h, H, seedp, drop, scale, DROP: tl.constexpr, ACC: tl.constexpr):
    """alpha at offsets at (entries e, heads h) after dropout, zeros outside m2."""
    return tl.where(m2, weights(tl.load(alpha + at, mask=m2, other=0).to(ACC), e, h, H, seedp, drop, scale, DROP),
                    0.0)


@triton.jit
def row(x, k, hf, hfm, HF, ACC: tl.constexpr):
    """Row k of x (., H, F) as (BH, BF) in ACC."""
    return tl.load(x + k * HF + hf, mask=hfm, other=0).to(ACC)


@triton.jit
def gather(x, r, rm, hf, hfm, HF, ACC: tl.constexpr):
    """Rows r (BE,) of x (., H, F) as (BE, BH, BF) in ACC, zeros where rm (BE,) or hfm is False."""
    return tl.load(x + r[:, None, None] * HF + hf[None, :, :], mask=rm[:, None, None] & hfm[None, :, :],
                   other=0).to(ACC)


@triton.jit
def alpha_grads(start, end, col, x, Gi, alpha, galpha, dz, h, hm, hf, hfm, H, HF, seedp, drop, scale,
                DROP: tl.constexpr, HAS_GALPHA: tl.constexpr, BE: tl.constexpr, BH: tl.constexpr,
                ACC: tl.constexpr):
    """A row's first gradient pass, entries start..end: alpha's gradient ga[e, h] =
    (dropped-out) dot(Gi[h], x[j, h]) + galpha[e, h] into dz; returns the row's sum of
    alpha ga (BH,), which score_grads takes."""
    c = tl.zeros((BH,), ACC)
    for e0 in range(start, end, BE):
        e, em, m2, j, at = row_block(e0, end, col, h, hm, H, BE)
        ga = weights(tl.sum(Gi[None, :, :] * gather(x, j, em, hf, hfm, HF, ACC), axis=2), e, h, H, seedp, drop,
                     scale, DROP)
        if HAS_GALPHA:
            ga += tl.load(galpha + at, mask=m2, other=0).to(ACC)
        c += tl.sum(tl.where(m2, tl.load(alpha + at, mask=m2, other=0).to(ACC) * ga, 0.0), axis=0)
        tl.store(dz + at, ga.to(dz.dtype.element_ty), mask=m2)
    return c


@triton.jit
def score_grads(alpha, dz, at, m2, c, ACC: tl.constexpr):
    """The softmax's gradient alpha (ga - c) at offsets at, ga as alpha_grads left it in
    dz, zeros outside m2."""
    ga = tl.load(dz + at, mask=m2, other=0).to(ACC)
    return tl.where(m2, tl.load(alpha + at, mask=m2, other=0).to(ACC) * (ga - c[None, :]), 0.0)


def _consts(x: torch.Tensor, scale: float, slope: float) -> torch.Tensor:
    """(scale, slope) on x's device in the kernels' accumulation type: a float argument
    reaches a Triton kernel as float32, which would round float64's LeakyReLU slope."""
    return torch.tensor([scale, slope], dtype=torch.float64 if x.dtype == torch.float64 else torch.float32,
                        device=x.device)


def _blocks(x: torch.Tensor):
    _, H, F = x.shape
    return {"BE": BLOCK_E, "BH": block(H), "BF": block(F), "ACC": acc_type(x.dtype)}


def forward(kernel, A: CSRView, x: torch.Tensor, operands, seed, drop: int, scale: float, slope: float,
            **flags):
    """(out (n, H, F), alpha (nnz, H)), x (m, H, F) the rows summed: kernel, one program
    per row, called as kernel(ptr, col, *operands, seed, drop, consts, alpha, out, H, F,
    DROP, **flags, BE, BH, BF, ACC)."""
    P = pattern(A)
    n, (_, H, F) = A.nrows, x.shape
    out = torch.empty(n, H, F, dtype=x.dtype, device=x.device)
    alpha = torch.empty(P.col.shape[0], H, dtype=x.dtype, device=x.device)
    if n and H:
        kernel[(n,)](P.ptr, P.col, *operands, seed, drop, _consts(x, scale, slope), alpha, out, H, F,
                     DROP=bool(drop), **flags, **_blocks(x))
    return out, alpha


class Pass(NamedTuple):
    """One kernel of a gradient and what it takes besides the common arguments: operands
    before them, outputs (written whole) after them, constexpr flags."""
    kernel: object
    operands: tuple
    outputs: tuple
    flags: dict


def grad(A: CSRView, x: torch.Tensor, seed, drop: int, scale: float, slope: float, alpha: torch.Tensor,
         G: torch.Tensor, galpha, rows: Pass, sources: Pass) -> torch.Tensor:
    """dz (nnz, H), the scores' gradient, x (m, H, F) the rows the forward summed; rows'
    kernel, one program per row, called as kernel(ptr, col, *operands, seed, drop, consts,
    alpha, G, galpha, dz, *outputs, H, F, DROP, HAS_GALPHA, **flags, BE, BH, BF, ACC),
    then sources', one program per column, as kernel(tptr, trow, perm, *operands, seed,
    drop, consts, alpha, G, dz, *outputs, H, F, DROP, **flags, BE, BH, BF, ACC).  With no
    head or no entry neither runs: the callers' outputs start at zero."""
    P = pattern(A)
    n, (m, H, F) = A.nrows, x.shape
    dz = torch.empty_like(alpha)
    if not (H and P.col.numel()):
        return dz
    G = G.contiguous()
    consts, blocks = _consts(x, scale, slope), _blocks(x)
    rows.kernel[(n,)](P.ptr, P.col, *rows.operands, seed, drop, consts, alpha, G, galpha, dz, *rows.outputs, H, F,
                      DROP=bool(drop), HAS_GALPHA=galpha is not None, **rows.flags, **blocks)
    tptr, trow, perm = transpose(P)
    sources.kernel[(m,)](tptr, trow, perm, *sources.operands, seed, drop, consts, alpha, G, dz, *sources.outputs, H,
                         F, DROP=bool(drop), **sources.flags, **blocks)
    return dz
