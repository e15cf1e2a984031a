#ifndef TSGU_IN_TEMPLATE
/* spmm_t_arg.c: the gradient of C = A (max|min) B (spmm_arg.c) w.r.t. B, each
 * output element's gradient sent through its arg entry alone:
 *     out[k][j,t] = sum over rows i with e = start(i) + arg[k][i,t] and A.col[e] = j
 *                   of A.val[e] * G[k][i,t]
 * No atomics: each out element has one owner, which walks the args of its item
 * in row order, so it is summed in increasing i (PyTorch's order) whatever the
 * thread count.  Owners are blocks of out's columns t, whole cache lines each,
 * where p spans two lines or more (a thread then reads only its columns of arg
 * and G), times ranges of the global out rows k*m + j, as in spmm_t.c.  Every
 * arg is checked to name an entry of its row, and every column read through to
 * lie in [0, m).  The only memory is the output, and for 16-bit values float
 * sums for the owned block of an item (rounded once). */
#include <stdlib.h>
#include "tsgu.h"
#include "tsgu_advise.h"
#include "tsgu_parallel.h"
#include "tsgu_prefetch.h"

typedef struct {
    const tsgu_csr *A;
    const int32_t *arg;
    const tsgu_dense *G;
    tsgu_dense *out;
    int64_t colblocks, rowblocks; /* task t owns column block t % colblocks, row block t / colblocks */
} spmm_t_arg_ctx;

#define TSGU_MIN_WORK (1 << 18) /* output elements below which one thread does it all */

#define TSGU_HALF_TOO 1
#define TSGU_TEMPLATE_FILE "spmm_t_arg.c"
#include "tsgu_template.h"

int tsgu_spmm_t_arg(const tsgu_csr *A, const int32_t *arg, const tsgu_dense *G, tsgu_dense *out,
                    int nthreads)
{
    int64_t p = G->cols, T = nthreads < 1 ? 1 : nthreads, work = A->batch * A->nrows * (p > 0 ? p : 1);
    int64_t lines = p * tsgu_real_size(A->rtype) / TSGU_LINE;   /* whole cache lines of a row */
    if (T > TSGU_MAX_THREADS) T = TSGU_MAX_THREADS;
    if (T > work / TSGU_MIN_WORK) T = work / TSGU_MIN_WORK;
    if (T < 1) T = 1;
    int64_t cb = lines >= 2 ? (T < lines ? T : lines) : 1, rb = T / cb;
    if (rb > A->batch * A->ncols) rb = A->batch * A->ncols;
    if (rb < 1) rb = 1;
    spmm_t_arg_ctx x = {A, arg, G, out, cb, rb};
    tsgu_advise_output(out->data, tsgu_dense_span(out));
    return tsgu_parallel_tasks(cb * rb, TSGU_PICK_HALF(spmm_t_arg_task, A->rtype, A->itype), &x);
}

#else /* template body: real_t, acc_t, idx_t, TSGU_FN, ... (tsgu_template_types.h) */

#include "tsgu_rows.h"

/* out rows [j0, j1) x columns [t0, t1) of item k, summed in S (element (j, t) at
 * S + (j - j0) * lds + t - t0: out itself, or floats rounded into out at the end) */
TSGU_ISA_ATTR static int TSGU_FN(spmm_t_arg_item)(const spmm_t_arg_ctx *x, int64_t k, int64_t j0, int64_t j1,
                                                  int64_t t0, int64_t t1, acc_t *S, int64_t lds)
{
    const tsgu_csr *A = x->A;
    const idx_t *Aj = A->col;
    const real_t *Ax = A->val;
    const int32_t *arg = x->arg;
    const real_t *Gk = (const real_t *)x->G->data + k * x->G->bstride;
    int64_t n = A->nrows, m = A->ncols, nnz = A->nnz, ldg = x->G->rstride, p = x->G->cols, w = t1 - t0;
    const int64_t ahead = tsgu_prefetch_ahead(w, sizeof(acc_t));
    for (int64_t j = j0; j < j1; j++)             /* sums start at zero */
        for (int64_t t = 0; t < w; t++) S[(j - j0) * lds + t] = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t start, end;
        if (!TSGU_FN(row_entries)(A, k, i, &start, &end)) return TSGU_EPTR_ORDER;
        const int32_t *g = arg + (k * n + i) * p;
        const real_t *gi = Gk + i * ldg;
        for (int64_t e = start + ahead; e < end + ahead && e < nnz; e++) {
            int64_t jn = Aj[e];                   /* not yet checked: no arithmetic */
            if (jn >= j0 && jn < j1) TSGU_PREFETCH_ROW(S, jn - j0, j1 - j0, lds, 0, w); /* own row soon */
        }
        for (int64_t t = t0; t < t1; t++) {
            int64_t o = g[t], e = start + o;
            if (o < -1 || e >= end) return TSGU_EARG;
            if (o < 0) continue;
            int64_t j = Aj[e];
            if (j < 0 || j >= m) return TSGU_ECOL_RANGE;
            if (j < j0 || j >= j1) continue;      /* another thread's row */
            S[(j - j0) * lds + t - t0] += TSGU_LOAD(Ax[e]) * TSGU_LOAD(gi[t]);   /* out[j,t] += a * G[i,t] */
        }
    }
#if TSGU_NARROW
    real_t *Ok = (real_t *)x->out->data + k * x->out->bstride + t0;
    int64_t ldo = x->out->rstride;
    for (int64_t j = j0; j < j1; j++)
        for (int64_t t = 0; t < w; t++) Ok[j * ldo + t] = TSGU_STORE(S[(j - j0) * lds + t]);
#endif
    return TSGU_OK;
}

/* the block of task t: columns [t0, t1) (whole lines) and global out rows [lo, hi);
 * for each item it has rows in, the args walked (and checked) whole */
TSGU_ISA_ATTR static int TSGU_FN(spmm_t_arg_task)(void *vctx, int64_t t)
{
    const spmm_t_arg_ctx *x = vctx;
    int64_t b = x->A->batch, m = x->A->ncols, R = b * m, p = x->G->cols, cb = x->colblocks, rb = x->rowblocks;
    int64_t c = t % cb, r = t / cb, per_line = TSGU_LINE / (int64_t)sizeof(real_t);
    int64_t lines = (p + per_line - 1) / per_line;
    int64_t t0 = lines * c / cb * per_line, t1 = c + 1 == cb ? p : lines * (c + 1) / cb * per_line;
    int64_t lo = R * r / rb, hi = R * (r + 1) / rb;
    int64_t k0 = m ? lo / m : 0, k1 = m ? (hi + m - 1) / m : b; /* m = 0: one task checks all */
    int status = TSGU_OK;
#if TSGU_NARROW
    int64_t rows = hi - lo < m ? hi - lo : m;     /* the most own rows in one item */
    acc_t *S = malloc((size_t)(rows * (t1 - t0)) * sizeof(acc_t) + 1);
    if (!S) return TSGU_ENOMEM;
#else
    acc_t *Ox = x->out->data;
    int64_t bso = x->out->bstride, ldo = x->out->rstride;
#endif
    for (int64_t k = k0; k < k1 && status == TSGU_OK; k++) {
        int64_t j0 = lo > k * m ? lo - k * m : 0, j1 = hi < (k + 1) * m ? hi - k * m : m;
#if TSGU_NARROW
        status = TSGU_FN(spmm_t_arg_item)(x, k, j0, j1, t0, t1, S, t1 - t0);
#else
        status = TSGU_FN(spmm_t_arg_item)(x, k, j0, j1, t0, t1, Ox + k * bso + j0 * ldo + t0, ldo);
#endif
    }
#if TSGU_NARROW
    free(S);
#endif
    return status;
}

#endif
