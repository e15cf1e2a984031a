#ifndef TSGU_IN_TEMPLATE
/* spmm_arg.c: the extreme product over each row's entries, for each item k of a
 * batch (reduce="amax", or "amin" with is_min)
 *     C[k][i,t]   = max_e A.val[e] * B[k][A.col[e],t]     (e over the entries of row i; min for amin)
 *     arg[k][i,t] = e - start(i), the offset in row i of the entry that gives it
 * as PyTorch picks it: entries in row order, the first of a tie, and a NaN
 * product always taken (so the last NaN if there is one).  An empty row gives
 * 0 and arg -1; a row whose products never beat the start value (-inf for
 * amax, +inf for amin) keeps that value, with arg -1.  Each output row is
 * written by one thread, so the result does not depend on the thread count;
 * 16-bit values are multiplied and compared in float and rounded once. */
#include <math.h>
#include "tsgu.h"
#include "tsgu_advise.h"
#include "tsgu_parallel.h"
#include "tsgu_prefetch.h"

typedef struct {
    const tsgu_csr *A;
    const tsgu_dense *B;
    tsgu_dense *C;
    int32_t *arg; /* (batch*n, p), or NULL: not wanted */
    int is_min;
} spmm_arg_ctx;

#define TSGU_PBLOCK 64 /* columns of C reduced at once, in registers for constant widths */

#define TSGU_HALF_TOO 1
#define TSGU_TEMPLATE_FILE "spmm_arg.c"
#include "tsgu_template.h"

int tsgu_spmm_arg(const tsgu_csr *A, const tsgu_dense *B, tsgu_dense *C, int32_t *arg, int is_min,
                  int nthreads)
{
    spmm_arg_ctx x = {A, B, C, arg, is_min};
    tsgu_advise_output(C->data, tsgu_dense_span(C));
    tsgu_rows_fn fn = TSGU_PICK_HALF(spmm_arg_rows, A->rtype, A->itype);
    return tsgu_parallel_rows(A, C->cols, nthreads, fn, &x);
}

#else /* template body: real_t, acc_t, idx_t, TSGU_FN, ... (tsgu_template_types.h) */

#include "tsgu_rows.h"

/* C[i, t0:t0+w] and arg[i, t0:t0+w] over the entries [start, end) of one row
 * (c and g: row i of C and of arg); inlined with w and is_min constant, so the
 * running extremes live in registers */
TSGU_ISA_ATTR TSGU_ALWAYS_INLINE int TSGU_FN(spmm_arg_block)(const spmm_arg_ctx *x, int64_t start, int64_t end,
                                                             const real_t *Bk, real_t *restrict c,
                                                             int32_t *restrict g, int64_t t0, const int64_t w,
                                                             const int is_min)
{
    const idx_t *Aj = x->A->col;
    const real_t *Ax = x->A->val;
    int64_t m = x->A->ncols, nnz = x->A->nnz, ldb = x->B->rstride;
    const int64_t ahead = tsgu_prefetch_ahead(w, sizeof(real_t));
    acc_t best[TSGU_PBLOCK];
    int32_t at[TSGU_PBLOCK];
    for (int64_t t = 0; t < w; t++) {
        best[t] = is_min ? (acc_t)INFINITY : -(acc_t)INFINITY;
        at[t] = -1;
    }
    int64_t prev = -1;
    for (int64_t e = start; e < end; e++) {
        int64_t j = Aj[e];
        if (j <= prev || j >= m) return tsgu_col_error(j, m);
        prev = j;
        if (e + ahead < nnz) TSGU_PREFETCH_ROW(Bk, Aj[e + ahead], m, ldb, t0, w); /* B row soon */
        const acc_t a = TSGU_LOAD(Ax[e]);
        const int32_t off = (int32_t)(e - start);
        const real_t *restrict b = Bk + j * ldb + t0;
        /* kept a loop: unrolled whole at a constant width it would not be vectorized,
         * and the selects would become branches (40x slower at w = 16) */
#pragma GCC unroll 1
        for (int64_t t = 0; t < w; t++) {
            acc_t v = a * TSGU_LOAD(b[t]);
            int take = (is_min ? v < best[t] : v > best[t]) | (v != v);   /* better, or NaN */
            best[t] = take ? v : best[t];
            at[t] = take ? off : at[t];
        }
    }
    for (int64_t t = 0; t < w; t++) c[t0 + t] = TSGU_STORE(end > start ? best[t] : (acc_t)0);
    if (g)
        for (int64_t t = 0; t < w; t++) g[t0 + t] = at[t];
    return TSGU_OK;
}

/* rows [r0, r1) of C and arg, p columns, in blocks of TSGU_PBLOCK columns and a
 * last narrower one; inlined with p and is_min constant */
TSGU_ISA_ATTR TSGU_ALWAYS_INLINE int TSGU_FN(spmm_arg_range)(const spmm_arg_ctx *x, int64_t r0, int64_t r1,
                                                             const int is_min, const int64_t p)
{
    const tsgu_csr *A = x->A;
    const real_t *Bx = x->B->data;
    real_t *Cx = x->C->data;
    int32_t *arg = x->arg;
    int64_t n = A->nrows, bsb = x->B->bstride, bsc = x->C->bstride, ldc = x->C->rstride;
    for (int64_t r = r0; r < r1; r++) {
        int64_t k = tsgu_item_of(A, r), i = r - k * n, start, end, t0 = 0;
        if (!TSGU_FN(row_entries)(A, k, i, &start, &end)) return TSGU_EPTR_ORDER;
        if (end - start > INT32_MAX) return TSGU_EROW_LONG;
        const real_t *Bk = Bx + k * bsb;
        real_t *c = Cx + k * bsc + i * ldc;
        int32_t *g = arg ? arg + r * p : NULL;
        int status = TSGU_OK;
        for (; t0 + TSGU_PBLOCK <= p && status == TSGU_OK; t0 += TSGU_PBLOCK)
            status = TSGU_FN(spmm_arg_block)(x, start, end, Bk, c, g, t0, TSGU_PBLOCK, is_min);
        if (t0 < p && status == TSGU_OK)
            status = TSGU_FN(spmm_arg_block)(x, start, end, Bk, c, g, t0, p - t0, is_min);
        if (status != TSGU_OK) return status;
    }
    return TSGU_OK;
}

TSGU_ISA_ATTR static int TSGU_FN(spmm_arg_rows)(void *vctx, int64_t r0, int64_t r1)
{
    const spmm_arg_ctx *x = vctx;
    if (x->is_min) TSGU_BY_WIDTH(x->C->cols, TSGU_FN(spmm_arg_range), x, r0, r1, 1)
    TSGU_BY_WIDTH(x->C->cols, TSGU_FN(spmm_arg_range), x, r0, r1, 0)
}

#endif
