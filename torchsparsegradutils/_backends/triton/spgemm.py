"""sparse @ sparse (sparse_mm with a sparse B): the masked-SpGEMM backward in Triton,
and the forward through PyTorch's CSR @ CSR (cuSPARSE on CUDA) until a kernel of ours
is faster.  Signatures as cpu.py's.

The backward gives the gradient at A's and B's stored entries only, for an upstream
G = dL/dC dense or sparse (a CSRView, any pattern):
    gA[(i, j)] = sum over B's row j of b[(j, c)] G[i, c]        one program per A entry
    gB[(j, c)] = sum over A's column j of a[(i, j)] G[i, c]     one program per B entry,
                                                                through A's transpose
each a sum in a fixed order (B's row, A's column by increasing row): no atomics, the
same bits every run.  A sparse G is read by a binary search of its row.  The batch is
one block-diagonal matrix (_common.pattern): A's global columns are B's global rows."""
import torch
import triton
import triton.language as tl

from ..._core.view import CSRView
from ..torch_ops.spgemm import spgemm_csr as spgemm  # noqa: F401  (the forward: PyTorch's CSR @ CSR)
from ._common import BLOCK_E, acc_type, pattern, transpose


@triton.jit
def _g_at(G, gptr, gcol, i, c, n, m, SPARSE_G: tl.constexpr, STEPS: tl.constexpr, ACC: tl.constexpr, mask):
    """G[i, c] at global row i and global column c (0 where a sparse G stores none)."""
    if SPARSE_G:
        lo = tl.load(gptr + i, mask=mask, other=0)
        hi = tl.load(gptr + i + 1, mask=mask, other=0)
        end = hi
        for _ in range(STEPS):                  # the first position whose column is >= c
            active = lo < hi
            mid = (lo + hi) // 2
            less = active & (tl.load(gcol + mid, mask=mask & active, other=0) < c)
            lo = tl.where(less, mid + 1, lo)
            hi = tl.where(active & (less == 0), mid, hi)
        hit = mask & (lo < end) & (tl.load(gcol + lo, mask=mask & (lo < end), other=-1) == c)
        return tl.load(G + lo, mask=hit, other=0).to(ACC)
    else:
        return tl.load(G + i * m + (c - (i // n) * m), mask=mask, other=0).to(ACC)


@triton.jit
def _grad_a_kernel(arow, acol, bptr, bcol, bval, G, gptr, gcol, ga, n, m, SPARSE_G: tl.constexpr,
                   STEPS: tl.constexpr, BE: tl.constexpr, ACC: tl.constexpr):
    """ga[e] = sum over B's row acol[e] of b[f] G[arow[e], bcol[f]]."""
    e = tl.program_id(0)
    i = tl.load(arow + e)
    j = tl.load(acol + e)
    start = tl.load(bptr + j)
    end = tl.load(bptr + j + 1)
    acc = tl.zeros((BE,), ACC)
    for f0 in range(start, end, BE):
        f = f0 + tl.arange(0, BE)
        fm = f < end
        c = tl.load(bcol + f, mask=fm, other=0)
        b = tl.load(bval + f, mask=fm, other=0).to(ACC)
        acc += b * _g_at(G, gptr, gcol, i + tl.zeros((BE,), tl.int64), c, n, m, SPARSE_G, STEPS, ACC, fm)
    tl.store(ga + e, tl.sum(acc, axis=0).to(ga.dtype.element_ty))


@triton.jit
def _grad_b_kernel(brow, bcol, tptr, trow, tperm, aval, G, gptr, gcol, gb, n, m, SPARSE_G: tl.constexpr,
                   STEPS: tl.constexpr, BE: tl.constexpr, ACC: tl.constexpr):
    """gb[f] = sum over A's column brow[f] (rows trow, values aval[tperm]) of a G[row, bcol[f]]."""
    f = tl.program_id(0)
    j = tl.load(brow + f)
    c = tl.load(bcol + f)
    start = tl.load(tptr + j)
    end = tl.load(tptr + j + 1)
    acc = tl.zeros((BE,), ACC)
    for e0 in range(start, end, BE):
        e = e0 + tl.arange(0, BE)
        em = e < end
        i = tl.load(trow + e, mask=em, other=0)
        a = tl.load(aval + tl.load(tperm + e, mask=em, other=0), mask=em, other=0).to(ACC)
        acc += a * _g_at(G, gptr, gcol, i, c + tl.zeros((BE,), tl.int64), n, m, SPARSE_G, STEPS, ACC, em)
    tl.store(gb + f, tl.sum(acc, axis=0).to(gb.dtype.element_ty))


def spgemm_grad(A: CSRView, B: CSRView, G, need_a: bool, need_b: bool):
    """(grad_A, grad_B) of A @ B w.r.t. A's and B's values, shaped like A.col and B.col
    (None where not needed)."""
    PA, PB = pattern(A), pattern(B)
    dtype, acc = A.values.dtype, acc_type(A.values.dtype)
    n, m = A.nrows, B.ncols
    if isinstance(G, CSRView):
        PG = pattern(G)
        g, gptr, gcol, sparse = PG.values.contiguous(), PG.ptr, PG.col, True
        longest = int((PG.ptr[1:] - PG.ptr[:-1]).max()) if PG.nrows else 0
        steps = max(1, longest.bit_length())
    else:
        g, gptr, gcol, sparse, steps = G.reshape(-1).contiguous(), None, None, False, 1
    ga = gb = None
    if need_a:
        ga = torch.empty(PA.col.numel(), dtype=dtype, device=PA.col.device)
        if ga.numel():
            _grad_a_kernel[(ga.numel(),)](PA.rows, PA.col, PB.ptr, PB.col, PB.values.contiguous(), g, gptr, gcol, ga,
                                          n, m, SPARSE_G=sparse, STEPS=steps, BE=BLOCK_E, ACC=acc)
        ga = ga.reshape(A.col.shape)
    if need_b:
        gb = torch.empty(PB.col.numel(), dtype=dtype, device=PB.col.device)
        if gb.numel():
            tptr, trow, tperm = transpose(PA)
            _grad_b_kernel[(gb.numel(),)](PB.rows, PB.col, tptr, trow, tperm, PA.values.contiguous(), g, gptr, gcol,
                                          gb, n, m, SPARSE_G=sparse, STEPS=steps, BE=BLOCK_E, ACC=acc)
        gb = gb.reshape(B.col.shape)
    return ga, gb
