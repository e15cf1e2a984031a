#ifndef TSGU_IN_TEMPLATE
/* sddmm_arg.c: the gradient of C = A (max|min) B (spmm_arg.c) w.r.t. A's values,
 * each output element's gradient sent to its arg entry alone:
 *     out[e] = sum over t with arg[k][i,t] = e - start(i) of G[k][i,t] * B[k][A.col[e],t]
 * for every stored entry e of row i of item k (0 where no output element took e),
 * summed in increasing t, as PyTorch sums them.  Row by row: a row's entries are
 * written by the one thread that owns the row, so the result does not depend on
 * the thread count.  Every arg is checked to name an entry of its row, and every
 * column read through to lie in [0, m).  16-bit values: the sums of a row are
 * kept in float (a workspace of TSGU_SEG entries per thread, a long row taken in
 * segments of that many entries) and rounded once. */
#include <stdlib.h>
#include "tsgu.h"
#include "tsgu_advise.h"
#include "tsgu_parallel.h"
#include "tsgu_prefetch.h"

typedef struct {
    const tsgu_csr *A;
    const int32_t *arg;
    const tsgu_dense *G, *B;
    void *out;
} sddmm_arg_ctx;

#define TSGU_SEG 4096 /* entries of a row summed in one float workspace (16-bit values) */

#define TSGU_HALF_TOO 1
#define TSGU_TEMPLATE_FILE "sddmm_arg.c"
#include "tsgu_template.h"

int tsgu_sddmm_arg(const tsgu_csr *A, const int32_t *arg, const tsgu_dense *G, const tsgu_dense *B,
                   void *out, int nthreads)
{
    sddmm_arg_ctx x = {A, arg, G, B, out};
    tsgu_advise_output(out, A->nnz * tsgu_real_size(A->rtype));
    tsgu_rows_fn fn = TSGU_PICK_HALF(sddmm_arg_rows, A->rtype, A->itype);
    return tsgu_parallel_rows_weighted(A, 1, G->cols, nthreads, fn, &x);   /* a row costs p, an entry 1 */
}

#else /* template body: real_t, acc_t, idx_t, TSGU_FN, ... (tsgu_template_types.h) */

#include "tsgu_rows.h"

/* the sums S[e - s0] of the entries e in [s0, s1) of a row of entries [start, end)
 * (g: the row's arg, gi: its G row, Bk: the item's B), in increasing t; -1 when
 * an arg names no entry of the row, or a column is out of range */
TSGU_ISA_ATTR TSGU_ALWAYS_INLINE int TSGU_FN(sddmm_arg_seg)(const sddmm_arg_ctx *x, int64_t start, int64_t end,
                                                            int64_t s0, int64_t s1, const int32_t *g,
                                                            const real_t *gi, const real_t *Bk, acc_t *S,
                                                            const int64_t p)
{
    const idx_t *Aj = x->A->col;
    int64_t m = x->A->ncols, ldb = x->B->rstride;
    for (int64_t e = s0; e < s1; e++) S[e - s0] = 0;
    for (int64_t t = 0; t < p; t++) {
        int64_t o = g[t], e = start + o;
        if (o < -1 || e >= end) return TSGU_EARG;
        if (o < 0 || e < s0 || e >= s1) continue;
        int64_t j = Aj[e];
        if (j < 0 || j >= m) return TSGU_ECOL_RANGE;
        S[e - s0] += TSGU_LOAD(gi[t]) * TSGU_LOAD(Bk[j * ldb + t]);   /* G[i,t] * B[j,t] */
    }
    return TSGU_OK;
}

/* rows [r0, r1) (W: TSGU_SEG floats for 16-bit values); inlined with p constant */
TSGU_ISA_ATTR TSGU_ALWAYS_INLINE int TSGU_FN(sddmm_arg_range)(const sddmm_arg_ctx *x, int64_t r0, int64_t r1,
                                                              acc_t *W, const int64_t p)
{
    const tsgu_csr *A = x->A;
    const idx_t *Aj = A->col;
    const int32_t *arg = x->arg;
    const real_t *Gx = x->G->data, *Bx = x->B->data;
    real_t *out = x->out;
    int64_t n = A->nrows, m = A->ncols, nnz = A->nnz, ldb = x->B->rstride;
    int64_t bsg = x->G->bstride, ldg = x->G->rstride, bsb = x->B->bstride;
    const int64_t ahead = tsgu_prefetch_ahead(p, sizeof(real_t));
    for (int64_t r = r0; r < r1; r++) {
        int64_t k = tsgu_item_of(A, r), i = r - k * n, start, end;
        if (!TSGU_FN(row_entries)(A, k, i, &start, &end)) return TSGU_EPTR_ORDER;
        const int32_t *g = arg + r * p;
        const real_t *gi = Gx + k * bsg + i * ldg, *Bk = Bx + k * bsb;
        for (int64_t e = start + ahead; e < end + ahead && e < nnz; e++)
            TSGU_PREFETCH_ROW(Bk, Aj[e], m, ldb, 0, p);            /* the B rows of rows soon */
        int status;
#if TSGU_NARROW
        int64_t s0 = start;
        do {                                       /* at least once: the args are checked */
            int64_t s1 = end - s0 > TSGU_SEG ? s0 + TSGU_SEG : end;
            status = TSGU_FN(sddmm_arg_seg)(x, start, end, s0, s1, g, gi, Bk, W, p);
            for (int64_t e = s0; e < s1 && status == TSGU_OK; e++) out[e] = TSGU_STORE(W[e - s0]);
            s0 = s1;
        } while (s0 < end && status == TSGU_OK);
#else
        (void)W;
        status = TSGU_FN(sddmm_arg_seg)(x, start, end, start, end, g, gi, Bk, out + start, p);
#endif
        if (status != TSGU_OK) return status;
    }
    return TSGU_OK;
}

TSGU_ISA_ATTR TSGU_ALWAYS_INLINE int TSGU_FN(sddmm_arg_chunk)(const sddmm_arg_ctx *x, int64_t r0, int64_t r1,
                                                              const int64_t p)
{
#if TSGU_NARROW
    acc_t *W = malloc(TSGU_SEG * sizeof(acc_t));
    if (!W) return TSGU_ENOMEM;
    int status = TSGU_FN(sddmm_arg_range)(x, r0, r1, W, p);
    free(W);
    return status;
#else
    return TSGU_FN(sddmm_arg_range)(x, r0, r1, NULL, p);
#endif
}

TSGU_ISA_ATTR static int TSGU_FN(sddmm_arg_rows)(void *vctx, int64_t r0, int64_t r1)
{
    const sddmm_arg_ctx *x = vctx;
    TSGU_BY_WIDTH(x->G->cols, TSGU_FN(sddmm_arg_chunk), x, r0, r1)
}

#endif
