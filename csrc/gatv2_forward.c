#ifndef TSGU_IN_TEMPLATE
/* gatv2_forward.c: GATv2 attention (Brody et al.), over H heads of C features: the
 * attention of gat_forward.c (softmax over each row's entries, alpha written before
 * dropout, the same dropout draw, the rows xl[j] aggregated into out[i], its three
 * passes per row, one thread a row), with the score of entry (i, j)
 *     z_ijh = sum_c att[h,c] * LeakyReLU(u_ijhc)  (+ b[e,h] when given),
 *     u_ijhc = xl[j,h,c] + xr[i,h,c]  (+ et[e,h,c], the entry's edge term, when given)
 * in place of LeakyReLU(s[j,h] + d[i,h]).  The LeakyReLU sits inside the sum over c,
 * so each score is computed from the two rows on the fly: nothing of size nnz x H x C
 * exists. */
#include <stdlib.h>
#include "tsgu.h"
#include "tsgu_gat.h"
#include "tsgu_parallel.h"
#include "tsgu_exp.h" /* last: its pragmas apply to the rest of the file */

typedef struct {
    const tsgu_csr *A;
    const tsgu_gatv2 *g;
    void *alpha, *out; /* (nnz, H), (n, H, C) */
} gatv2_forward_ctx;

#define TSGU_TEMPLATE_FILE "gatv2_forward.c"
#include "tsgu_template.h"

int tsgu_gatv2_forward(const tsgu_csr *A, const tsgu_gatv2 *g, void *alpha, void *out, int nthreads)
{
    gatv2_forward_ctx x = {A, g, alpha, out};
    int64_t work = g->heads * (3 * g->feats + 4); /* per entry: the score's rows, then a row of xl */
    return tsgu_parallel_rows(A, work, nthreads, TSGU_PICK(gatv2_forward_range, A->rtype, A->itype), &x);
}

#else /* template body: real_t, acc_t, idx_t, TSGU_FN */

#include "tsgu_rows.h"
#include "tsgu_gatv2_sum.h"

/* rows [r0, r1) with C constant for the common widths; ws: 3H + 2HC doubles */
TSGU_ISA_ATTR TSGU_ALWAYS_INLINE int TSGU_FN(gatv2_forward_rows)(const gatv2_forward_ctx *x, int64_t r0, int64_t r1,
                                                                 double *ws, const int64_t C)
{
    const tsgu_csr *A = x->A;
    const tsgu_gatv2 *g = x->g;
    const idx_t *Aj = A->col;
    const real_t *XL = g->xl, *XR = g->xr, *att = g->att, *ET = g->et, *B = g->b;
    real_t *alpha = x->alpha, *out = x->out;
    const int64_t H = g->heads, HC = H * C, m = A->ncols, nnz = A->nnz;
    const int64_t ahead = tsgu_prefetch_ahead(HC, sizeof(real_t));
    const acc_t slope = (acc_t)g->slope, scale = (acc_t)g->scale;
    double *mx = ws, *sum = ws + H;
    acc_t *restrict w = (acc_t *)(ws + 2 * H), *restrict wv = w + H; /* an entry's weights, by head, by feature */
    acc_t *restrict lr = wv + HC;                                     /* an entry's att[h,c] LeakyReLU(u) */
    for (int64_t i = r0; i < r1; i++) {
        int64_t start, end, prev = -1;
        if (!TSGU_FN(row_entries)(A, 0, i, &start, &end)) return TSGU_EPTR_ORDER;
        real_t *restrict o = out + i * HC;
        const real_t *restrict xri = XR + i * HC;
        for (int64_t t = 0; t < HC; t++) o[t] = 0;
        for (int64_t h = 0; h < H; h++) mx[h] = -INFINITY, sum[h] = 0;
        for (int64_t e = start; e < end; e++) {         /* the scores z_ijh, and their max */
            int64_t j = Aj[e];
            if (j <= prev || j >= m) return tsgu_col_error(j, m);
            prev = j;
            int64_t jn = e + ahead < nnz ? Aj[e + ahead] : -1;    /* not yet checked: no arithmetic */
            TSGU_PREFETCH_ROW(XL, jn, m, HC, 0, HC);           /* the gathered row, soon */
            const real_t *restrict xlj = XL + j * HC, *restrict ete = ET ? ET + e * HC : NULL;
            real_t *a = alpha + e * H;
            if (ete)                                     /* one loop over the H*C features: it vectorises */
                for (int64_t t = 0; t < HC; t++) {
                    acc_t u = (acc_t)(xlj[t] + xri[t]) + ete[t], v = slope * u;
                    lr[t] = att[t] * (u > 0 ? u : v);
                }
            else
                for (int64_t t = 0; t < HC; t++) {
                    acc_t u = xlj[t] + xri[t], v = slope * u;
                    lr[t] = att[t] * (u > 0 ? u : v);
                }
            for (int64_t h = 0; h < H; h++) {
                acc_t z = TSGU_FN(gatv2_sum)(lr + h * C, C);
                if (B) z += B[e * H + h];
                a[h] = z;
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
        for (int64_t e = start; e < end; e++) {         /* alpha, and out[i] += alpha m xl[j] */
            if (e + ahead < end) TSGU_PREFETCH_ROW(XL, Aj[e + ahead], m, HC, 0, HC);
            const real_t *restrict xj = XL + Aj[e] * HC;
            real_t *a = alpha + e * H;
            for (int64_t h = 0; h < H; h++) {
                a[h] = a[h] * (acc_t)sum[h];
                w[h] = g->drop ? (tsgu_gat_draw(g->seed, e * H + h) < g->drop ? 0 : a[h] * scale) : a[h];
            }
            for (int64_t h = 0; h < H; h++)                  /* each weight over its head's C features */
                for (int64_t c = 0; c < C; c++) wv[h * C + c] = w[h];
            for (int64_t t = 0; t < HC; t++) o[t] += wv[t] * xj[t];
        }
    }
    return TSGU_OK;
}

TSGU_ISA_ATTR static int TSGU_FN(gatv2_forward_width)(const gatv2_forward_ctx *x, int64_t r0, int64_t r1,
                                                      double *ws)
{
    TSGU_GAT_BY_WIDTH(x->g->feats, TSGU_FN(gatv2_forward_rows), x, r0, r1, ws)
}

TSGU_ISA_ATTR static int TSGU_FN(gatv2_forward_range)(void *vctx, int64_t r0, int64_t r1)
{
    const gatv2_forward_ctx *x = vctx;
    double *ws = malloc((size_t)(3 * x->g->heads + 2 * x->g->heads * x->g->feats + 1) * sizeof *ws);
    if (!ws) return TSGU_ENOMEM;
    int status = TSGU_FN(gatv2_forward_width)(x, r0, r1, ws);
    free(ws);
    return status;
}

#endif
