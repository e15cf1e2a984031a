#ifndef TSGU_IN_TEMPLATE
/* spmm_t.c: transposed sparse times dense, out = A^T*G, for each item k of a batch
 *     out[k][j,:] = sum_i A[k][i,j] * G[k][i,:]
 * (grad_B of C = A*B), with no transpose built and no atomics: thread t owns the
 * columns j in [m*t/T, m*(t+1)/T) of every item, walks all of A's entries in
 * row order and adds only into its own rows of out.  Each out row is summed by
 * one thread in increasing i -- the order of the serial loop -- so the bits do
 * not depend on the thread count; the only memory is the output itself. */
#include "tsgu.h"

typedef struct {
    const tsgu_csr *A;
    const tsgu_dense *G;
    tsgu_dense *out;
    int64_t T;
} spmm_t_ctx;

#define TSGU_MIN_WORK (1 << 18) /* multiply-adds below which one thread does it all */

#define TSGU_TEMPLATE_FILE "spmm_t.c"
#include "tsgu_template.h"

int tsgu_spmm_t(const tsgu_csr *A, const tsgu_dense *G, tsgu_dense *out, int nthreads)
{
    int64_t T = nthreads < 1 ? 1 : nthreads, work = A->nnz * (G->cols > 0 ? G->cols : 1);
    if (T > TSGU_MAX_THREADS) T = TSGU_MAX_THREADS;
    if (T > work / TSGU_MIN_WORK) T = work / TSGU_MIN_WORK;
    if (T > A->ncols) T = A->ncols;
    if (T < 1) T = 1;
    spmm_t_ctx x = {A, G, out, T};
    return tsgu_parallel_tasks(T, TSGU_PICK(spmm_t_task, A->rtype, A->itype), &x);
}

#else /* template body: real_t, idx_t, TSGU_FN */

#include "tsgu_rows.h"

/* out rows [j0, j1) of every item, p columns; inlined with p constant for the
 * common widths */
TSGU_ISA_ATTR TSGU_ALWAYS_INLINE int TSGU_FN(spmm_t_cols)(const spmm_t_ctx *x, int64_t j0, int64_t j1,
                                                          const int64_t p)
{
    const tsgu_csr *A = x->A;
    const idx_t *Aj = A->col;
    const real_t *Ax = A->val, *Gx = x->G->data;
    real_t *Ox = x->out->data;
    int64_t b = A->batch, n = A->nrows, m = A->ncols, nnz = A->nnz;
    int64_t ldg = x->G->rstride, ldo = x->out->rstride;
    const int64_t ahead = tsgu_prefetch_ahead(p, sizeof(real_t));
    for (int64_t k = 0; k < b; k++)                /* own rows start at zero */
        for (int64_t j = j0; j < j1; j++) {
            real_t *o = Ox + k * x->out->bstride + j * ldo;
            for (int64_t t = 0; t < p; t++) o[t] = 0;
        }
    for (int64_t r = 0; r < b * n; r++) {
        int64_t k = r / n, i = r - k * n, start, end;
        if (!TSGU_FN(row_entries)(A, k, i, &start, &end)) return TSGU_EPTR_ORDER;
        const real_t *restrict g = Gx + k * x->G->bstride + i * ldg;
        real_t *Ok = Ox + k * x->out->bstride;
        int64_t prev = -1;
        for (int64_t e = start; e < end; e++) {
            int64_t j = Aj[e];
            if (j <= prev || j >= m) return tsgu_col_error(j, m);
            prev = j;
            if (e + ahead < nnz) TSGU_PREFETCH_ROW(Ok, Aj[e + ahead], m, ldo, 0, p); /* out row soon */
            if (j < j0 || j >= j1) continue;      /* another thread's row */
            const real_t a = Ax[e];
            real_t *restrict o = Ok + j * ldo;
            for (int64_t t = 0; t < p; t++) o[t] += a * g[t];    /* out[j,:] += a * G[i,:] */
        }
    }
    return TSGU_OK;
}

TSGU_ISA_ATTR static int TSGU_FN(spmm_t_task)(void *vctx, int64_t t)
{
    const spmm_t_ctx *x = vctx;
    int64_t m = x->A->ncols, j0 = m * t / x->T, j1 = m * (t + 1) / x->T;
    TSGU_BY_WIDTH(x->G->cols, TSGU_FN(spmm_t_cols), x, j0, j1)
}

#endif
