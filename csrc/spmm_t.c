#ifndef TSGU_IN_TEMPLATE
/* spmm_t.c: transposed sparse times dense, out = A^T*G, for each item k of a batch
 *     out[k][j,:] = sum_i A[k][i,j] * G[k][i,:]
 * with A[k][i,j] / (entries of row i) for A.row_mean (reduce="mean": D^-1 A)
 * (grad_B of C = A*B), with no transpose built and no atomics: thread t owns the
 * global out rows k*m + j in [R*t/T, R*(t+1)/T), R = batch*m -- whole items of a
 * batch, a range of columns of a single matrix -- walks the entries of the items
 * it has rows in, in row order, and adds only into its own rows.  Each out row
 * is summed by one thread in increasing i -- the order of the serial loop -- so
 * the bits do not depend on the thread count.  The only memory is the output,
 * and for 16-bit values one float row per owned out row of an item (the sums
 * are kept in float and rounded once) and one for the G row in use. */
#include <stdlib.h>
#include "tsgu.h"
#include "tsgu_advise.h"
#include "tsgu_parallel.h"
#include "tsgu_prefetch.h"

typedef struct {
    const tsgu_csr *A;
    const tsgu_dense *G;
    tsgu_dense *out;
    int64_t T;
} spmm_t_ctx;

#define TSGU_MIN_WORK (1 << 18) /* multiply-adds below which one thread does it all */

#define TSGU_HALF_TOO 1
#define TSGU_TEMPLATE_FILE "spmm_t.c"
#include "tsgu_template.h"

int tsgu_spmm_t(const tsgu_csr *A, const tsgu_dense *G, tsgu_dense *out, int nthreads)
{
    int64_t T = nthreads < 1 ? 1 : nthreads, work = A->nnz * (G->cols > 0 ? G->cols : 1);
    if (T > TSGU_MAX_THREADS) T = TSGU_MAX_THREADS;
    if (T > work / TSGU_MIN_WORK) T = work / TSGU_MIN_WORK;
    if (T > A->batch * A->ncols) T = A->batch * A->ncols;
    if (T < 1) T = 1;
    spmm_t_ctx x = {A, G, out, T};
    tsgu_advise_output(out->data, tsgu_dense_span(out));
    return tsgu_parallel_tasks(T, TSGU_PICK_HALF(spmm_t_task, A->rtype, A->itype), &x);
}

#else /* template body: real_t, acc_t, idx_t, TSGU_FN, ... (tsgu_template_types.h) */

#include "tsgu_rows.h"

/* out rows [j0, j1) of item k, p columns, summed in the rows S (row j at
 * S + (j - j0) * lds: out's own rows, or float rows rounded into out at the
 * end; gw: p floats for a widened G row); inlined with p constant for the
 * common widths */
TSGU_ISA_ATTR TSGU_ALWAYS_INLINE int TSGU_FN(spmm_t_item)(const spmm_t_ctx *x, int64_t k, int64_t j0,
                                                          int64_t j1, acc_t *S, int64_t lds, acc_t *gw,
                                                          const int64_t p)
{
    const tsgu_csr *A = x->A;
    const idx_t *Aj = A->col;
    const real_t *Ax = A->val;
    const real_t *Gk = (const real_t *)x->G->data + k * x->G->bstride;
    int64_t n = A->nrows, m = A->ncols, nnz = A->nnz, ldg = x->G->rstride;
    const int mean = A->row_mean;
    const int64_t ahead = tsgu_prefetch_ahead(p, sizeof(acc_t));
    for (int64_t j = j0; j < j1; j++)             /* sums start at zero */
        for (int64_t t = 0; t < p; t++) S[(j - j0) * lds + t] = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t start, end;
        if (!TSGU_FN(row_entries)(A, k, i, &start, &end)) return TSGU_EPTR_ORDER;
        const acc_t *g = NULL;                    /* G[i,:], once a row needs it */
        int64_t prev = -1;
        for (int64_t e = start; e < end; e++) {
            int64_t j = Aj[e];
            if (j <= prev || j >= m) return tsgu_col_error(j, m);
            prev = j;
            int64_t jn = e + ahead < nnz ? Aj[e + ahead] : -1;   /* not yet checked: no arithmetic */
            if (jn >= j0 && jn < j1) TSGU_PREFETCH_ROW(S, jn - j0, j1 - j0, lds, 0, p); /* own row soon */
            if (j < j0 || j >= j1) continue;      /* another thread's row */
            if (!g) g = TSGU_FN(widened)(Gk + i * ldg, gw, p);
            const acc_t a = mean ? TSGU_LOAD(Ax[e]) / (acc_t)(end - start) : TSGU_LOAD(Ax[e]);
            const acc_t *restrict gi = g;
            acc_t *restrict s = S + (j - j0) * lds;
            for (int64_t t = 0; t < p; t++) s[t] += a * gi[t];   /* out[j,:] += a * G[i,:] */
        }
    }
#if TSGU_NARROW
    real_t *Ok = (real_t *)x->out->data + k * x->out->bstride;
    int64_t ldo = x->out->rstride;
    for (int64_t j = j0; j < j1; j++)
        for (int64_t t = 0; t < p; t++) Ok[j * ldo + t] = TSGU_STORE(S[(j - j0) * lds + t]);
#endif
    return TSGU_OK;
}

/* the out rows of task t: for each item it has rows in, the entries walked
 * (and checked) whole, the sums kept to its own rows */
TSGU_ISA_ATTR TSGU_ALWAYS_INLINE int TSGU_FN(spmm_t_rows)(const spmm_t_ctx *x, int64_t t, const int64_t p)
{
    int64_t b = x->A->batch, m = x->A->ncols, R = b * m;
    int64_t lo = R * t / x->T, hi = R * (t + 1) / x->T;
    int64_t k0 = m ? lo / m : 0, k1 = m ? (hi + m - 1) / m : b; /* m = 0: one task checks all */
    int status = TSGU_OK;
#if TSGU_NARROW
    int64_t rows = hi - lo < m ? hi - lo : m;     /* the most own rows in one item */
    acc_t *S = p > 0 ? malloc((size_t)((rows + 1) * p) * sizeof(acc_t)) : NULL, *gw = S ? S + rows * p : NULL;
    if (p > 0 && !S) return TSGU_ENOMEM;
    tsgu_advise_output(S, rows * p * (int64_t)sizeof(acc_t));
#else
    acc_t *Ox = x->out->data;
    int64_t bso = x->out->bstride, ldo = x->out->rstride;
#endif
    for (int64_t k = k0; k < k1 && status == TSGU_OK; k++) {
        int64_t j0 = lo > k * m ? lo - k * m : 0, j1 = hi < (k + 1) * m ? hi - k * m : m;
#if TSGU_NARROW
        status = TSGU_FN(spmm_t_item)(x, k, j0, j1, S, p, gw, p);
#else
        status = TSGU_FN(spmm_t_item)(x, k, j0, j1, Ox + k * bso + j0 * ldo, ldo, NULL, p);
#endif
    }
#if TSGU_NARROW
    free(S);
#endif
    return status;
}

TSGU_ISA_ATTR static int TSGU_FN(spmm_t_task)(void *vctx, int64_t t)
{
    const spmm_t_ctx *x = vctx;
    TSGU_BY_WIDTH(x->G->cols, TSGU_FN(spmm_t_rows), x, t)
}

#endif
