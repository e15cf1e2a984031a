/* split_cols.c: the global columns c = k*m + j of a sparse matrix (column j of item
 * k of a batch) in T contiguous ranges of about equal cost, for the kernels in which
 * each thread owns a range of columns (tsgu_cols.h):
 *     cost(range) = entries in its columns + its columns
 * the entries estimated from an even sample of TSGU_SAMPLES of A's entries, counted
 * in TSGU_BUCKETS buckets of columns per thread, the ranges cut at bucket bounds: a
 * column holding most entries is one thread's range, not a stall for everybody.  The
 * indices are not checked yet (the kernels do that): whatever they hold only moves
 * the cuts, never an address.  The cuts never change a kernel's bits, which are the
 * same for any ranges. */
#include <stdlib.h>
#include "tsgu_parallel.h"
#include "tsgu_row_ptr.h"

#define TSGU_MIN_ENTRIES (1 << 16) /* entries below which one thread does it all */
#define TSGU_SAMPLES 4096
#define TSGU_BUCKETS 32            /* per thread */

/* the first entry of item k (k < batch), clamped into [0, nnz] */
static int64_t item_start(const tsgu_csr *A, int64_t k)
{
    int64_t p = tsgu_ptr_at(A, k * A->ptr_stride) + k * A->entry_stride;
    return p < 0 ? 0 : p > A->nnz ? A->nnz : p;
}

/* the column of entry e (e < nnz), or -1 outside [0, batch*m) */
static int64_t column_of(const tsgu_csr *A, int64_t e)
{
    int64_t lo = 0, hi = A->batch - 1, m = A->ncols;
    while (lo < hi) {                     /* the last item starting at or before e */
        int64_t mid = lo + (hi - lo + 1) / 2;
        if (item_start(A, mid) <= e) lo = mid;
        else hi = mid - 1;
    }
    int64_t j = A->itype == TSGU_I32 ? (int64_t)((const int32_t *)A->col)[e] : ((const int64_t *)A->col)[e];
    return j >= 0 && j < m ? lo * m + j : -1;
}

/* the first column of bucket q of NB over C columns */
static int64_t bucket_start(int64_t q, int64_t NB, int64_t C)
{
    return C / NB * q + C % NB * q / NB;
}

int64_t tsgu_split_cols(const tsgu_csr *A, int nthreads, int64_t *bounds)
{
    int64_t C = A->batch * A->ncols, nnz = A->nnz, T = nthreads < 1 ? 1 : nthreads;
    if (T > TSGU_MAX_THREADS) T = TSGU_MAX_THREADS;
    if (T > nnz / TSGU_MIN_ENTRIES) T = nnz / TSGU_MIN_ENTRIES;
    if (T > C) T = C;
    if (T < 1) T = 1;
    int64_t NB = T * TSGU_BUCKETS, S = nnz < TSGU_SAMPLES ? nnz : TSGU_SAMPLES;
    double *cost = T > 1 && NB <= C ? calloc((size_t)NB, sizeof *cost) : NULL;
    for (int64_t t = 0; t <= T; t++) bounds[t] = bucket_start(t, T, C);   /* even, if no better */
    if (!cost) return T;
    for (int64_t s = 0; s < S; s++) {
        int64_t c = column_of(A, (2 * s + 1) * (nnz / S) / 2 + s * (nnz % S) / S);
        if (c >= 0) {
            int64_t q = (int64_t)((double)c / (double)C * (double)NB);
            cost[q < NB ? q : NB - 1] += (double)nnz / (double)S;
        }
    }
    double total = 0;
    for (int64_t q = 0; q < NB; q++) total += cost[q] += (double)(bucket_start(q + 1, NB, C) - bucket_start(q, NB, C));
    double sum = 0;
    int64_t t = 1;
    for (int64_t q = 0; q < NB && t < T; q++) {
        sum += cost[q];
        while (t < T && sum >= total * (double)t / (double)T) bounds[t++] = bucket_start(q + 1, NB, C);
    }
    for (; t < T; t++) bounds[t] = C;
    free(cost);
    return T;
}
