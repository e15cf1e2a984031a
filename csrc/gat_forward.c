#ifndef TSGU_IN_TEMPLATE
/* gat_forward.c: graph attention over the stored entries of each row of A (n x m),
 * H heads of F features, row i a target node attending to its source nodes j:
 *     z_ijh = s[j,h] + d[i,h] (+ E[e,h], the entry's own score, when given),   e_ijh = z_ijh > 0 ? z_ijh : slope * z_ijh
 *     alpha_ijh = exp(e_ijh) / sum_{j' in row i} exp(e_ij'h)
 *     out[i,h,:] = sum_{j in row i} alpha_ijh * m_ijh * x[j,h,:]
 * m_ijh = 0 for a dropped (entry, head) and scale for a kept one (dropout, drawn by
 * tsgu_gat_draw in tsgu_gat.h), 1 without dropout.  alpha is written before dropout,
 * one value per (entry, head): the only E-sized output; nothing of size E x H x F
 * exists.  Per row: one pass checking the columns and writing the scores with their
 * max per head, one replacing them by their shifted exps (summed in double, in entry
 * order), one normalising them and adding the rows x[j] into out[i] (each entry's
 * weights spread over its heads' features, then one loop over the row).  The gathered
 * rows s[j] and x[j] are prefetched some entries ahead.  Each row is done by one
 * thread, so the bits do not depend on the thread count. */
#include <stdlib.h>
#include "tsgu.h"
#include "tsgu_gat.h"
#include "tsgu_parallel.h"
#include "tsgu_exp.h" /* last: its pragmas apply to the rest of the file */

typedef struct {
    const tsgu_csr *A;
    const tsgu_gat *g;
    void *alpha, *out; /* (nnz, H), (n, H, F) */
} gat_forward_ctx;

#define TSGU_TEMPLATE_FILE "gat_forward.c"
#include "tsgu_template.h"

int tsgu_gat_forward(const tsgu_csr *A, const tsgu_gat *g, void *alpha, void *out, int nthreads)
{
    gat_forward_ctx x = {A, g, alpha, out};
    int64_t work = g->heads * (g->feats + 4);  /* per entry: the scores, then a row of x */
    return tsgu_parallel_rows(A, work, nthreads, TSGU_PICK(gat_forward_range, A->rtype, A->itype), &x);
}

#else /* template body: real_t, acc_t, idx_t, TSGU_FN */

#include "tsgu_rows.h"

/* rows [r0, r1) with F constant for the common widths; ws: 3H + HF doubles */
TSGU_ISA_ATTR TSGU_ALWAYS_INLINE int TSGU_FN(gat_forward_rows)(const gat_forward_ctx *x, int64_t r0, int64_t r1,
                                                               double *ws, const int64_t F)
{
    const tsgu_csr *A = x->A;
    const tsgu_gat *g = x->g;
    const idx_t *Aj = A->col;
    const real_t *X = g->x, *s = g->s, *d = g->d, *E = g->e;
    real_t *alpha = x->alpha, *out = x->out;
    const int64_t H = g->heads, HF = H * F, m = A->ncols, nnz = A->nnz;
    const int64_t ahead = tsgu_prefetch_ahead(HF, sizeof(real_t));
    const acc_t slope = (acc_t)g->slope, scale = (acc_t)g->scale;
    double *mx = ws, *sum = ws + H;
    acc_t *restrict w = (acc_t *)(ws + 2 * H), *restrict wv = w + H;  /* an entry's weights, by head, by feature */
    for (int64_t i = r0; i < r1; i++) {
        int64_t start, end, prev = -1;
        if (!TSGU_FN(row_entries)(A, 0, i, &start, &end)) return TSGU_EPTR_ORDER;
        real_t *restrict o = out + i * HF;
        for (int64_t t = 0; t < HF; t++) o[t] = 0;
        const real_t *di = d + i * H;
        for (int64_t h = 0; h < H; h++) mx[h] = -INFINITY, sum[h] = 0;
        for (int64_t e = start; e < end; e++) {         /* the scores e_ijh, and their max */
            int64_t j = Aj[e];
            if (j <= prev || j >= m) return tsgu_col_error(j, m);
            prev = j;
            int64_t jn = e + ahead < nnz ? Aj[e + ahead] : -1;    /* not yet checked: no arithmetic */
            TSGU_PREFETCH_ROW(s, jn, m, H, 0, H);             /* the gathered rows, soon */
            TSGU_PREFETCH_ROW(X, jn, m, HF, 0, HF);
            const real_t *sj = s + j * H;
            real_t *a = alpha + e * H;
            for (int64_t h = 0; h < H; h++) {
                acc_t z = sj[h] + di[h];
                if (E) z += E[e * H + h];
                a[h] = z > 0 ? z : slope * z;
                mx[h] = a[h] > mx[h] ? a[h] : mx[h];
            }
        }
        for (int64_t e = start; e < end; e++) {         /* their shifted exps, summed per head */
            real_t *a = alpha + e * H;
            for (int64_t h = 0; h < H; h++) {
                a[h] = TSGU_EXP((acc_t)(a[h] - (acc_t)mx[h]));
                sum[h] += a[h];
            }
        }
        for (int64_t h = 0; h < H; h++) sum[h] = 1.0 / sum[h];
        for (int64_t e = start; e < end; e++) {         /* alpha, and out[i] += alpha m x[j] */
            if (e + ahead < end) TSGU_PREFETCH_ROW(X, Aj[e + ahead], m, HF, 0, HF);
            const real_t *restrict xj = X + Aj[e] * HF;
            real_t *a = alpha + e * H;
            for (int64_t h = 0; h < H; h++) {
                a[h] = a[h] * (acc_t)sum[h];
                w[h] = g->drop ? (tsgu_gat_dropped(g, e * H + h) ? 0 : a[h] * scale) : a[h];
            }
            for (int64_t h = 0; h < H; h++)                  /* each weight over its head's F features */
                for (int64_t f = 0; f < F; f++) wv[h * F + f] = w[h];
            for (int64_t t = 0; t < HF; t++) o[t] += wv[t] * xj[t];
        }
    }
    return TSGU_OK;
}

TSGU_ISA_ATTR static int TSGU_FN(gat_forward_width)(const gat_forward_ctx *x, int64_t r0, int64_t r1, double *ws)
{
    TSGU_GAT_BY_WIDTH(x->g->feats, TSGU_FN(gat_forward_rows), x, r0, r1, ws)
}

TSGU_ISA_ATTR static int TSGU_FN(gat_forward_range)(void *vctx, int64_t r0, int64_t r1)
{
    const gat_forward_ctx *x = vctx;
    double *ws = malloc((size_t)(3 * x->g->heads + x->g->heads * x->g->feats + 1) * sizeof *ws);
    if (!ws) return TSGU_ENOMEM;
    int status = TSGU_FN(gat_forward_width)(x, r0, r1, ws);
    free(ws);
    return status;
}

#endif
