/* coo_row_ptr.c: check a COO index array and compress its rows.
 *     idx: sparse_dims rows of nnz, (row, col) or (batch, row, col), row d at
 *          idx + d*ld (ld >= nnz: a view into a larger buffer is fine), sizes[d] each
 * Every index must lie in [0, sizes[d]).  With ptr given (b*n+1 entries), the
 * entries must be sorted by global row r = batch*n + row, as a coalesced
 * tensor's are, and
 *     ptr[r] = first entry whose global row is >= r   (nnz if none)
 * which is the global-layout row pointer array of tsgu_csr.  One pass, split
 * over threads by entries: the boundary of row r is written by the thread
 * holding the entry where the row index first reaches r, so writes never
 * overlap and the result does not depend on the thread count. */
#include "tsgu.h"

#define TSGU_MIN_ENTRIES (1 << 18) /* entries below which one thread does it all */

typedef struct {
    const int64_t *idx;
    int64_t ld, sd, nnz, T;
    const int64_t *sizes;
    int64_t *ptr;
} coo_ctx;

static int coo_task(void *vctx, int64_t t)
{
    const coo_ctx *x = vctx;
    int64_t sd = x->sd, nnz = x->nnz, e0 = nnz * t / x->T, e1 = nnz * (t + 1) / x->T;
    const int64_t *bi = sd == 3 ? x->idx : NULL;      /* batch index, if any */
    const int64_t *ri = x->idx + (sd - 2) * x->ld;    /* row index */
    const int64_t *ci = x->idx + (sd - 1) * x->ld;    /* column index */
    int64_t nb = sd == 3 ? x->sizes[0] : 1, n = x->sizes[sd - 2], m = x->sizes[sd - 1];
    int64_t R = nb * n, *ptr = x->ptr;
    /* global row of the entry before this chunk (-1 before the first entry);
     * its range is checked by the chunk that owns it */
    int64_t prev = -1;
    if (e0 > 0) {
        int64_t b = bi ? bi[e0 - 1] : 0, i = ri[e0 - 1];
        if (b < 0 || b >= nb || i < 0 || i >= n) return TSGU_EIDX_RANGE;
        prev = b * n + i;
    }
    for (int64_t e = e0; e < e1; e++) {
        int64_t b = bi ? bi[e] : 0, i = ri[e], j = ci[e];
        if (b < 0 || b >= nb || i < 0 || i >= n || j < 0 || j >= m) return TSGU_EIDX_RANGE;
        int64_t r = b * n + i;
        if (!ptr) continue;
        if (r < prev) return TSGU_EIDX_ORDER;
        for (int64_t s = prev + 1; s <= r; s++) ptr[s] = e;   /* rows (prev, r] start here */
        prev = r;
    }
    if (ptr && t == x->T - 1)                                /* rows after the last entry */
        for (int64_t s = prev + 1; s <= R; s++) ptr[s] = nnz;
    return TSGU_OK;
}

int tsgu_coo_row_ptr(const int64_t *idx, int64_t ld, int64_t sparse_dims, int64_t nnz,
                     const int64_t *sizes, int64_t *ptr, int nthreads)
{
    int64_t T = nthreads < 1 ? 1 : nthreads;
    if (T > TSGU_MAX_THREADS) T = TSGU_MAX_THREADS;
    if (T > nnz / TSGU_MIN_ENTRIES) T = nnz / TSGU_MIN_ENTRIES;
    if (T < 1) T = 1;
    coo_ctx x = {idx, ld, sparse_dims, nnz, T, sizes, ptr};
    return tsgu_parallel_tasks(T, coo_task, &x);
}
