"""What the graph-attention kernels (gat.py, gatv2.py) share: the dropout draw, a
program's tile of heads by features and its gathers of rows, and the launches: the
forward over the rows, the gradient by rows then by sources (through the transpose's
pattern).  The kernels, which differ in their math, stay in their modules.

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
    """(h, hm, hf, hfm): the heads (BH,) and their mask, a row's (head, feature) offsets
    (BH, BF) in an (., H, F) tensor and their mask."""
    h = tl.arange(0, BH)
    f = tl.arange(0, BF)
    hm = h < H
    return h, hm, h[:, None] * F + f[None, :], hm[:, None] & (f < F)[None, :]


@triton.jit
def gather(x, r, rm, hf, hfm, HF, ACC: tl.constexpr):
    """Rows r (BE,) of x (., H, F) as (BE, BH, BF) in ACC, zeros where rm (BE,) or hfm is False."""
    return tl.load(x + r[:, None, None] * HF + hf[None, :, :], mask=rm[:, None, None] & hfm[None, :, :],
                   other=0).to(ACC)


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
