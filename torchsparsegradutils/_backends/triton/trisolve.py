"""The sparse triangular solve in Triton, level-scheduled: X = M^{-1} B for every batch
item, M = A or A^T (transpose), A upper or lower, unit diagonal implied or stored.
Signature as cpu.py's; its backward (a transposed solve and an SDDMM on A's pattern)
is _ops.trisolve_backward's, routed as every solve and SDDMM is.

The batch is one block-diagonal matrix (_common.pattern) and M's rows are put in
levels: a row's level is one more than the highest level of the rows it reads (M's
off-diagonal columns), so the rows of a level depend on earlier levels alone and are
solved together, one kernel launch per level (a program per row and block of B's
columns: x[i] = (b[i] - sum_{j != i} m_ij x[j]) / m_ii, in place on a copy of B, the
row's entries in their order: no atomics, the same bits every run).  M = A^T is read
through the transpose's pattern (_common.transpose), never built.  The levels (with
A's structure checks: triangular on the requested side, a diagonal entry in every row
or, unitriangular, none) are analysed once per structure and flags and kept in
_core.intake's DERIVED cache (the CUDA cache's keys); each call checks only that no
diagonal value is zero.  The analysis runs on the host (a few torch ops per level), so
a matrix of many levels (a long chain of dependencies) costs one launch per level."""
from typing import List, NamedTuple, Optional

import torch
import triton
import triton.language as tl

from ..._core.intake import derived
from ..._core.view import CSRView, entry_rows, item_rows
from ..torch_ops import check_diagonal, triangular_diagonal
from ._common import BLOCK_E, acc_type, block, pattern, transpose


class _Plan(NamedTuple):
    """M's rows (ptr, idx, and perm: entry e of M holds A's value perm[e], None for M = A),
    A's diagonal positions (None: unitriangular), the rows in level order (order) and
    the levels' bounds in it (lptr, host ints)."""
    ptr: torch.Tensor
    idx: torch.Tensor
    perm: Optional[torch.Tensor]
    diag: Optional[torch.Tensor]
    order: torch.Tensor
    lptr: List[int]


def _levels(ptr: torch.Tensor, idx: torch.Tensor, R: int):
    """(order, lptr): the R rows of the pattern (ptr, idx) by level (Kahn's order on the
    host, each level's rows increasing), its dependencies its off-diagonal entries."""
    ptr, idx = ptr.cpu(), idx.cpu()
    rows = entry_rows(ptr)
    off = idx != rows
    waits, on = rows[off], idx[off]                     # row waits[k] reads row on[k]
    pending = torch.bincount(waits, minlength=R)
    by = torch.argsort(on, stable=True)
    dptr = torch.zeros(R + 1, dtype=torch.int64)
    torch.cumsum(torch.bincount(on, minlength=R), 0, out=dptr[1:])
    dependents = waits.index_select(0, by)              # row j's dependents: dptr[j]:dptr[j+1]
    level = torch.nonzero(pending == 0).squeeze(1)
    order, lptr = [], [0]
    while level.numel():
        order.append(level)
        lptr.append(lptr[-1] + level.numel())
        start, count = dptr[level], dptr[level + 1] - dptr[level]
        total = int(count.sum())
        if total == 0:
            break
        first = torch.cumsum(count, 0) - count
        at = torch.repeat_interleave(start - first, count) + torch.arange(total)
        w = dependents.index_select(0, at)
        pending.index_add_(0, w, torch.full_like(w, -1))
        w = torch.unique(w)
        level = w[pending.index_select(0, w) == 0]
    order = torch.cat(order) if order else torch.zeros(0, dtype=torch.int64)
    assert order.numel() == R, "a triangular matrix's rows all reach a level"
    return order, lptr


def _plan(A: CSRView, upper: bool, unitriangular: bool, trans: bool) -> _Plan:
    """A's structure checked and M's levels analysed (see the module's docstring)."""
    P = pattern(A._replace(values=None))
    diag = triangular_diagonal(A, P.rows, P.col, upper, unitriangular)
    if trans:
        ptr, idx, perm = transpose(P)
    else:
        ptr, idx, perm = P.ptr, P.col, None
    order, lptr = _levels(ptr, idx, P.nrows)
    return _Plan(ptr, idx, perm, diag, order.to(ptr.device), lptr)


@triton.jit
def _level_kernel(order, ptr, idx, perm, val, diag, X, p, first, HAS_PERM: tl.constexpr, UNIT: tl.constexpr,
                  BE: tl.constexpr, BP: tl.constexpr, ACC: tl.constexpr):
    """Row i = order[first + program 0] of M: X[i, t] = (X[i, t] - sum over i's entries e
    off the diagonal of m_e X[idx[e], t]) / m_ii (no division with UNIT)."""
    i = tl.load(order + first + tl.program_id(0))
    t = tl.program_id(1) * BP + tl.arange(0, BP)
    tm = t < p
    start = tl.load(ptr + i)
    end = tl.load(ptr + i + 1)
    acc = tl.load(X + i * p + t, mask=tm, other=0).to(ACC)
    for e0 in range(start, end, BE):
        e = e0 + tl.arange(0, BE)
        em = e < end
        j = tl.load(idx + e, mask=em, other=0)
        em = em & (j != i)
        src = e
        if HAS_PERM:
            src = tl.load(perm + e, mask=em, other=0)
        v = tl.load(val + src, mask=em, other=0).to(ACC)
        x = tl.load(X + j[:, None] * p + t[None, :], mask=em[:, None] & tm[None, :], other=0).to(ACC)
        acc -= tl.sum(v[:, None] * x, axis=0)
    if not UNIT:
        acc = acc / tl.load(val + tl.load(diag + i)).to(ACC)
    tl.store(X + i * p + t, acc.to(X.dtype.element_ty), mask=tm)


def trisolve(A: CSRView, B: torch.Tensor, upper: bool, unitriangular: bool, transpose: bool) -> torch.Tensor:
    """X = A^{-1} B (or A^{-T} B with transpose) for every batch item of a triangular A;
    B is (n, p) or (b, n, p).  Returns a new tensor."""
    assert A.rows is None, "a square solve's view keeps every row"
    plan = derived(A, ("trisolve", upper, unitriangular, transpose),
                   lambda: _plan(A, upper, unitriangular, transpose))
    val = A.values.reshape(-1)
    if plan.diag is not None:
        check_diagonal(val, plan.diag)
    X = item_rows(B.detach()).clone(memory_format=torch.contiguous_format)    # B's negative bit applied
    p = X.shape[-1]
    if X.numel():
        BP = min(block(p), 64)
        val = val.contiguous()
        diag = plan.diag if plan.diag is not None else plan.ptr
        for k in range(len(plan.lptr) - 1):
            lo, hi = plan.lptr[k], plan.lptr[k + 1]
            _level_kernel[(hi - lo, triton.cdiv(p, BP))](plan.order, plan.ptr, plan.idx, plan.perm, val, diag, X, p,
                                                         lo, HAS_PERM=plan.perm is not None, UNIT=unitriangular,
                                                         BE=BLOCK_E, BP=BP, ACC=acc_type(X.dtype))
    return X.reshape(B.shape)
