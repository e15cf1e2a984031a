#ifndef TSGU_IN_TEMPLATE
/* lse_cols.c: log-sum-exp of every column of a sparse matrix (each item of a batch)
 *     out[k*ld + j] = log( sum_{e in column j of item k} exp(v_e) + z_j )
 * with z_j = n - (entries of column j) absent entries counted as zeros, or
 * z_j = 0 (include_zeros false: an empty column gives -inf).  No transpose and
 * no atomics: thread t owns the global columns c = k*m + j in [C*t/T,
 * C*(t+1)/T) (C = b*m), walks the rows of the items they belong to twice (max,
 * then shifted sum, as in lse_rows.c) and updates only its own columns, each in
 * entry order, so the bits do not depend on the thread count.  Workspace: a
 * max, a sum and a count per column (the size of the output). */
#include <stdlib.h>
#include "tsgu.h"

typedef struct {
    const tsgu_csr *A;
    int zeros;
    void *out;
    int64_t ld, T;
    double *shift, *sum; /* per global column: max then shift; shifted sum */
    int64_t *cnt;        /* per global column: entries */
} lse_cols_ctx;

#define TSGU_MIN_ENTRIES (1 << 16) /* entries below which one thread does it all */

#define TSGU_TEMPLATE_FILE "lse_cols.c"
#include "tsgu_template.h"

int tsgu_lse_cols(const tsgu_csr *A, int include_zeros, void *out, int64_t ld, int nthreads)
{
    int64_t C = A->batch * A->ncols, T = nthreads < 1 ? 1 : nthreads;
    if (T > TSGU_MAX_THREADS) T = TSGU_MAX_THREADS;
    if (T > A->nnz / TSGU_MIN_ENTRIES) T = A->nnz / TSGU_MIN_ENTRIES;
    if (T > C) T = C;
    if (T < 1) T = 1;
    if (C == 0) return TSGU_OK;
    lse_cols_ctx x = {A, include_zeros, out, ld, T, malloc(C * sizeof(double)),
                      malloc(C * sizeof(double)), malloc(C * sizeof(int64_t))};
    int status = x.shift && x.sum && x.cnt
                     ? tsgu_parallel_tasks(T, TSGU_PICK(lse_cols_task, A->rtype, A->itype), &x)
                     : TSGU_ENOMEM;
    free(x.shift);
    free(x.sum);
    free(x.cnt);
    return status;
}

#else /* template body: real_t, idx_t, TSGU_FN */

#include "tsgu_rows.h"

/* entries of the items holding global columns [c0, c1): with sum == 0 the max
 * and count pass (checking the structure), else the shifted-sum pass */
TSGU_ISA_ATTR static int TSGU_FN(lse_cols_pass)(const lse_cols_ctx *x, int64_t c0, int64_t c1,
                                                int sum_pass)
{
    const tsgu_csr *A = x->A;
    const idx_t *Aj = A->col;
    const real_t *Ax = A->val;
    int64_t n = A->nrows, m = A->ncols;
    for (int64_t k = c0 / m; k <= (c1 - 1) / m; k++)
        for (int64_t i = 0; i < n; i++) {
            int64_t start, end, prev = -1;
            if (!TSGU_FN(row_entries)(A, k, i, &start, &end)) return TSGU_EPTR_ORDER;
            for (int64_t e = start; e < end; e++) {
                int64_t j = Aj[e], c = k * m + j;
                if (j <= prev || j >= m) return tsgu_col_error(j, m);
                prev = j;
                if (c < c0 || c >= c1) continue;           /* another thread's column */
                if (sum_pass) {
                    x->sum[c] += exp(Ax[e] - x->shift[c]);
                } else {
                    if (Ax[e] > x->shift[c]) x->shift[c] = Ax[e];
                    x->cnt[c]++;
                }
            }
        }
    return TSGU_OK;
}

TSGU_ISA_ATTR static int TSGU_FN(lse_cols_task)(void *vctx, int64_t t)
{
    const lse_cols_ctx *x = vctx;
    int64_t n = x->A->nrows, m = x->A->ncols, C = x->A->batch * m;
    int64_t c0 = C * t / x->T, c1 = C * (t + 1) / x->T;
    real_t *out = x->out;
    if (c0 >= c1) return TSGU_OK;
    for (int64_t c = c0; c < c1; c++) {
        x->shift[c] = -INFINITY;
        x->sum[c] = 0;
        x->cnt[c] = 0;
    }
    int status = TSGU_FN(lse_cols_pass)(x, c0, c1, 0);
    if (status) return status;
    for (int64_t c = c0; c < c1; c++)
        x->shift[c] = tsgu_lse_shift(x->shift[c], x->zeros ? n - x->cnt[c] : 0);
    status = TSGU_FN(lse_cols_pass)(x, c0, c1, 1);
    if (status) return status;
    for (int64_t c = c0; c < c1; c++) {
        int64_t k = c / m, j = c - k * m;
        out[k * x->ld + j] = (real_t)tsgu_lse_finish(x->shift[c], x->sum[c], x->zeros ? n - x->cnt[c] : 0);
    }
    return TSGU_OK;
}

#endif
