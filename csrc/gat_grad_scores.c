#ifndef TSGU_IN_TEMPLATE
/* gat_grad_scores.c: the gradient of gat_forward.c's out (G, n x H x F) and alpha
 * (galpha, or none) back to the scores, row by row of A:
 *     galpha_ijh += m_ijh * dot(G[i,h,:], x[j,h,:])          (through the aggregation)
 *     ge_ijh = alpha_ijh * (galpha_ijh - sum_{j' in row i} alpha_ij'h galpha_ij'h)   (softmax)
 *     dz_ijh = z_ijh > 0 ? ge_ijh : slope * ge_ijh,   z_ijh = s[j,h] + d[i,h] (+ E[e,h])   (LeakyReLU)
 *     gd[i,h] = sum_{j in row i} dz_ijh
 * dz is written (nnz x H) for gat_grad_src.c, which sums it over the sources; it is also
 * the gradient of the per-entry scores E.
 * Per row: one pass checking the columns and writing galpha into dz with the row's
 * sum per head (in double, in entry order), one turning it into dz and summing gd.
 * Each row is done by one thread, so the bits do not depend on the thread count. */
#include <stdlib.h>
#include "tsgu.h"
#include "tsgu_gat.h"
#include "tsgu_parallel.h"

typedef struct {
    const tsgu_csr *A;
    const tsgu_gat *g;
    const void *alpha, *G, *galpha; /* (nnz, H), (n, H, F), (nnz, H) or NULL */
    void *dz, *gd;                  /* (nnz, H), (n, H) */
} gat_grad_scores_ctx;

#define TSGU_TEMPLATE_FILE "gat_grad_scores.c"
#include "tsgu_template.h"

int tsgu_gat_grad_scores(const tsgu_csr *A, const tsgu_gat *g, const void *alpha, const void *G,
                         const void *galpha, void *dz, void *gd, int nthreads)
{
    gat_grad_scores_ctx x = {A, g, alpha, G, galpha, dz, gd};
    int64_t work = g->heads * (g->feats + 4);
    return tsgu_parallel_rows(A, work, nthreads, TSGU_PICK(gat_grad_scores_range, A->rtype, A->itype), &x);
}

#else /* template body: real_t, acc_t, idx_t, TSGU_FN */

#include "tsgu_rows.h"

/* rows [r0, r1) with F constant for the common widths; ws: 2H doubles */
TSGU_ISA_ATTR TSGU_ALWAYS_INLINE int TSGU_FN(gat_grad_scores_rows)(const gat_grad_scores_ctx *x, int64_t r0,
                                                                   int64_t r1, double *ws, const int64_t F)
{
    const tsgu_csr *A = x->A;
    const tsgu_gat *g = x->g;
    const idx_t *Aj = A->col;
    const real_t *X = g->x, *s = g->s, *d = g->d, *E = g->e, *alpha = x->alpha, *G = x->G, *galpha = x->galpha;
    real_t *dz = x->dz, *gd = x->gd;
    const int64_t H = g->heads, HF = H * F, m = A->ncols, nnz = A->nnz;
    const int64_t ahead = tsgu_prefetch_ahead(HF, sizeof(real_t));
    const acc_t slope = (acc_t)g->slope, scale = (acc_t)g->scale;
    double *c = ws, *sd = ws + H;
    for (int64_t i = r0; i < r1; i++) {
        int64_t start, end, prev = -1;
        if (!TSGU_FN(row_entries)(A, 0, i, &start, &end)) return TSGU_EPTR_ORDER;
        const real_t *gi = G + i * HF, *di = d + i * H;
        for (int64_t h = 0; h < H; h++) c[h] = 0, sd[h] = 0;
        for (int64_t e = start; e < end; e++) {         /* galpha, and sum alpha galpha per head */
            int64_t j = Aj[e];
            if (j <= prev || j >= m) return tsgu_col_error(j, m);
            prev = j;
            int64_t jn = e + ahead < nnz ? Aj[e + ahead] : -1;    /* not yet checked: no arithmetic */
            TSGU_PREFETCH_ROW(X, jn, m, HF, 0, HF);             /* the gathered rows, soon */
            TSGU_PREFETCH_ROW(s, jn, m, H, 0, H);
            const real_t *xj = X + j * HF, *a = alpha + e * H;
            real_t *t = dz + e * H;
            for (int64_t h = 0; h < H; h++) {
                acc_t ga = galpha ? galpha[e * H + h] : 0;
                if (!tsgu_gat_dropped(g, e * H + h)) {
                    const real_t *restrict xh = xj + h * F, *restrict gh = gi + h * F;
                    acc_t dot = 0;
                    for (int64_t f = 0; f < F; f++) dot += gh[f] * xh[f];
                    ga += dot * scale;
                }
                t[h] = ga;
                c[h] += a[h] * ga;
            }
        }
        for (int64_t e = start; e < end; e++) {         /* dz, and gd as its row sums */
            const real_t *sj = s + Aj[e] * H, *a = alpha + e * H;
            real_t *t = dz + e * H;
            const real_t *Ee = E ? E + e * H : NULL;
            for (int64_t h = 0; h < H; h++) {
                acc_t ge = a[h] * (t[h] - (acc_t)c[h]), z = sj[h] + di[h];
                if (Ee) z += Ee[h];
                t[h] = z > 0 ? ge : slope * ge;
                sd[h] += t[h];
            }
        }
        for (int64_t h = 0; h < H; h++) gd[i * H + h] = (real_t)sd[h];
    }
    return TSGU_OK;
}

TSGU_ISA_ATTR static int TSGU_FN(gat_grad_scores_width)(const gat_grad_scores_ctx *x, int64_t r0, int64_t r1,
                                                        double *ws)
{
    TSGU_GAT_BY_WIDTH(x->g->feats, TSGU_FN(gat_grad_scores_rows), x, r0, r1, ws)
}

TSGU_ISA_ATTR static int TSGU_FN(gat_grad_scores_range)(void *vctx, int64_t r0, int64_t r1)
{
    const gat_grad_scores_ctx *x = vctx;
    double *ws = malloc((size_t)(2 * x->g->heads + 1) * sizeof *ws);
    if (!ws) return TSGU_ENOMEM;
    int status = TSGU_FN(gat_grad_scores_width)(x, r0, r1, ws);
    free(ws);
    return status;
}

#endif
