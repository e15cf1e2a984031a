#ifndef TSGU_IN_TEMPLATE
/* softmax_coo.c: softmax, or log-softmax, over the stored entries of every row of a
 * COO matrix (each item of a batch), one value per entry, read straight from its
 * index array, which is checked and compressed in the same pass:
 *     y_e = exp(v_e - M_r) / S_r        (log: y_e = (v_e - M_r) - log S_r)
 *     M_r = max_{f in row r} v_f,  S_r = sum_{f in row r} exp(v_f - M_r)
 *     ptr[r] = first entry whose global row is >= r   (nnz if none)
 * for every entry e of global row r = batch*n + row, with
 *     idx: sparse_dims rows of nnz, (row, col) or (batch, row, col), row d at
 *          idx + d*ld, sizes[d] each; ptr: batch*n+1 pointers (coo_row_ptr.c's).
 * The rules are coo_row_ptr.c's for a tensor flagged coalesced: every index in
 * [0, sizes[d]) (else TSGU_EIDX_RANGE, *bad the entry), entries strictly increasing
 * in (r, col) (a row out of order: TSGU_EIDX_ORDER; a column out of order or repeated
 * in a row: TSGU_ECOL_ORDER); the status is that of the first entry in error,
 * whatever the thread count (y and ptr are then unspecified).  A row's softmax is
 * taken once its entries are checked (a row of up to 8 entries: with the next such
 * row of the chunk), by tsgu_softmax.h's walk over rows, as softmax_rows.c takes it:
 * the bits of softmax_rows on ptr.
 * The entries are cut into K chunks that start where a row does: chunk k starts at
 * the first entry past nnz*k/K whose (batch, row) exceeds that of the entry before
 * nnz*k/K, by a binary search over the row indices.  The search reads entries in
 * [0, nnz) only, whatever they hold, and leaves every chunk starting at an entry
 * whose (batch, row) exceeds its predecessor's, sorted or not; so once every chunk
 * has checked its entries (and the order against the entry before it), no row spans
 * two chunks.  T threads take the chunks in order as they come free (several per
 * thread: one that starts late, or is descheduled by other load, takes fewer
 * instead of holding the others up).  Each row is computed by one thread and each
 * pointer written by the chunk holding the entry where the row index first reaches
 * it (and, on entries out of order, by one chunk at most: tsgu_coo.h's limits); the
 * first chunk in error names the status; so the results do not depend on the thread
 * count or on which thread took which chunk. */
#include <stdatomic.h>
#include "tsgu_coo.h"
#include "tsgu_parallel.h"
#include "tsgu_exp.h" /* last: its pragmas apply to the rest of the file */

#define TSGU_MIN_ENTRIES (1 << 15) /* entries per thread below which one does it all (softmax_rows.c's share) */
#define TSGU_CHUNKS 8              /* chunks per thread */

typedef struct softmax_coo_ctx {
    tsgu_coo c;
    int64_t nnz, K;
    const int64_t *bounds; /* chunk k: entries [bounds[k], bounds[k+1]) */
    const int64_t *lim;    /* and the pointers (lim[k], lim[k+1]] (tsgu_coo.h) */
    const void *val;       /* v, (nnz,) */
    int is_log;            /* 1: log-softmax */
    int64_t *ptr;
    void *out;             /* y, (nnz,) */
    int *status;           /* per chunk: its status */
    int64_t *bad;          /* per chunk: the entry its EIDX_RANGE names, or -1 */
    int (*chunk)(const struct softmax_coo_ctx *x, int64_t k); /* the variant of softmax_coo_chunk */
    _Atomic int64_t next;  /* the next chunk to take */
} softmax_coo_ctx;

#define TSGU_HALF_TOO 1
#define TSGU_TEMPLATE_FILE "softmax_coo.c"
#include "tsgu_template.h"

/* is the (batch, row) of entry e greater than that of entry f?  As pairs: no product
 * of indices not yet checked */
static int row_after(const tsgu_coo *c, int64_t e, int64_t f)
{
    int64_t be = c->bi ? c->bi[e] : 0, bf = c->bi ? c->bi[f] : 0;
    return be != bf ? be > bf : c->ri[e] > c->ri[f];
}

/* a thread: the chunks, as they come free */
static int softmax_coo_thread(void *vctx, int64_t t)
{
    softmax_coo_ctx *x = vctx;
    (void)t;
    for (int64_t k; (k = atomic_fetch_add(&x->next, 1)) < x->K;) x->status[k] = x->chunk(x, k);
    return TSGU_OK;
}

int tsgu_softmax_coo(const int64_t *idx, int64_t ld, int64_t sparse_dims, int64_t nnz, const int64_t *sizes,
                     const void *val, tsgu_real rtype, int is_log, int64_t *ptr, void *out, int nthreads,
                     int64_t *bad)
{
    int64_t T = nthreads < 1 ? 1 : nthreads;
    if (T > TSGU_MAX_THREADS) T = TSGU_MAX_THREADS;
    if (T > nnz / TSGU_MIN_ENTRIES) T = nnz / TSGU_MIN_ENTRIES;
    if (T < 1) T = 1;
    const int64_t K = T == 1 ? 1 : T * TSGU_CHUNKS;
    const tsgu_coo c = tsgu_coo_of(idx, ld, sparse_dims, sizes);
    int64_t bounds[TSGU_CHUNKS * TSGU_MAX_THREADS + 1], lim[TSGU_CHUNKS * TSGU_MAX_THREADS + 1],
        first_bad[TSGU_CHUNKS * TSGU_MAX_THREADS];
    int status[TSGU_CHUNKS * TSGU_MAX_THREADS];
    bounds[0] = 0;
    for (int64_t k = 1; k < K; k++) {
        int64_t s = nnz * k / K, lo = s, hi = nnz;  /* s >= 1: K <= nnz */
        while (lo < hi) {             /* the first entry of [s, nnz) past the row of s - 1 */
            int64_t mid = lo + (hi - lo) / 2;
            if (row_after(&c, mid, s - 1)) hi = mid;
            else lo = mid + 1;
        }
        bounds[k] = lo < bounds[k - 1] ? bounds[k - 1] : lo;
    }
    bounds[K] = nnz;
    tsgu_coo_limits(&c, bounds, K, lim);
    softmax_coo_ctx x = {c, nnz, K, bounds, lim, val, is_log, ptr, out, status, first_bad,
                         TSGU_PICK_HALF(softmax_coo_chunk, rtype, TSGU_I64), 0};
    tsgu_parallel_tasks(T, softmax_coo_thread, &x);
    for (int64_t k = 0; k < K; k++)      /* the first chunk in error: the first entry in error */
        if (status[k] != TSGU_OK) {
            if (status[k] == TSGU_EIDX_RANGE && bad) *bad = first_bad[k];
            return status[k];
        }
    return TSGU_OK;
}

#else /* template body: real_t, acc_t, TSGU_LOAD, TSGU_STORE, TSGU_FN (idx_t unused: COO indices are int64) */

#include "tsgu_softmax.h"

/* chunk k; batched: x->c.bi is not NULL */
TSGU_ISA_ATTR TSGU_ALWAYS_INLINE int TSGU_FN(softmax_coo_scan)(const softmax_coo_ctx *x, int64_t k, const int batched)
{
    const tsgu_coo *c = &x->c;
    const int64_t e1 = x->bounds[k + 1], hi = x->lim[k + 1];
    const real_t *v = x->val;
    real_t *y = x->out;
    int64_t e = x->bounds[k], *ptr = x->ptr, w = x->lim[k];   /* w: the last pointer written */
    /* softmax of a full-width type: the exps go straight into y, scaled by 1/sum after */
    const int keep = !x->is_log && !TSGU_NARROW;
    int64_t prev, prevj;   /* global row and column of the entry before the chunk's */
    TSGU_FN(softmax_walk) walk = {.keep = keep, .is_log = x->is_log};
    x->bad[k] = -1;
    int status = tsgu_coo_before(c, e, &prev, &prevj, &x->bad[k]);
    if (status != TSGU_OK) return status;
    while (e < e1) {   /* e starts a row: the chunk's first entry (the bounds start rows) or the one past a row */
        const int64_t r = tsgu_coo_entry(c, e, batched);
        if (r < 0) {
            x->bad[k] = e;
            return TSGU_EIDX_RANGE;
        }
        if (r <= prev) return TSGU_EIDX_ORDER;   /* (r == prev cannot be: e starts a row) */
        for (int64_t top = r < hi ? r : hi; w < top;) ptr[++w] = e;   /* rows (prev, r] start here */
        prev = r;
        const int64_t end = tsgu_coo_row_end(c, e, e1, batched, &status);
        if (status != TSGU_OK) {
            if (status == TSGU_EIDX_RANGE) x->bad[k] = end;
            return status;
        }
        TSGU_FN(softmax_rows_add)(&walk, v + e, y + e, end - e);   /* the row, checked */
        e = end;
    }
    TSGU_FN(softmax_rows_end)(&walk);
    if (k == x->K - 1)                                    /* rows after the last entry */
        while (w < hi) ptr[++w] = x->nnz;
    return TSGU_OK;
}

TSGU_ISA_ATTR static int TSGU_FN(softmax_coo_chunk)(const softmax_coo_ctx *x, int64_t k)
{
    return x->c.bi ? TSGU_FN(softmax_coo_scan)(x, k, 1) : TSGU_FN(softmax_coo_scan)(x, k, 0);
}

#endif
