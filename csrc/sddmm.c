#ifndef TSGU_IN_TEMPLATE
/* sddmm.c: sampled dense-dense product, the gradient of C = A*B w.r.t. A's values
 *     out[e] = dot(G[k][i,:], B[k][j,:])   for every stored entry e = (k, i, j)
 * divided by the number of entries of row i for A.row_mean (reduce="mean").
 * Row by row, so G[k][i,:] stays in cache while the B rows are gathered; no
 * n x m and no nnz x p temporary (for 16-bit values, one float row: G[k][i,:]
 * widened; the dot is summed in float and rounded once).  The dot uses a fixed
 * order of partial sums, so the result does not depend on the thread count. */
#include <stdlib.h>
#include "tsgu.h"
#include "tsgu_advise.h"
#include "tsgu_parallel.h"
#include "tsgu_prefetch.h"

typedef struct {
    const tsgu_csr *A;
    const tsgu_dense *G, *B;
    void *out;
} sddmm_ctx;

#define TSGU_LANES 8 /* independent partial sums: lets the compiler vectorize the dot */

#define TSGU_HALF_TOO 1
#define TSGU_TEMPLATE_FILE "sddmm.c"
#include "tsgu_template.h"

int tsgu_sddmm(const tsgu_csr *A, const tsgu_dense *G, const tsgu_dense *B, void *out,
               int nthreads)
{
    sddmm_ctx x = {A, G, B, out};
    tsgu_advise_output(out, A->nnz * tsgu_real_size(A->rtype));
    tsgu_rows_fn fn = TSGU_PICK_HALF(sddmm_rows, A->rtype, A->itype);
    return tsgu_parallel_rows(A, G->cols, nthreads, fn, &x);
}

#else /* template body: real_t, acc_t, idx_t, TSGU_FN, ... (tsgu_template_types.h) */

#include "tsgu_rows.h"

TSGU_ISA_ATTR TSGU_ALWAYS_INLINE acc_t TSGU_FN(dot)(const acc_t *restrict x, const real_t *restrict y,
                                                     const int64_t p)
{
    acc_t acc[TSGU_LANES] = {0};
    int64_t t = 0;
    for (; t + TSGU_LANES <= p; t += TSGU_LANES)
        for (int u = 0; u < TSGU_LANES; u++) acc[u] += x[t + u] * TSGU_LOAD(y[t + u]);
    for (; t < p; t++) acc[t % TSGU_LANES] += x[t] * TSGU_LOAD(y[t]); /* the last < TSGU_LANES */
    for (int h = TSGU_LANES / 2; h > 0; h /= 2)             /* pairwise: log2(lanes) steps */
        for (int u = 0; u < h; u++) acc[u] += acc[u + h];
    return acc[0];
}

/* rows [r0, r1) (gw: p floats for a widened G row); inlined with p constant
 * for the common widths, so each dot is unrolled into vector registers */
TSGU_ISA_ATTR TSGU_ALWAYS_INLINE int TSGU_FN(sddmm_range)(const sddmm_ctx *x, int64_t r0, int64_t r1,
                                                          acc_t *gw, const int64_t p)
{
    const tsgu_csr *A = x->A;
    const idx_t *Aj = A->col;
    const real_t *Gx = x->G->data, *Bx = x->B->data;
    real_t *out = x->out;
    int64_t n = A->nrows, m = A->ncols, nnz = A->nnz;
    const int mean = A->row_mean;
    int64_t bsg = x->G->bstride, ldg = x->G->rstride, bsb = x->B->bstride, ldb = x->B->rstride;
    const int64_t ahead = tsgu_prefetch_ahead(p, sizeof(real_t));
    for (int64_t r = r0; r < r1; r++) {
        int64_t k = tsgu_item_of(A, r), i = r - k * n, start, end;
        if (!TSGU_FN(row_entries)(A, k, i, &start, &end)) return TSGU_EPTR_ORDER;
        const acc_t *g = TSGU_FN(widened)(Gx + k * bsg + i * ldg, gw, p);
        const real_t *Bk = Bx + k * bsb;
        const acc_t count = mean ? (acc_t)(end - start) : 1;
        int64_t prev = -1;
        for (int64_t e = start; e < end; e++) {
            int64_t j = Aj[e];
            if (j <= prev || j >= m) return tsgu_col_error(j, m);
            prev = j;
            if (e + ahead < nnz) TSGU_PREFETCH_ROW(Bk, Aj[e + ahead], m, ldb, 0, p); /* B row soon */
            acc_t d = TSGU_FN(dot)(g, Bk + j * ldb, p);
            out[e] = TSGU_STORE(mean ? d / count : d);
        }
    }
    return TSGU_OK;
}

TSGU_ISA_ATTR TSGU_ALWAYS_INLINE int TSGU_FN(sddmm_chunk)(const sddmm_ctx *x, int64_t r0, int64_t r1,
                                                          const int64_t p)
{
#if TSGU_NARROW
    acc_t *gw = p > 0 ? malloc((size_t)p * sizeof(acc_t)) : NULL;
    if (p > 0 && !gw) return TSGU_ENOMEM;
    int status = TSGU_FN(sddmm_range)(x, r0, r1, gw, p);
    free(gw);
    return status;
#else
    return TSGU_FN(sddmm_range)(x, r0, r1, NULL, p);
#endif
}

TSGU_ISA_ATTR static int TSGU_FN(sddmm_rows)(void *vctx, int64_t r0, int64_t r1)
{
    const sddmm_ctx *x = vctx;
    TSGU_BY_WIDTH(x->G->cols, TSGU_FN(sddmm_chunk), x, r0, r1)
}

#endif
