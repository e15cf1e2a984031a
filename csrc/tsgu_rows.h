/* tsgu_rows.h: the row walk shared by the kernels, a template fragment (no
 * include guard): a kernel's template body includes it once per variant, with
 * idx_t, TSGU_FN (and for widened, real_t, acc_t, TSGU_LOAD, TSGU_NARROW) defined. */

#ifndef TSGU_ROWS_ONCE /* the parts that are the same in every variant */
#define TSGU_ROWS_ONCE
#include "tsgu_prefetch.h"

/* Kernels walk a row's columns j (after prev, -1 at the row's start) and stop at
 * the first that fails j > prev && j < ncols; this says which rule it broke. */
static inline int tsgu_col_error(int64_t j, int64_t ncols)
{
    return j < 0 || j >= ncols ? TSGU_ECOL_RANGE : TSGU_ECOL_ORDER;
}

/* the item of global row r of A: r / A->nrows, with no division where A holds one
 * item (a 64-bit division a row: 2-6% of the softmax gradient's time on 10^5 rows
 * of 16 entries on average) */
static inline int64_t tsgu_item_of(const tsgu_csr *A, int64_t r)
{
    return A->batch == 1 ? 0 : r / A->nrows;
}

/* a prefetch of the row that column index j (not yet checked) names in a dense
 * matrix X of row stride ld, columns [t0, t0 + w): only when j is in [0, m),
 * so no address is computed from an out-of-range index */
#define TSGU_PREFETCH_ROW(X, j, m, ld, t0, w)                                    \
    do {                                                                       \
        int64_t j_ = (j);                                                      \
        if (j_ >= 0 && j_ < (m))                                               \
            for (int64_t t_ = 0; t_ < (w); t_ += TSGU_LINE / (int64_t)sizeof(*(X))) \
                TSGU_PREFETCH((X) + j_ * (ld) + (t0) + t_);                    \
    } while (0)
#endif

/* The entries [*start, *end) of row i of item k, with the row's two pointers
 * checked (0 <= ptr[q] <= ptr[q+1] <= entries left after the item's offset)
 * before anything is computed from them.  Returns 1 when they are valid, 0 when
 * not (TSGU_EPTR_ORDER). */
TSGU_ALWAYS_INLINE int TSGU_FN(row_entries)(const tsgu_csr *A, int64_t k, int64_t i, int64_t *start,
                                            int64_t *end)
{
    const idx_t *Ap = A->ptr;
    int64_t q = k * A->ptr_stride + i, off = k * A->entry_stride;
    int64_t a = Ap[q], b = Ap[q + 1];
    int ok = a >= 0 && a <= b && b <= A->nnz - off;
    *start = ok ? a + off : 0;     /* an empty range when not */
    *end = ok ? b + off : 0;
    return ok;
}

#ifdef TSGU_HALF_TOO
/* the p values at x as acc_t: x itself, or (16-bit values) widened into w */
TSGU_ISA_ATTR TSGU_ALWAYS_INLINE const acc_t *TSGU_FN(widened)(const real_t *x, acc_t *w, const int64_t p)
{
#if TSGU_NARROW
    for (int64_t t = 0; t < p; t++) w[t] = TSGU_LOAD(x[t]);
    return w;
#else
    (void)w;
    (void)p;
    return x;
#endif
}
#endif

#ifdef TSGU_SPGEMM_ROWS
/* The sparse @ sparse kernels walk A's entries e in order and read, for each, the row
 * of B (of item k) that its column names: a cache miss for B's pointer, then one for
 * the row.  At entry e this prefetches B's pointer for entry e + 2*TSGU_BROW_AHEAD and
 * first two cache lines of the columns (and values, Bv not NULL) of B's row for entry e + TSGU_BROW_AHEAD, whose
 * pointer is near by then.  A and B must be checked structures: only in-bounds
 * pointers are read. */
#define TSGU_BROW_AHEAD 8
TSGU_ALWAYS_INLINE void TSGU_FN(prefetch_brow)(const tsgu_csr *A, const tsgu_csr *B, int64_t k, int64_t e,
                                               const real_t *Bv)
{
    const idx_t *Aj = A->col, *Bp = B->ptr, *Bj = B->col;
    int64_t far = e + 2 * TSGU_BROW_AHEAD, near = e + TSGU_BROW_AHEAD;
    if (far < A->nnz) TSGU_PREFETCH(Bp + k * B->ptr_stride + Aj[far]);
    if (near < A->nnz) {
        int64_t s = Bp[k * B->ptr_stride + Aj[near]] + k * B->entry_stride;
        TSGU_PREFETCH(Bj + s);
        TSGU_PREFETCH(Bj + s + TSGU_LINE / sizeof *Bj);
        if (Bv) {
            TSGU_PREFETCH(Bv + s);
            TSGU_PREFETCH(Bv + s + TSGU_LINE / sizeof *Bv);
        }
    }
}
#endif
