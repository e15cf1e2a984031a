"""The sparse triangular solve in Triton, sync-free: X = M^{-1} B for every batch item,
M = A or A^T (transpose), A upper or lower, unit diagonal implied or stored.
Signature as cpu.py's; its backward (a transposed solve and an SDDMM on A's pattern)
is _ops.trisolve_backward's, routed as every solve and SDDMM is.

The batch is one block-diagonal matrix (_common.pattern).  One launch solves it: a
program per row of M and block of B's columns,
    x[i] = (b[i] - sum_{j != i} m_ij x[j]) / m_ii,
the row's entries in their order (no atomics: the same bits every run).  Programs run
in a topological order of M's rows (increasing rows where M is lower triangular,
decreasing where upper), so a row only waits for rows of earlier programs, which the
GPU has started before it.  The output starts filled with a NaN no arithmetic makes
(SENTINEL, a signalling NaN; a row's NaN is stored as the canonical one): a program
spins on volatile loads of the x[j] it reads until none holds the sentinel.  Each
value is written once, so there is no flag to order against the data, and no level
analysis: the plan of a structure (its checks and, for M = A^T, the transpose's
pattern, never A^T itself) is a few passes over its entries, kept in _core.structures'
DERIVED cache (the CUDA cache's keys); each call checks only that no diagonal value
is zero.  Under Triton's interpreter the programs run one after another in order, so
no load ever sees the sentinel."""
from typing import NamedTuple, Optional

import torch
import triton
import triton.language as tl

from ..._core.structures import derived
from ..._core.view import CSRView, item_rows
from ..torch_ops.trisolve import check_diagonal, triangular_diagonal
from ._common import BLOCK_E, acc_type, block, pattern, transpose

# a signalling NaN of each width, as (integer dtype, bits); arithmetic never yields one
_SENTINEL = {torch.float64: (torch.int64, 0x7FF4A5A5A5A5A5A5), torch.float32: (torch.int32, 0x7FA5A5A5),
             torch.float16: (torch.int16, 0x7D5A), torch.bfloat16: (torch.int16, 0x7FA5)}
_BITS = {torch.int64: tl.int64, torch.int32: tl.int32, torch.int16: tl.int16}


class _Plan(NamedTuple):
    """M's rows (ptr, idx, and perm: entry e of M holds A's value perm[e], None for M = A)
    and A's diagonal positions (None: unitriangular)."""
    ptr: torch.Tensor
    idx: torch.Tensor
    perm: Optional[torch.Tensor]
    diag: Optional[torch.Tensor]


def _plan(A: CSRView, upper: bool, unitriangular: bool, trans: bool) -> _Plan:
    """A's structure checked, and M's rows (see the module's docstring)."""
    P = pattern(A._replace(values=None))
    diag = triangular_diagonal(A, P.rows, P.col, upper, unitriangular)
    if trans:
        ptr, idx, perm = transpose(P)
    else:
        ptr, idx, perm = P.ptr, P.col, None
    return _Plan(ptr, idx, perm, diag)


@triton.jit
def _solve_kernel(ptr, idx, perm, val, diag, B, X, R, p, REVERSE: tl.constexpr, HAS_PERM: tl.constexpr,
                  UNIT: tl.constexpr, IT: tl.constexpr, SENTINEL: tl.constexpr, BE: tl.constexpr,
                  BP: tl.constexpr, ACC: tl.constexpr):
    """Row i of M (program q, i = q, or R-1-q with REVERSE): X[i, t] = (B[i, t] - sum over
    i's entries e off the diagonal of m_e X[idx[e], t]) / m_ii (no division with UNIT),
    each X[idx[e], t] read once it no longer holds the sentinel (IT: X's bits)."""
    q = tl.program_id(0).to(tl.int64)
    if REVERSE:
        i = R - 1 - q
    else:
        i = q
    t = tl.program_id(1) * BP + tl.arange(0, BP)
    tm = t < p
    start = tl.load(ptr + i)
    end = tl.load(ptr + i + 1)
    acc = tl.load(B + i * p + t, mask=tm, other=0).to(ACC)
    for e0 in range(start, end, BE):
        e = e0 + tl.arange(0, BE)
        em = e < end
        j = tl.load(idx + e, mask=em, other=0)
        em = em & (j != i)
        src = e
        if HAS_PERM:
            src = tl.load(perm + e, mask=em, other=0)
        v = tl.load(val + src, mask=em, other=0).to(ACC)
        at = X + j[:, None] * p + t[None, :]
        m2 = em[:, None] & tm[None, :]
        x = tl.load(at, mask=m2, other=0, volatile=True)
        while tl.max(tl.where(m2 & (x.to(IT, bitcast=True) == SENTINEL), 1, 0)) > 0:
            x = tl.load(at, mask=m2, other=0, volatile=True)
        acc -= tl.sum(v[:, None] * x.to(ACC), axis=0)
    if not UNIT:
        acc = acc / tl.load(val + tl.load(diag + i)).to(ACC)
    out = acc.to(X.dtype.element_ty)
    tl.store(X + i * p + t, tl.where(out != out, float("nan"), out), mask=tm)  # noqa: PLR0124  (NaN: never the sentinel)


def trisolve(A: CSRView, B: torch.Tensor, upper: bool, unitriangular: bool, transpose: bool) -> torch.Tensor:
    """X = A^{-1} B (or A^{-T} B with transpose) for every batch item of a triangular A;
    B is (n, p) or (b, n, p).  Returns a new tensor."""
    assert A.rows is None, "a square solve's view keeps every row"
    plan = derived(A, ("trisolve", upper, unitriangular, transpose),
                   lambda: _plan(A, upper, unitriangular, transpose))
    val = A.values.reshape(-1)
    if plan.diag is not None:
        check_diagonal(val, plan.diag)
    B2 = item_rows(B.detach()).resolve_neg().contiguous()        # B's negative bit applied
    (R, p), (itype, bits) = B2.shape, _SENTINEL[B2.dtype]
    X = torch.full((R, p), bits, dtype=itype, device=B2.device).view(B2.dtype)
    if X.numel():
        BP = min(block(p), 64)
        _solve_kernel[(R, triton.cdiv(p, BP))](plan.ptr, plan.idx, plan.perm, val.contiguous(),
                                               plan.diag if plan.diag is not None else plan.ptr, B2, X, R, p,
                                               REVERSE=upper != transpose, HAS_PERM=plan.perm is not None,
                                               UNIT=unitriangular, IT=_BITS[itype], SENTINEL=bits, BE=BLOCK_E, BP=BP,
                                               ACC=acc_type(X.dtype), num_warps=2)
    return X.reshape(B.shape)
