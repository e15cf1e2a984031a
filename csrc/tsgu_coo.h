/* tsgu_coo.h: a COO index array read in chunks of entries (coo_row_ptr.c,
 * softmax_coo.c).  idx holds sparse_dims rows of nnz, (row, col) or (batch,
 * row, col), row d at idx + d*ld, sizes[d] each; entry e lies in global row
 * r = batch*n + row.  A chunk checks the indices of every entry it reads, and
 * its first entry's order against the entry before it, whose range the chunk
 * holding that entry checks.  A chunk that compresses the rows writes
 *     ptr[r] = first entry whose global row is >= r
 * for the rows its entries reach, within the limits tsgu_coo_limits gives it.
 * The scans (tsgu_coo_entry, tsgu_coo_row_end, tsgu_coo_first_bad) take a row's
 * entries in a loop of their own, on the arrays held in locals, the bounds
 * compared unsigned (a negative index as a huge one), the batch a constant where
 * they are inlined (a kernel's loop compiled for each case).  coo_row_ptr.c on
 * 1.5*10^6 entries (10^5 rows, power law), one thread: 5.4 ms with one step of
 * all the checks per entry through the struct, 2.4 ms so; a max over the
 * indices alone takes about 1.8 ms. */
#ifndef TSGU_COO_H
#define TSGU_COO_H

#include "tsgu.h"
#include "tsgu_inline.h"

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

/* the global row of entry e, or -1 when one of its indices, the column's too, is
 * out of range; batched: c->bi is not NULL */
TSGU_ALWAYS_INLINE int64_t tsgu_coo_entry(const tsgu_coo *c, int64_t e, const int batched)
{
    const uint64_t b = batched ? (uint64_t)c->bi[e] : 0, i = (uint64_t)c->ri[e], n = (uint64_t)c->n;
    if ((batched && b >= (uint64_t)c->nb) || i >= n || (uint64_t)c->ci[e] >= (uint64_t)c->m) return -1;
    return (int64_t)(b * n + i);
}

/* The entry past the row of entry e (indices in range), within [e, e1): the first
 * whose batch or row index differs from e's.  The columns of the row's entries after
 * e are checked on the way: where one is out of range (*status TSGU_EIDX_RANGE) or
 * not above the one before (TSGU_ECOL_ORDER), that entry is returned instead;
 * *status is left as it was otherwise. */
TSGU_ALWAYS_INLINE int64_t tsgu_coo_row_end(const tsgu_coo *c, int64_t e, int64_t e1, const int batched,
                                            int *status)
{
    const int64_t *bi = c->bi, *ri = c->ri, *ci = c->ci, i = ri[e], b = batched ? bi[e] : 0;
    const uint64_t m = (uint64_t)c->m;
    int64_t prevj = ci[e];
    for (e++; e < e1 && ri[e] == i && (!batched || bi[e] == b); e++) {
        const int64_t j = ci[e];
        if ((uint64_t)j >= m || j <= prevj) {
            *status = (uint64_t)j >= m ? TSGU_EIDX_RANGE : TSGU_ECOL_ORDER;
            return e;
        }
        prevj = j;
    }
    return e;
}

/* the first entry of [e, e1) holding an index out of range, or e1 */
static inline int64_t tsgu_coo_first_bad(const tsgu_coo *c, int64_t e, int64_t e1)
{
    const int64_t *bi = c->bi, *ri = c->ri, *ci = c->ci;
    const uint64_t nb = (uint64_t)c->nb, n = (uint64_t)c->n, m = (uint64_t)c->m;
    for (; e < e1; e++)
        if ((bi && (uint64_t)bi[e] >= nb) || (uint64_t)ri[e] >= n || (uint64_t)ci[e] >= m) break;
    return e;
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
