#ifndef TSGU_IN_TEMPLATE
/* gatv2_grad_rows.c: the gradient of gatv2_forward.c's out (G, n x H x C) and alpha
 * (galpha, or none) back to the scores and the target side, row by row of A:
 *     galpha_ijh += m_ijh * dot(G[i,h,:], xl[j,h,:])             (through the aggregation)
 *     dz_ijh = alpha_ijh * (galpha_ijh - sum_{j' in row i} alpha_ij'h galpha_ij'h)  (softmax)
 *     du_ijhc = dz_ijh * att[h,c] * (u_ijhc > 0 ? 1 : slope)      (the score, LeakyReLU)
 *     gxr[i,h,c] = sum_{j in row i} du_ijhc,   get[e,h,c] = du_ijhc (when et is given)
 *     arows[i,h,c] = sum_{j in row i} dz_ijh * LeakyReLU(u_ijhc)   (row i's share of att's)
 * with u_ijhc = xl[j,h,c] + xr[i,h,c] (+ et[e,h,c]) recomputed from the rows.  dz (nnz x H)
 * is b's gradient and what gatv2_grad_src.c reads; arows is summed over the rows by
 * gatv2_grad_att.c.  Per row: one pass checking the columns and writing galpha into dz
 * with the row's sum per head (in double, in entry order), one turning it into dz and
 * adding the row's sums.  Each row is done by one thread, so the bits do not depend on
 * the thread count. */
#include <stdlib.h>
#include "tsgu.h"
#include "tsgu_gat.h"
#include "tsgu_parallel.h"
#if defined(__GNUC__) && !defined(__clang__)  /* the LeakyReLU's select then vectorises (no FP */
#pragma GCC optimize("no-trapping-math")      /* exception flag is read; gatv2_forward.c has it by tsgu_exp.h) */
#endif

typedef struct {
    const tsgu_csr *A;
    const tsgu_gatv2 *g;
    const void *alpha, *G, *galpha; /* (nnz, H), (n, H, C), (nnz, H) or NULL */
    void *dz, *gxr, *arows, *get;   /* (nnz, H), (n, H, C), (n, H, C), (nnz, H, C) or NULL */
} gatv2_grad_rows_ctx;

#define TSGU_TEMPLATE_FILE "gatv2_grad_rows.c"
#include "tsgu_template.h"

int tsgu_gatv2_grad_rows(const tsgu_csr *A, const tsgu_gatv2 *g, const void *alpha, const void *G,
                         const void *galpha, void *dz, void *gxr, void *arows, void *get, int nthreads)
{
    gatv2_grad_rows_ctx x = {A, g, alpha, G, galpha, dz, gxr, arows, get};
    int64_t work = g->heads * (4 * g->feats + 4);
    return tsgu_parallel_rows(A, work, nthreads, TSGU_PICK(gatv2_grad_rows_range, A->rtype, A->itype), &x);
}

#else /* template body: real_t, acc_t, idx_t, TSGU_FN */

#include "tsgu_rows.h"
#include "tsgu_gatv2_sum.h"

/* rows [r0, r1) with C constant for the common widths; ws: H + HC doubles */
TSGU_ISA_ATTR TSGU_ALWAYS_INLINE int TSGU_FN(gatv2_grad_rows_rows)(const gatv2_grad_rows_ctx *x, int64_t r0,
                                                                   int64_t r1, double *ws, const int64_t C)
{
    const tsgu_csr *A = x->A;
    const tsgu_gatv2 *g = x->g;
    const idx_t *Aj = A->col;
    const real_t *XL = g->xl, *XR = g->xr, *att = g->att, *ET = g->et;
    const real_t *alpha = x->alpha, *G = x->G, *galpha = x->galpha;
    real_t *dz = x->dz, *gxr = x->gxr, *arows = x->arows, *get = x->get;
    const int64_t H = g->heads, HC = H * C, m = A->ncols, nnz = A->nnz;
    const int64_t ahead = tsgu_prefetch_ahead(HC, sizeof(real_t));
    const acc_t slope = (acc_t)g->slope, scale = (acc_t)g->scale, one = 1;
    double *csum = ws;
    acc_t *restrict v = (acc_t *)(ws + H);  /* an entry's products over its H*C features, or dz over them */
    for (int64_t i = r0; i < r1; i++) {
        int64_t start, end, prev = -1;
        if (!TSGU_FN(row_entries)(A, 0, i, &start, &end)) return TSGU_EPTR_ORDER;
        const real_t *restrict gi = G + i * HC, *restrict xri = XR + i * HC;
        real_t *restrict gr = gxr + i * HC, *restrict ar = arows + i * HC;
        for (int64_t t = 0; t < HC; t++) gr[t] = 0, ar[t] = 0;
        for (int64_t h = 0; h < H; h++) csum[h] = 0;
        for (int64_t e = start; e < end; e++) {         /* galpha, and sum alpha galpha per head */
            int64_t j = Aj[e];
            if (j <= prev || j >= m) return tsgu_col_error(j, m);
            prev = j;
            int64_t jn = e + ahead < nnz ? Aj[e + ahead] : -1;    /* not yet checked: no arithmetic */
            TSGU_PREFETCH_ROW(XL, jn, m, HC, 0, HC);             /* the gathered row, soon */
            const real_t *xj = XL + j * HC, *a = alpha + e * H;
            real_t *t = dz + e * H;
            for (int64_t q = 0; q < HC; q++) v[q] = gi[q] * xj[q];    /* one loop: it vectorises */
            for (int64_t h = 0; h < H; h++) {
                acc_t ga = galpha ? galpha[e * H + h] : 0;
                if (!(g->drop > 0 && tsgu_gat_draw(g->seed, e * H + h) < g->drop))
                    ga += TSGU_FN(gatv2_sum)(v + h * C, C) * scale;
                t[h] = ga;
                csum[h] += a[h] * ga;
            }
        }
        for (int64_t e = start; e < end; e++) {         /* dz, then the row's sums through the score */
            if (e + ahead < end) TSGU_PREFETCH_ROW(XL, Aj[e + ahead], m, HC, 0, HC);
            const real_t *restrict xj = XL + Aj[e] * HC, *a = alpha + e * H;
            const real_t *restrict ete = ET ? ET + e * HC : NULL;
            real_t *t = dz + e * H, *restrict gete = get ? get + e * HC : NULL;
            for (int64_t h = 0; h < H; h++) {
                acc_t gz = a[h] * (t[h] - (acc_t)csum[h]);
                t[h] = gz;
                for (int64_t c = 0; c < C; c++) v[h * C + c] = gz;
            }
            /* one loop over the H*C features, without branches inside: it vectorises */
#define GATV2_ROWS_LOOP(U, STORE)                                        \
            for (int64_t q = 0; q < HC; q++) {                           \
                acc_t u = (U), su = slope * u, lr = u > 0 ? u : su;      \
                acc_t du = v[q] * att[q] * (u > 0 ? one : slope);        \
                gr[q] += du;                                             \
                ar[q] += v[q] * lr;                                      \
                STORE;                                                   \
            }
            if (ete && gete)
                GATV2_ROWS_LOOP((acc_t)(xj[q] + xri[q]) + ete[q], gete[q] = du)
            else if (ete)
                GATV2_ROWS_LOOP((acc_t)(xj[q] + xri[q]) + ete[q], (void)0)
            else
                GATV2_ROWS_LOOP((acc_t)(xj[q] + xri[q]), (void)0)
#undef GATV2_ROWS_LOOP
        }
    }
    return TSGU_OK;
}

TSGU_ISA_ATTR static int TSGU_FN(gatv2_grad_rows_width)(const gatv2_grad_rows_ctx *x, int64_t r0, int64_t r1,
                                                        double *ws)
{
    TSGU_GAT_BY_WIDTH(x->g->feats, TSGU_FN(gatv2_grad_rows_rows), x, r0, r1, ws)
}

TSGU_ISA_ATTR static int TSGU_FN(gatv2_grad_rows_range)(void *vctx, int64_t r0, int64_t r1)
{
    const gatv2_grad_rows_ctx *x = vctx;
    double *ws = malloc((size_t)(x->g->heads + x->g->heads * x->g->feats + 1) * sizeof *ws);
    if (!ws) return TSGU_ENOMEM;
    int status = TSGU_FN(gatv2_grad_rows_width)(x, r0, r1, ws);
    free(ws);
    return status;
}

#endif
