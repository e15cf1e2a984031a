#ifndef TSGU_IN_TEMPLATE
/* gat_grad_src.c: the gradients of gat_forward.c w.r.t. the source side, sums over
 * the entries of each column j of A (n x m):
 *     gx[j,h,:] = sum_{i: (i,j) stored} alpha_ijh * m_ijh * G[i,h,:]
 *     gs[j,h]   = sum_{i: (i,j) stored} dz_ijh            (dz from gat_grad_scores.c)
 * with no transpose built and no atomics (as spmm_t.c): thread t owns the columns
 * [m*t/T, m*(t+1)/T), walks all of A's entries in row order (checking them) and
 * adds only into its own rows of gx and gs.  Each is summed by one thread in
 * increasing i -- the order of the serial loop -- so the bits do not depend on the
 * thread count. */
#include "tsgu.h"
#include "tsgu_gat.h"
#include "tsgu_parallel.h"

typedef struct {
    const tsgu_csr *A;
    const tsgu_gat *g;
    const void *alpha, *G, *dz; /* (nnz, H), (n, H, F), (nnz, H) */
    void *gx, *gs;              /* (m, H, F), (m, H) */
    int64_t T;
} gat_grad_src_ctx;

#define TSGU_MIN_WORK (1 << 18) /* multiply-adds below which one thread does it all */

#define TSGU_TEMPLATE_FILE "gat_grad_src.c"
#include "tsgu_template.h"

int tsgu_gat_grad_src(const tsgu_csr *A, const tsgu_gat *g, const void *alpha, const void *G, const void *dz,
                      void *gx, void *gs, int nthreads)
{
    int64_t T = nthreads < 1 ? 1 : nthreads, work = A->nnz * g->heads * (g->feats + 1);
    if (T > TSGU_MAX_THREADS) T = TSGU_MAX_THREADS;
    if (T > work / TSGU_MIN_WORK) T = work / TSGU_MIN_WORK;
    if (T > A->ncols) T = A->ncols;
    if (T < 1) T = 1;
    gat_grad_src_ctx x = {A, g, alpha, G, dz, gx, gs, T};
    return tsgu_parallel_tasks(T, TSGU_PICK(gat_grad_src_task, A->rtype, A->itype), &x);
}

#else /* template body: real_t, acc_t, idx_t, TSGU_FN */

#include "tsgu_rows.h"

/* the columns of task t, F constant for the common widths */
TSGU_ISA_ATTR TSGU_ALWAYS_INLINE int TSGU_FN(gat_grad_src_cols)(const gat_grad_src_ctx *x, int64_t t,
                                                                const int64_t F)
{
    const tsgu_csr *A = x->A;
    const tsgu_gat *g = x->g;
    const idx_t *Aj = A->col;
    const real_t *alpha = x->alpha, *G = x->G, *dz = x->dz;
    real_t *gx = x->gx, *gs = x->gs;
    const int64_t H = g->heads, HF = H * F, n = A->nrows, m = A->ncols, nnz = A->nnz;
    const int64_t ahead = tsgu_prefetch_ahead(HF, sizeof(real_t));
    const int64_t j0 = m * t / x->T, j1 = m * (t + 1) / x->T;
    const acc_t scale = (acc_t)g->scale;
    for (int64_t q = j0 * HF; q < j1 * HF; q++) gx[q] = 0;   /* sums start at zero */
    for (int64_t q = j0 * H; q < j1 * H; q++) gs[q] = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t start, end, prev = -1;
        if (!TSGU_FN(row_entries)(A, 0, i, &start, &end)) return TSGU_EPTR_ORDER;
        const real_t *gi = G + i * HF;
        for (int64_t e = start; e < end; e++) {
            int64_t j = Aj[e];
            if (j <= prev || j >= m) return tsgu_col_error(j, m);
            prev = j;
            int64_t jn = e + ahead < nnz ? Aj[e + ahead] : -1;    /* not yet checked: no arithmetic */
            if (jn >= j0 && jn < j1) {                            /* an own row updated soon */
                TSGU_PREFETCH_ROW(gx, jn, j1, HF, 0, HF);
                TSGU_PREFETCH_ROW(gs, jn, j1, H, 0, H);
            }
            if (j < j0 || j >= j1) continue;          /* another thread's column */
            const real_t *a = alpha + e * H, *t_ = dz + e * H;
            real_t *gxj = gx + j * HF, *gsj = gs + j * H;
            for (int64_t h = 0; h < H; h++) {
                gsj[h] += t_[h];
                if (tsgu_gat_dropped(g, e * H + h)) continue;
                const acc_t w = a[h] * scale;
                const real_t *restrict gh = gi + h * F;
                real_t *restrict oh = gxj + h * F;
                for (int64_t f = 0; f < F; f++) oh[f] += w * gh[f];
            }
        }
    }
    return TSGU_OK;
}

TSGU_ISA_ATTR static int TSGU_FN(gat_grad_src_task)(void *vctx, int64_t t)
{
    const gat_grad_src_ctx *x = vctx;
    TSGU_GAT_BY_WIDTH(x->g->feats, TSGU_FN(gat_grad_src_cols), x, t)
}

#endif
