/* coo_row_ptr.c: check a COO index array and compress its rows.
 *     idx: sparse_dims rows of nnz, (row, col) or (batch, row, col), row d at
 *          idx + d*ld (ld >= nnz: a view into a larger buffer is fine), sizes[d] each
 * Every index must lie in [0, sizes[d]).  With ptr given (b*n+1 entries), the
 * entries must be strictly increasing in (global row r = batch*n + row, col), as
 * a coalesced tensor's are (a row out of order: TSGU_EIDX_ORDER; a column out of
 * order or repeated within a row: TSGU_ECOL_ORDER, so that no kernel need check
 * the columns again), and
 *     ptr[r] = first entry whose global row is >= r   (nnz if none)
 * which is the global-layout row pointer array of tsgu_csr.  One pass, split
 * over threads by entries: the boundary of row r is written by the thread
 * holding the entry where the row index first reaches r, so the result does not
 * depend on the thread count; on entries out of order too, no two threads write
 * one pointer (tsgu_coo.h's limits).
 * With `coalesced` given (and ptr), the row order is a question rather than a
 * rule: *coalesced = 1 when the entries are strictly increasing in (global row,
 * col), i.e. sorted and free of duplicates as a coalesced tensor's are, and 0
 * otherwise (then ptr is unspecified); every range is checked either way.
 * On TSGU_EIDX_RANGE, *bad (where given) is the first entry holding an index out
 * of range: each thread stops at the first of its chunk, and the earliest chunk's
 * is the first overall, whatever the thread count. */
#include "tsgu_coo.h"
#include "tsgu_parallel.h"

#define TSGU_MIN_ENTRIES (1 << 18) /* entries below which one thread does it all */

typedef struct {
    tsgu_coo c;
    int64_t nnz, T;
    const int64_t *bounds; /* task t: entries [bounds[t], bounds[t+1]) */
    const int64_t *lim;    /* and the pointers (lim[t], lim[t+1]] (tsgu_coo.h) */
    int64_t *ptr;
    int probe;             /* order is asked about (coalesced != NULL), not required */
    int *sorted;           /* per task: 1 while its entries are strictly increasing */
    int64_t *bad;          /* per task: its first entry out of range, or -1 */
} coo_ctx;

/* task t's entries; batched: x->c.bi is not NULL */
TSGU_ALWAYS_INLINE int coo_scan(const coo_ctx *x, int64_t t, const int batched)
{
    const tsgu_coo *c = &x->c;
    const int64_t e0 = x->bounds[t], e1 = x->bounds[t + 1], hi = x->lim[t + 1];
    int64_t e = e0, w = x->lim[t], *ptr = x->ptr;
    int64_t prev, prevj;   /* global row and column of the entry before */
    x->bad[t] = -1;
    int status = tsgu_coo_before(c, e0, &prev, &prevj, &x->bad[t]);
    if (status != TSGU_OK) return status;
    if (x->sorted) x->sorted[t] = 1;
    if (ptr) {
        /* a row at a time; only the first can continue the row before the task's */
        while (e < e1 && status == TSGU_OK) {
            const int64_t r = tsgu_coo_entry(c, e, batched);
            if (r < 0) status = TSGU_EIDX_RANGE;
            else if (r < prev || (r == prev && c->ci[e] <= prevj)) status = r < prev ? TSGU_EIDX_ORDER : TSGU_ECOL_ORDER;
            else {
                for (int64_t top = r < hi ? r : hi; w < top;) ptr[++w] = e;   /* rows (prev, r] start here */
                prev = r;
                e = tsgu_coo_row_end(c, e, e1, batched, &status);
            }
        }
        if (status == TSGU_OK) {
            if (t == x->T - 1)                                     /* rows after the last entry */
                while (w < hi) ptr[++w] = x->nnz;
            return TSGU_OK;
        }
        if (status == TSGU_EIDX_RANGE) {
            x->bad[t] = e;
            return status;
        }
        if (!x->probe) return status;
        x->sorted[t] = 0;          /* entry e is out of order (its indices in range): ranges only after it */
        e++;
    }
    if ((e = tsgu_coo_first_bad(c, e, e1)) < e1) {
        x->bad[t] = e;
        return TSGU_EIDX_RANGE;
    }
    return TSGU_OK;
}

static int coo_task(void *vctx, int64_t t)
{
    const coo_ctx *x = vctx;
    return x->c.bi ? coo_scan(x, t, 1) : coo_scan(x, t, 0);
}

int tsgu_coo_row_ptr(const int64_t *idx, int64_t ld, int64_t sparse_dims, int64_t nnz,
                     const int64_t *sizes, int64_t *ptr, int nthreads, int *coalesced, int64_t *bad)
{
    int64_t T = nthreads < 1 ? 1 : nthreads;
    if (T > TSGU_MAX_THREADS) T = TSGU_MAX_THREADS;
    if (T > nnz / TSGU_MIN_ENTRIES) T = nnz / TSGU_MIN_ENTRIES;
    if (T < 1) T = 1;
    int sorted[TSGU_MAX_THREADS];
    int64_t first_bad[TSGU_MAX_THREADS], bounds[TSGU_MAX_THREADS + 1], lim[TSGU_MAX_THREADS + 1];
    tsgu_coo c = tsgu_coo_of(idx, ld, sparse_dims, sizes);
    for (int64_t t = 0; t <= T; t++) bounds[t] = nnz * t / T;
    tsgu_coo_limits(&c, bounds, T, lim);
    coo_ctx x = {c, nnz, T, bounds, lim, ptr, coalesced != NULL, coalesced ? sorted : NULL, first_bad};
    int status = tsgu_parallel_tasks(T, coo_task, &x);
    if (status == TSGU_EIDX_RANGE && bad) {
        int64_t t = 0;
        while (first_bad[t] < 0) t++;        /* a chunk found one: the status says so */
        *bad = first_bad[t];
    }
    if (coalesced && status == TSGU_OK) {
        *coalesced = 1;
        for (int64_t t = 0; t < T; t++) *coalesced &= sorted[t];
    }
    return status;
}
