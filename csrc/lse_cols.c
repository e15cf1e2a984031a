#ifndef TSGU_IN_TEMPLATE
/* lse_cols.c: log-sum-exp of every column of a sparse matrix (each item of a batch)
 *     out[k*ld + j] = log( sum_{e in column j of item k} exp(v_e) + z_j )
 * with z_j = n - (entries of column j) absent entries counted as zeros, or
 * z_j = 0 (include_zeros false: an empty column gives -inf).  No transpose and
 * no atomics: thread t owns the global columns c = k*m + j in [C*t/T,
 * C*(t+1)/T) (C = b*m), walks the rows of the items they belong to once, and
 * updates only its own columns, each in entry order, so the bits do not depend
 * on the thread count.  One pass with a running max mx and sum s of exp(v - mx)
 * per column (s is rescaled when the max grows), then
 *     lse = M + log(s exp(mx - M) + z exp(-M)),   M = max(mx, 0 if z > 0).
 * Workspace: mx, s and a count per column (the output's size). */
#include <stdlib.h>
#include "tsgu.h"
#include "tsgu_exp.h"

typedef struct {
    double mx;   /* largest value so far */
    double s;    /* sum of exp(v - mx) so far */
    int64_t cnt; /* entries */
} lse_col;

typedef struct {
    const tsgu_csr *A;
    int zeros;
    void *out;
    int64_t ld, T;
    lse_col *col; /* per global column */
} lse_cols_ctx;

#define TSGU_MIN_ENTRIES (1 << 16) /* entries below which one thread does it all */
#define TSGU_AHEAD 32              /* entries ahead whose column is prefetched */

/* the column's lse from its running max and sum and its z zeros */
static double lse_col_finish(const lse_col *c, int64_t z)
{
    if (c->mx == INFINITY) return INFINITY;            /* no inf - inf */
    double M = z > 0 && !(c->mx > 0) ? 0 : c->mx;
    if (M == -INFINITY) return -INFINITY;              /* no values (or all -inf) and no zeros */
    return M + log(c->s * exp(c->mx - M) + (z > 0 ? (double)z * exp(-M) : 0));
}

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

TSGU_ISA_ATTR static int TSGU_FN(lse_cols_task)(void *vctx, int64_t t)
{
    const lse_cols_ctx *x = vctx;
    const tsgu_csr *A = x->A;
    const idx_t *Aj = A->col;
    const real_t *Ax = A->val;
    real_t *out = x->out;
    lse_col *col = x->col;
    int64_t n = A->nrows, m = A->ncols, C = A->batch * m;
    int64_t c0 = C * t / x->T, c1 = C * (t + 1) / x->T;
    if (c0 >= c1) return TSGU_OK;
    for (int64_t c = c0; c < c1; c++) col[c] = (lse_col){-INFINITY, 0, 0};
    for (int64_t k = c0 / m; k <= (c1 - 1) / m; k++)
        for (int64_t i = 0; i < n; i++) {
            int64_t start, end, prev = -1;
            if (!TSGU_FN(row_entries)(A, k, i, &start, &end)) return TSGU_EPTR_ORDER;
            for (int64_t e = start; e < end; e++) {
                int64_t j = Aj[e], c = k * m + j;
                if (j <= prev || j >= m) return tsgu_col_error(j, m);
                prev = j;
                if (e + TSGU_AHEAD < A->nnz) /* a column we will update soon; a prefetch cannot fault */
                    TSGU_PREFETCH_W(col + k * m + Aj[e + TSGU_AHEAD]);
                if (c < c0 || c >= c1) continue;           /* another thread's column */
                lse_col *s = col + c;
                const real_t v = Ax[e], mx = (real_t)s->mx;  /* mx is one of the values, or -inf */
                s->cnt++;
                if (v > mx) {                              /* a new max: rescale the sum */
                    s->s = s->s * TSGU_EXP((real_t)(mx - v)) + 1;
                    s->mx = v;
                } else if (mx > -INFINITY) {               /* (-inf onto -inf adds nothing) */
                    s->s += TSGU_EXP((real_t)(v - mx));
                }
            }
        }
    for (int64_t c = c0; c < c1; c++) {
        int64_t k = c / m, j = c - k * m;
        out[k * x->ld + j] = (real_t)lse_col_finish(&col[c], x->zeros ? n - col[c].cnt : 0);
    }
    return TSGU_OK;
}

#endif
