#ifndef TSGU_IN_TEMPLATE
/* spgemm_split.c: the rows of C = A·B (for each item k, A[k] n x l and B[k] l x m)
 * cut into chunks of about equal work, where global row r = k*n + i costs
 *     work(r) = 1 + nnz(A[k] row i) + sum over the entries (i, j) of A[k] of nnz(B[k] row j),
 * the products that row multiplies.  The sparse @ sparse kernels run their rows on
 * these chunks (a row belongs to one chunk, so the results do not depend on them).
 * A and B must be checked structures (tsgu_csr_check).  At most `chunks` chunks
 * (fewer where the work is small: the count depends on the matrices alone); chunk t
 * covers global rows [bounds[t], bounds[t+1]).  Returns T, or -1 when the workspace
 * (one int64 per row) cannot be had; the work is summed on nthreads threads. */
#include <stdlib.h>
#include "tsgu.h"
#include "tsgu_parallel.h"

#define TSGU_MIN_WORK_PER_THREAD (1 << 16)

typedef struct {
    const tsgu_csr *A, *B;
    int64_t *work;   /* work[r + 1] = work(r) */
} split_ctx;

#define TSGU_INDEX_ONLY 1
#define TSGU_TEMPLATE_FILE "spgemm_split.c"
#include "tsgu_template.h"

int64_t tsgu_split_product_rows(const tsgu_csr *A, const tsgu_csr *B, int chunks, int nthreads, int64_t *bounds)
{
    int64_t R = A->batch * A->nrows, T = chunks < 1 ? 1 : chunks;
    if (T > TSGU_MAX_THREADS) T = TSGU_MAX_THREADS;
    bounds[0] = 0;
    if (T == 1 || R <= 1) {
        bounds[1] = R;
        return 1;
    }
    int64_t *work = malloc((size_t)(R + 1) * sizeof *work);
    if (!work) return -1;
    split_ctx x = {A, B, work};
    work[0] = 0;
    tsgu_parallel_rows(A, 1, nthreads, TSGU_PICK_INDEX(row_work, A->itype), &x);
    for (int64_t r = 0; r < R; r++) work[r + 1] += work[r];
    int64_t total = work[R];
    if (total / TSGU_MIN_WORK_PER_THREAD < T) T = total / TSGU_MIN_WORK_PER_THREAD;
    if (T > R) T = R;
    if (T < 1) T = 1;
    for (int64_t t = 1; t < T; t++) {            /* first row whose prefix reaches t/T of the total */
        int64_t lo = bounds[t - 1], hi = R, target = total / T * t;
        while (lo < hi) {
            int64_t mid = lo + (hi - lo) / 2;
            if (work[mid] < target) lo = mid + 1;
            else hi = mid;
        }
        bounds[t] = lo;
    }
    bounds[T] = R;
    free(work);
    return T;
}

#else /* template body: idx_t and TSGU_FN (real_t unused) */

#include "tsgu_rows.h"

static int TSGU_FN(row_work)(void *ctx, int64_t r0, int64_t r1)
{
    const split_ctx *x = ctx;
    const tsgu_csr *A = x->A, *B = x->B;
    const idx_t *Aj = A->col;
    int64_t n = A->nrows;
    for (int64_t r = r0; r < r1; r++) {
        int64_t k = tsgu_item_of(A, r), i = r - k * n, start, end, w = 1, bs, be;
        TSGU_FN(row_entries)(A, k, i, &start, &end);
        for (int64_t e = start; e < end; e++) {
            TSGU_FN(row_entries)(B, k, Aj[e], &bs, &be);
            w += 1 + be - bs;
        }
        x->work[r + 1] = w;
    }
    return TSGU_OK;
}

#endif
