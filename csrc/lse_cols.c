#ifndef TSGU_IN_TEMPLATE
/* lse_cols.c: log-sum-exp of every column of a sparse matrix (each item of a batch)
 *     out[k*ld + j] = log( sum_{e in column j of item k} exp(v_e) + z_j )
 * with z_j = n - (entries of column j) absent entries counted as zeros, or
 * z_j = 0 (include_zeros false: an empty column gives -inf).  No transpose and
 * no atomics: thread t owns the global columns c = k*m + j in [C*t/T,
 * C*(t+1)/T) (C = b*m), walks the rows of the items they belong to twice (max
 * and count, checking the structure; then the shifted sum, its exps computed a
 * block of entries at a time, vectorized) and updates only its own columns,
 * each in entry order, so the bits do not depend on the thread count.
 * Workspace: a max/shift, a sum and a count per column (the output's size). */
#include <stdlib.h>
#include "tsgu.h"
#include "tsgu_exp.h"

typedef struct {
    double shift; /* max of the column's values, then its shift */
    double sum;   /* sum of exp(v - shift) */
    int64_t cnt;  /* entries */
} lse_col;

typedef struct {
    const tsgu_csr *A;
    int zeros;
    void *out;
    int64_t ld, T;
    lse_col *col; /* per global column */
} lse_cols_ctx;

#define TSGU_MIN_ENTRIES (1 << 16) /* entries below which one thread does it all */
#define TSGU_BLOCK 64              /* entries whose exps are computed together */
#define TSGU_AHEAD 16              /* entries ahead whose column is prefetched */

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
    lse_cols_ctx x = {A, include_zeros, out, ld, T, malloc(C * sizeof(lse_col))};
    int status = x.col ? tsgu_parallel_tasks(T, TSGU_PICK(lse_cols_task, A->rtype, A->itype), &x)
                       : TSGU_ENOMEM;
    free(x.col);
    return status;
}

#else /* template body: real_t, idx_t, TSGU_FN */

#include "tsgu_rows.h"

/* sum[c[q]] += exp(d[q]) for the w buffered entries, in entry order */
TSGU_ISA_ATTR TSGU_ALWAYS_INLINE void TSGU_FN(flush)(lse_col *col, real_t *d, const int64_t *c, int64_t w)
{
    for (int64_t q = 0; q < w; q++) d[q] = TSGU_EXP(d[q]);  /* vectorized */
    for (int64_t q = 0; q < w; q++) col[c[q]].sum += d[q];
}

/* entries of the items holding global columns [c0, c1): the max and count pass
 * (checking the structure), or with sum_pass the shifted-sum pass */
TSGU_ISA_ATTR static int TSGU_FN(lse_cols_pass)(const lse_cols_ctx *x, int64_t c0, int64_t c1,
                                                int sum_pass)
{
    const tsgu_csr *A = x->A;
    const idx_t *Aj = A->col;
    const real_t *Ax = A->val;
    lse_col *col = x->col;
    int64_t n = A->nrows, m = A->ncols, w = 0, cb[TSGU_BLOCK];
    real_t d[TSGU_BLOCK];
    for (int64_t k = c0 / m; k <= (c1 - 1) / m; k++)
        for (int64_t i = 0; i < n; i++) {
            int64_t start, end, prev = -1;
            if (!TSGU_FN(row_entries)(A, k, i, &start, &end)) return TSGU_EPTR_ORDER;
            for (int64_t e = start; e < end; e++) {
                int64_t j = Aj[e], c = k * m + j;
                if (j <= prev || j >= m) return tsgu_col_error(j, m);
                prev = j;
                if (e + TSGU_AHEAD < A->nnz) /* a column we will update soon; a prefetch cannot fault */
                    TSGU_PREFETCH(col + k * m + Aj[e + TSGU_AHEAD]);
                if (c < c0 || c >= c1) continue;           /* another thread's column */
                if (sum_pass) {
                    d[w] = Ax[e] - (real_t)col[c].shift;
                    cb[w++] = c;
                    if (w == TSGU_BLOCK) {
                        TSGU_FN(flush)(col, d, cb, w);
                        w = 0;
                    }
                } else {
                    if (Ax[e] > col[c].shift) col[c].shift = Ax[e];
                    col[c].cnt++;
                }
            }
        }
    TSGU_FN(flush)(col, d, cb, w);
    return TSGU_OK;
}

TSGU_ISA_ATTR static int TSGU_FN(lse_cols_task)(void *vctx, int64_t t)
{
    const lse_cols_ctx *x = vctx;
    int64_t n = x->A->nrows, m = x->A->ncols, C = x->A->batch * m;
    int64_t c0 = C * t / x->T, c1 = C * (t + 1) / x->T;
    real_t *out = x->out;
    lse_col *col = x->col;
    if (c0 >= c1) return TSGU_OK;
    for (int64_t c = c0; c < c1; c++) col[c] = (lse_col){-INFINITY, 0, 0};
    int status = TSGU_FN(lse_cols_pass)(x, c0, c1, 0);
    if (status) return status;
    for (int64_t c = c0; c < c1; c++) col[c].shift = tsgu_lse_shift(col[c].shift, x->zeros ? n - col[c].cnt : 0);
    status = TSGU_FN(lse_cols_pass)(x, c0, c1, 1);
    if (status) return status;
    for (int64_t c = c0; c < c1; c++) {
        int64_t k = c / m, j = c - k * m;
        out[k * x->ld + j] = (real_t)tsgu_lse_finish(col[c].shift, col[c].sum, x->zeros ? n - col[c].cnt : 0);
    }
    return TSGU_OK;
}

#endif
