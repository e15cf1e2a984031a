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
 * holding the entry where the row index first reaches r, so writes never
 * overlap and the result does not depend on the thread count.
 * With `coalesced` given (and ptr), the row order is a question rather than a
 * rule: *coalesced = 1 when the entries are strictly increasing in (global row,
 * col), i.e. sorted and free of duplicates as a coalesced tensor's are, and 0
 * otherwise (then ptr is unspecified); every range is checked either way.
 * On TSGU_EIDX_RANGE, *bad (where given) is the first entry holding an index out
 * of range: each thread stops at the first of its chunk, and the earliest chunk's
 * is the first overall, whatever the thread count. */
#include "tsgu.h"
#include "tsgu_parallel.h"

#define TSGU_MIN_ENTRIES (1 << 18) /* entries below which one thread does it all */

typedef struct {
    const int64_t *idx;
    int64_t ld, sd, nnz, T;
    const int64_t *sizes;
    int64_t *ptr;
    int probe;            /* order is asked about (coalesced != NULL), not required */
    int *sorted;          /* per task: 1 while its entries are strictly increasing */
    int64_t *bad;         /* per task: its first entry out of range, or -1 */
} coo_ctx;

static int coo_task(void *vctx, int64_t t)
{
    const coo_ctx *x = vctx;
    int64_t sd = x->sd, nnz = x->nnz, T = x->T, e0 = nnz * t / T, e1 = nnz * (t + 1) / T;
    const int64_t *bi = sd == 3 ? x->idx : NULL;      /* batch index, if any */
    const int64_t *ri = x->idx + (sd - 2) * x->ld;    /* row index */
    const int64_t *ci = x->idx + (sd - 1) * x->ld;    /* column index */
    int64_t nb = sd == 3 ? x->sizes[0] : 1, n = x->sizes[sd - 2], m = x->sizes[sd - 1];
    int64_t R = nb * n, *ptr = x->ptr;
    int probe = x->probe;
    /* global row and column of the entry before this chunk (-1 before the first
     * entry); its range is checked by the chunk that owns it */
    int64_t prev = -1, prevj = -1;
    x->bad[t] = -1;
    if (e0 > 0) {
        int64_t b = bi ? bi[e0 - 1] : 0, i = ri[e0 - 1];
        if (b < 0 || b >= nb || i < 0 || i >= n) {
            x->bad[t] = e0 - 1;
            return TSGU_EIDX_RANGE;
        }
        prev = b * n + i;
        prevj = ci[e0 - 1];
    }
    int sorted = 1;       /* 0 once a probe meets an entry out of (r, j) order */
    for (int64_t e = e0; e < e1; e++) {
        int64_t b = bi ? bi[e] : 0, i = ri[e], j = ci[e];
        if (b < 0 || b >= nb || i < 0 || i >= n || j < 0 || j >= m) {
            x->bad[t] = e;
            return TSGU_EIDX_RANGE;
        }
        int64_t r = b * n + i;
        if (!ptr || !sorted) continue;                       /* ranges only */
        if (r < prev && !probe) return TSGU_EIDX_ORDER;
        if (r == prev && j <= prevj && !probe) return TSGU_ECOL_ORDER;
        if (probe && (r < prev || (r == prev && j <= prevj))) {
            sorted = 0;                                      /* stop filling ptr */
            continue;
        }
        for (int64_t s = prev + 1; s <= r; s++) ptr[s] = e;   /* rows (prev, r] start here */
        prev = r;
        prevj = j;
    }
    if (x->sorted) x->sorted[t] = sorted;
    if (ptr && sorted && t == T - 1)                      /* rows after the last entry */
        for (int64_t s = prev + 1; s <= R; s++) ptr[s] = nnz;
    return TSGU_OK;
}

int tsgu_coo_row_ptr(const int64_t *idx, int64_t ld, int64_t sparse_dims, int64_t nnz,
                     const int64_t *sizes, int64_t *ptr, int nthreads, int *coalesced, int64_t *bad)
{
    int64_t T = nthreads < 1 ? 1 : nthreads;
    if (T > TSGU_MAX_THREADS) T = TSGU_MAX_THREADS;
    if (T > nnz / TSGU_MIN_ENTRIES) T = nnz / TSGU_MIN_ENTRIES;
    if (T < 1) T = 1;
    int sorted[TSGU_MAX_THREADS];
    int64_t first_bad[TSGU_MAX_THREADS];
    coo_ctx x = {idx, ld, sparse_dims, nnz, T, sizes, ptr, coalesced != NULL, coalesced ? sorted : NULL, first_bad};
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
