#ifndef TSGU_IN_TEMPLATE
/* lse_grad.c: gradient of row and column log-sum-exps w.r.t. the stored values
 *     out[e] = Gr[r] * exp(v_e - Lr[r]) + Gc[c] * exp(v_e - Lc[c])
 * for entry e in global row r = k*n + i and global column c = k*m + j, each
 * term present when its arrays are given (Lr, Gr of b*n values; Lc, Gc of b*m):
 * the softmax weight of the entry in its group times the group's gradient,
 * written straight into the values gradient, one row per thread, the exps
 * vectorized (tsgu_exp.h).  Columns are read (and checked) only for the
 * column term, the one that addresses memory through them. */
#include "tsgu.h"
#include "tsgu_exp.h"

typedef struct {
    const tsgu_csr *A;
    const void *Lr, *Gr, *Lc, *Gc;
    void *out;
} lse_grad_ctx;

#define TSGU_BLOCK 64 /* entries of a row whose column terms are computed together */
#define TSGU_AHEAD 16 /* entries ahead whose column terms are prefetched */

#define TSGU_TEMPLATE_FILE "lse_grad.c"
#include "tsgu_template.h"

int tsgu_lse_grad(const tsgu_csr *A, const void *row_lse, const void *row_grad,
                  const void *col_lse, const void *col_grad, void *out, int nthreads)
{
    lse_grad_ctx x = {A, row_lse, row_grad, col_lse, col_grad, out};
    return tsgu_parallel_rows(A, 4, nthreads, TSGU_PICK(lse_grad_range, A->rtype, A->itype), &x);
}

#else /* template body: real_t, idx_t, TSGU_FN */

#include "tsgu_rows.h"

TSGU_ISA_ATTR static int TSGU_FN(lse_grad_range)(void *vctx, int64_t r0, int64_t r1)
{
    const lse_grad_ctx *x = vctx;
    const tsgu_csr *A = x->A;
    const idx_t *Aj = A->col;
    const real_t *Ax = A->val, *Lr = x->Lr, *Gr = x->Gr, *Lc = x->Lc, *Gc = x->Gc;
    real_t *out = x->out;
    int64_t n = A->nrows, m = A->ncols;
    real_t d[TSGU_BLOCK], gc[TSGU_BLOCK];
    for (int64_t r = r0; r < r1; r++) {
        int64_t k = r / n, i = r - k * n, start, end, prev = -1;
        if (!TSGU_FN(row_entries)(A, k, i, &start, &end)) return TSGU_EPTR_ORDER;
        const real_t lr = Lr ? Lr[r] : 0, gr = Lr ? Gr[r] : 0;
        for (int64_t e0 = start; e0 < end; e0 += TSGU_BLOCK) {
            int64_t w = end - e0 < TSGU_BLOCK ? end - e0 : TSGU_BLOCK;
            const real_t *v = Ax + e0;
            real_t *o = out + e0;
            if (Lr)
                for (int64_t q = 0; q < w; q++) o[q] = gr * TSGU_EXP((real_t)(v[q] - lr));  /* vectorized */
            else
                for (int64_t q = 0; q < w; q++) o[q] = 0;
            if (!Lc) continue;
            for (int64_t q = 0; q < w; q++) {               /* gather the column terms */
                int64_t j = Aj[e0 + q];
                if (j <= prev || j >= m) return tsgu_col_error(j, m);
                prev = j;
                if (e0 + q + TSGU_AHEAD < A->nnz) { /* columns needed soon; a prefetch cannot fault */
                    TSGU_PREFETCH(Lc + k * m + Aj[e0 + q + TSGU_AHEAD]);
                    TSGU_PREFETCH(Gc + k * m + Aj[e0 + q + TSGU_AHEAD]);
                }
                d[q] = v[q] - Lc[k * m + j];
                gc[q] = Gc[k * m + j];
            }
            for (int64_t q = 0; q < w; q++) o[q] += gc[q] * TSGU_EXP(d[q]);              /* vectorized */
        }
    }
    return TSGU_OK;
}

#endif
