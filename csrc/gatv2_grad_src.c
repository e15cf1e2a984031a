#ifndef TSGU_IN_TEMPLATE
/* gatv2_grad_src.c: the gradient of gatv2_forward.c w.r.t. the source rows xl, which
 * enter both the messages and the scores; sums over the entries of each column j of A:
 *     gxl[j,h,c] = sum_{i: (i,j) stored} alpha_ijh * m_ijh * G[i,h,c]
 *                                      + dz_ijh * att[h,c] * (u_ijhc > 0 ? 1 : slope)
 * with dz from gatv2_grad_rows.c and u_ijhc = xl[j,h,c] + xr[i,h,c] (+ et[e,h,c])
 * recomputed from the rows.  No transpose built and no atomics (as gat_grad_src.c):
 * thread t owns the columns [m*t/T, m*(t+1)/T), walks all of A's entries in row order
 * (checking them) and adds only into its own rows of gxl.  Each is summed by one thread
 * in increasing i -- the order of the serial loop -- so the bits do not depend on the
 * thread count. */
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
    const void *alpha, *G, *dz; /* (nnz, H), (n, H, C), (nnz, H) */
    void *gxl;                  /* (m, H, C) */
    int64_t T;
} gatv2_grad_src_ctx;

#define TSGU_MIN_WORK (1 << 18) /* multiply-adds below which one thread does it all */

#define TSGU_TEMPLATE_FILE "gatv2_grad_src.c"
#include "tsgu_template.h"

int tsgu_gatv2_grad_src(const tsgu_csr *A, const tsgu_gatv2 *g, const void *alpha, const void *G, const void *dz,
                        void *gxl, int nthreads)
{
    int64_t T = nthreads < 1 ? 1 : nthreads, work = A->nnz * g->heads * (3 * g->feats + 1);
    if (T > TSGU_MAX_THREADS) T = TSGU_MAX_THREADS;
    if (T > work / TSGU_MIN_WORK) T = work / TSGU_MIN_WORK;
    if (T > A->ncols) T = A->ncols;
    if (T < 1) T = 1;
    gatv2_grad_src_ctx x = {A, g, alpha, G, dz, gxl, T};
    return tsgu_parallel_tasks(T, TSGU_PICK(gatv2_grad_src_task, A->rtype, A->itype), &x);
}

#else /* template body: real_t, acc_t, idx_t, TSGU_FN */

#include "tsgu_rows.h"

/* the columns of task t, C constant for the common widths; ws: 2HC doubles */
TSGU_ISA_ATTR TSGU_ALWAYS_INLINE int TSGU_FN(gatv2_grad_src_cols)(const gatv2_grad_src_ctx *x, int64_t t,
                                                                  double *ws, const int64_t C)
{
    const tsgu_csr *A = x->A;
    const tsgu_gatv2 *g = x->g;
    const idx_t *Aj = A->col;
    const real_t *XL = g->xl, *XR = g->xr, *att = g->att, *ET = g->et;
    const real_t *alpha = x->alpha, *G = x->G, *dz = x->dz;
    real_t *gxl = x->gxl;
    const int64_t H = g->heads, HC = H * C, n = A->nrows, m = A->ncols, nnz = A->nnz;
    const int64_t ahead = tsgu_prefetch_ahead(HC, sizeof(real_t));
    const int64_t j0 = m * t / x->T, j1 = m * (t + 1) / x->T;
    const acc_t scale = (acc_t)g->scale, slope = (acc_t)g->slope;
    acc_t *restrict wv = (acc_t *)ws, *restrict zv = wv + HC;   /* an entry's weights and dz, by feature */
    for (int64_t q = j0 * HC; q < j1 * HC; q++) gxl[q] = 0;   /* sums start at zero */
    for (int64_t i = 0; i < n; i++) {
        int64_t start, end, prev = -1;
        if (!TSGU_FN(row_entries)(A, 0, i, &start, &end)) return TSGU_EPTR_ORDER;
        const real_t *restrict gi = G + i * HC, *restrict xri = XR + i * HC;
        for (int64_t e = start; e < end; e++) {
            int64_t j = Aj[e];
            if (j <= prev || j >= m) return tsgu_col_error(j, m);
            prev = j;
            int64_t jn = e + ahead < nnz ? Aj[e + ahead] : -1;    /* not yet checked: no arithmetic */
            if (jn >= j0 && jn < j1) {                            /* an own row, soon */
                TSGU_PREFETCH_ROW(gxl, jn, j1, HC, 0, HC);
                TSGU_PREFETCH_ROW(XL, jn, j1, HC, 0, HC);
            }
            if (j < j0 || j >= j1) continue;          /* another thread's column */
            const real_t *a = alpha + e * H, *gz = dz + e * H;
            const real_t *restrict xj = XL + j * HC, *restrict ete = ET ? ET + e * HC : NULL;
            real_t *restrict gxj = gxl + j * HC;
            for (int64_t h = 0; h < H; h++) {            /* each head's weight and dz over its C features */
                const acc_t w = g->drop > 0 && tsgu_gat_draw(g->seed, e * H + h) < g->drop ? 0 : a[h] * scale;
                for (int64_t c = 0; c < C; c++) wv[h * C + c] = w, zv[h * C + c] = gz[h];
            }
            /* one loop over the H*C features, without branches inside: it vectorises */
#define GATV2_SRC_LOOP(U)                                                \
            for (int64_t q = 0; q < HC; q++) {                           \
                acc_t u = (U), k = u > 0 ? (acc_t)1 : slope;             \
                gxj[q] += wv[q] * gi[q] + zv[q] * att[q] * k;            \
            }
            if (ete)
                GATV2_SRC_LOOP((acc_t)(xj[q] + xri[q]) + ete[q])
            else
                GATV2_SRC_LOOP((acc_t)(xj[q] + xri[q]))
#undef GATV2_SRC_LOOP
        }
    }
    return TSGU_OK;
}

TSGU_ISA_ATTR static int TSGU_FN(gatv2_grad_src_width)(const gatv2_grad_src_ctx *x, int64_t t, double *ws)
{
    TSGU_GAT_BY_WIDTH(x->g->feats, TSGU_FN(gatv2_grad_src_cols), x, t, ws)
}

TSGU_ISA_ATTR static int TSGU_FN(gatv2_grad_src_task)(void *vctx, int64_t t)
{
    const gatv2_grad_src_ctx *x = vctx;
    double *ws = malloc((size_t)(2 * x->g->heads * x->g->feats + 1) * sizeof *ws);
    if (!ws) return TSGU_ENOMEM;
    int status = TSGU_FN(gatv2_grad_src_width)(x, t, ws);
    free(ws);
    return status;
}

#endif
