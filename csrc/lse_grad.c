#ifndef TSGU_IN_TEMPLATE
/* lse_grad.c: gradient of row and column log-sum-exps w.r.t. the stored values
 *     out[e] = Gr[r] * exp(v_e - Lr[r]) + Gc[c] * exp(v_e - Lc[c])
 * for entry e in global row r = k*n + i and global column c = k*m + j, each
 * term present when its arrays are given (Lr, Gr of b*n values; Lc, Gc of b*m):
 * the softmax weight of the entry in its group times the group's gradient,
 * written straight into the values gradient, one row per thread, the exps
 * vectorized (tsgu_exp.h).  Columns are read (and checked) only for the
 * column term, the one that addresses memory through them; Lc and Gc are first
 * interleaved into one workspace of (Lc[c], Gc[c]) pairs, so that an entry's
 * column term reads one cache line, not two. */
#include <stdlib.h>
#include "tsgu.h"
#include "tsgu_parallel.h"
#include "tsgu_prefetch.h"
#include "tsgu_exp.h" /* last: its pragmas apply to the rest of the file */

typedef struct {
    const tsgu_csr *A;
    const void *Lr, *Gr;
    void *LGc; /* (Lc[c], Gc[c]) at [2c], [2c+1]; NULL without the column term */
    void *out;
} lse_grad_ctx;

#define TSGU_BLOCK 64 /* entries of a row whose column terms are computed together */
#define TSGU_AHEAD 128 /* entries ahead whose column terms are prefetched */

#define TSGU_TEMPLATE_FILE "lse_grad.c"
#include "tsgu_template.h"

int tsgu_lse_grad(const tsgu_csr *A, const void *row_lse, const void *row_grad,
                  const void *col_lse, const void *col_grad, void *out, int nthreads)
{
    return TSGU_PICK(lse_grad_run, A->rtype, A->itype)(A, row_lse, row_grad, col_lse, col_grad, out,
                                                      nthreads);
}

#else /* template body: real_t, idx_t, TSGU_FN */

#include "tsgu_rows.h"

TSGU_ISA_ATTR static int TSGU_FN(lse_grad_range)(void *vctx, int64_t r0, int64_t r1)
{
    const lse_grad_ctx *x = vctx;
    const tsgu_csr *A = x->A;
    const idx_t *Aj = A->col;
    const real_t *Ax = A->val, *Lr = x->Lr, *Gr = x->Gr, *LGc = x->LGc;
    real_t *out = x->out;
    int64_t n = A->nrows, m = A->ncols, nnz = A->nnz;
    real_t d[TSGU_BLOCK], gc[TSGU_BLOCK];
    for (int64_t r = r0; r < r1; r++) {
        int64_t k = tsgu_item_of(A, r), i = r - k * n, start, end, prev = -1;
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
            if (!LGc) continue;
            for (int64_t q = 0; q < w; q++) {               /* gather the column terms */
                int64_t j = Aj[e0 + q];
                if (j <= prev || j >= m) return tsgu_col_error(j, m);
                prev = j;
                if (e0 + q + TSGU_AHEAD < nnz) {      /* a pair needed soon (its column in range) */
                    int64_t ja = Aj[e0 + q + TSGU_AHEAD];
                    TSGU_PREFETCH(LGc + 2 * (k * m + ((uint64_t)ja < (uint64_t)m ? ja : 0)));
                }
                d[q] = v[q] - LGc[2 * (k * m + j)];
                gc[q] = LGc[2 * (k * m + j) + 1];
            }
            for (int64_t q = 0; q < w; q++) o[q] += gc[q] * TSGU_EXP(d[q]);              /* vectorized */
        }
    }
    return TSGU_OK;
}

TSGU_ISA_ATTR static int TSGU_FN(lse_grad_run)(const tsgu_csr *A, const void *Lr, const void *Gr,
                                               const void *vLc, const void *vGc, void *out, int nthreads)
{
    const real_t *Lc = vLc, *Gc = vGc;
    int64_t C = A->batch * A->ncols;
    real_t *LGc = Lc ? malloc((size_t)(C ? C : 1) * 2 * sizeof(real_t)) : NULL;  /* non-NULL: columns checked */
    if (Lc && !LGc) return TSGU_ENOMEM;
    for (int64_t c = 0; LGc && c < C; c++) {
        LGc[2 * c] = Lc[c];
        LGc[2 * c + 1] = Gc[c];
    }
    lse_grad_ctx x = {A, Lr, Gr, LGc, out};
    int status = tsgu_parallel_rows(A, 4, nthreads, TSGU_FN(lse_grad_range), &x);
    free(LGc);
    return status;
}

#endif
