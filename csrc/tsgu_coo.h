/* tsgu_coo.h: a COO index array read in chunks of entries (coo_row_ptr.c,
 * softmax_coo.c).  idx holds sparse_dims rows of nnz, (row, col) or (batch,
 * row, col), row d at idx + d*ld, sizes[d] each; entry e lies in global row
 * r = batch*n + row.  A chunk checks the indices of every entry it reads, and
 * its first entry's order against the entry before it, whose range the chunk
 * holding that entry checks.  A chunk that compresses the rows writes
 *     ptr[r] = first entry whose global row is >= r
 * for the rows its entries reach, within the limits tsgu_coo_limits gives it. */
#ifndef TSGU_COO_H
#define TSGU_COO_H

#include "tsgu.h"

typedef struct {
    const int64_t *bi, *ri, *ci; /* batch (NULL: none), row and column index of each entry */
    int64_t nb, n, m;            /* items, rows and columns */
} tsgu_coo;

static inline tsgu_coo tsgu_coo_of(const int64_t *idx, int64_t ld, int64_t sparse_dims, const int64_t *sizes)
{
    tsgu_coo c = {sparse_dims == 3 ? idx : NULL, idx + (sparse_dims - 2) * ld, idx + (sparse_dims - 1) * ld,
                  sparse_dims == 3 ? sizes[0] : 1, sizes[sparse_dims - 2], sizes[sparse_dims - 1]};
    return c;
}

/* the global row of entry e, or -1 when its batch or row index is out of range */
static inline int64_t tsgu_coo_row(const tsgu_coo *c, int64_t e)
{
    int64_t b = c->bi ? c->bi[e] : 0, i = c->ri[e];
    return b < 0 || b >= c->nb || i < 0 || i >= c->n ? -1 : b * c->n + i;
}

/* the global row and column of the entry before a chunk's first entry e0 (-1 and
 * -1 when e0 = 0): TSGU_EIDX_RANGE, *bad = e0 - 1, when that row is out of range */
static inline int tsgu_coo_before(const tsgu_coo *c, int64_t e0, int64_t *prev, int64_t *prevj, int64_t *bad)
{
    *prev = *prevj = -1;
    if (e0 == 0) return TSGU_OK;
    if ((*prev = tsgu_coo_row(c, e0 - 1)) < 0) {
        *bad = e0 - 1;
        return TSGU_EIDX_RANGE;
    }
    *prevj = c->ci[e0 - 1];
    return TSGU_OK;
}

/* The row pointers chunk k (entries [bounds[k], bounds[k+1]) of K) may write:
 * ptr[s] for s in (lim[k], lim[k+1]], where
 *     lim[0] = -1,  lim[k] = max(lim[k-1], row of entry bounds[k] - 1),  lim[K] = nb*n
 * (a row out of range counts as -1).  On entries in order lim[k] is the row of
 * the entry before chunk k, so every chunk writes exactly the pointers of the rows
 * it reaches; on entries out of order (an error the chunks report) the limits
 * still keep any two chunks' writes apart. */
static inline void tsgu_coo_limits(const tsgu_coo *c, const int64_t *bounds, int64_t K, int64_t *lim)
{
    lim[0] = -1;
    for (int64_t k = 1; k < K; k++) {
        int64_t r = bounds[k] > 0 ? tsgu_coo_row(c, bounds[k] - 1) : -1;
        lim[k] = r > lim[k - 1] ? r : lim[k - 1];
    }
    lim[K] = c->nb * c->n;
}

#endif
