#ifndef TSGU_IN_TEMPLATE
/* spmm_t_arg.c: the gradient of C = A (max|min) B (spmm_arg.c) w.r.t. B, each
 * output element's gradient sent through its arg entry alone:
 *     out[k][j,t] = sum over rows i with e = start(i) + arg[k][i,t] and A.col[e] = j
 *                   of A.val[e] * G[k][i,t]
 * No atomics: as in spmm_t.c, thread t owns the global out rows k*m + j in
 * [R*t/T, R*(t+1)/T), R = batch*m, walks the args of the items it has rows in,
 * in row order, and adds only into its own rows, so each out element is summed
 * in increasing i (PyTorch's order) whatever the thread count.  Every arg is
 * checked to name an entry of its row, and every column read through to lie in
 * [0, m).  The only memory is the output, and for 16-bit values one float row
 * per owned out row of an item (the sums are kept in float and rounded once). */
#include <stdlib.h>
#include "tsgu.h"

typedef struct {
    const tsgu_csr *A;
    const int32_t *arg;
    const tsgu_dense *G;
    tsgu_dense *out;
    int64_t T;
} spmm_t_arg_ctx;

#define TSGU_MIN_WORK (1 << 18) /* output elements below which one thread does it all */

#define TSGU_HALF_TOO 1
#define TSGU_TEMPLATE_FILE "spmm_t_arg.c"
#include "tsgu_template.h"

int tsgu_spmm_t_arg(const tsgu_csr *A, const int32_t *arg, const tsgu_dense *G, tsgu_dense *out,
                    int nthreads)
{
    int64_t T = nthreads < 1 ? 1 : nthreads, work = A->batch * A->nrows * (G->cols > 0 ? G->cols : 1);
    if (T > TSGU_MAX_THREADS) T = TSGU_MAX_THREADS;
    if (T > work / TSGU_MIN_WORK) T = work / TSGU_MIN_WORK;
    if (T > A->batch * A->ncols) T = A->batch * A->ncols;
    if (T < 1) T = 1;
    spmm_t_arg_ctx x = {A, arg, G, out, T};
    tsgu_advise_output(out->data, tsgu_dense_span(out));
    return tsgu_parallel_tasks(T, TSGU_PICK_HALF(spmm_t_arg_task, A->rtype, A->itype), &x);
}

#else /* template body: real_t, acc_t, idx_t, TSGU_FN, ... (tsgu_template_types.h) */

#include "tsgu_rows.h"

/* out rows [j0, j1) of item k, p columns, summed in the rows S (row j at
 * S + (j - j0) * lds: out's own rows, or float rows rounded into out at the
 * end); inlined with p constant for the common widths */
TSGU_ISA_ATTR TSGU_ALWAYS_INLINE int TSGU_FN(spmm_t_arg_item)(const spmm_t_arg_ctx *x, int64_t k, int64_t j0,
                                                              int64_t j1, acc_t *S, int64_t lds, const int64_t p)
{
    const tsgu_csr *A = x->A;
    const idx_t *Aj = A->col;
    const real_t *Ax = A->val;
    const real_t *Gk = (const real_t *)x->G->data + k * x->G->bstride;
    int64_t n = A->nrows, m = A->ncols, ldg = x->G->rstride;
    for (int64_t j = j0; j < j1; j++)             /* sums start at zero */
        for (int64_t t = 0; t < p; t++) S[(j - j0) * lds + t] = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t start, end;
        if (!TSGU_FN(row_entries)(A, k, i, &start, &end)) return TSGU_EPTR_ORDER;
        const int32_t *g = x->arg + (k * n + i) * p;
        const real_t *gi = Gk + i * ldg;
        for (int64_t t = 0; t < p; t++) {
            int64_t o = g[t], e = start + o;
            if (o < -1 || e >= end) return TSGU_EARG;
            if (o < 0) continue;
            int64_t j = Aj[e];
            if (j < 0 || j >= m) return TSGU_ECOL_RANGE;
            if (j < j0 || j >= j1) continue;      /* another thread's row */
            S[(j - j0) * lds + t] += TSGU_LOAD(Ax[e]) * TSGU_LOAD(gi[t]);   /* out[j,t] += a * G[i,t] */
        }
    }
#if TSGU_NARROW
    real_t *Ok = (real_t *)x->out->data + k * x->out->bstride;
    for (int64_t j = j0; j < j1; j++)
        for (int64_t t = 0; t < p; t++) Ok[j * x->out->rstride + t] = TSGU_STORE(S[(j - j0) * lds + t]);
#endif
    return TSGU_OK;
}

/* the out rows of task t: for each item it has rows in, the args walked (and
 * checked) whole, the sums kept to its own rows */
TSGU_ISA_ATTR TSGU_ALWAYS_INLINE int TSGU_FN(spmm_t_arg_rows)(const spmm_t_arg_ctx *x, int64_t t, const int64_t p)
{
    int64_t b = x->A->batch, m = x->A->ncols, R = b * m;
    int64_t lo = R * t / x->T, hi = R * (t + 1) / x->T;
    int64_t k0 = m ? lo / m : 0, k1 = m ? (hi + m - 1) / m : b; /* m = 0: one task checks all */
    int status = TSGU_OK;
#if TSGU_NARROW
    int64_t rows = hi - lo < m ? hi - lo : m;     /* the most own rows in one item */
    acc_t *S = p > 0 ? malloc((size_t)(rows * p) * sizeof(acc_t) + 1) : NULL;
    if (p > 0 && !S) return TSGU_ENOMEM;
#endif
    for (int64_t k = k0; k < k1 && status == TSGU_OK; k++) {
        int64_t j0 = lo > k * m ? lo - k * m : 0, j1 = hi < (k + 1) * m ? hi - k * m : m;
#if TSGU_NARROW
        status = TSGU_FN(spmm_t_arg_item)(x, k, j0, j1, S, p, p);
#else
        acc_t *own = (acc_t *)x->out->data + k * x->out->bstride + j0 * x->out->rstride;
        status = TSGU_FN(spmm_t_arg_item)(x, k, j0, j1, own, x->out->rstride, p);
#endif
    }
#if TSGU_NARROW
    free(S);
#endif
    return status;
}

TSGU_ISA_ATTR static int TSGU_FN(spmm_t_arg_task)(void *vctx, int64_t t)
{
    const spmm_t_arg_ctx *x = vctx;
    TSGU_BY_WIDTH(x->G->cols, TSGU_FN(spmm_t_arg_rows), x, t)
}

#endif
