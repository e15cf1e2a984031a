#ifndef TSGU_IN_TEMPLATE
/* lse_rows.c: log-sum-exp of every row of a sparse matrix (each item of a batch)
 *     out[k*ld + i] = log( sum_{e in row i of item k} exp(v_e) + z_i )
 * with z_i = m - (entries of row i) absent entries counted as zeros, or z_i = 0
 * (include_zeros false: an empty row gives -inf); and, when item_out is given,
 * of every whole item
 *     item_out[k] = log sum_i exp(out[k*ld + i]).
 * One pass for the row's max (checking its columns), one for the shifted sum
 * (tsgu_lse.h) with a vectorized exp (tsgu_exp.h) summed
 * in four fixed lanes; each row is summed by one thread and each item folded
 * in row order, so the bits do not depend on the thread count. */
#include "tsgu.h"
#include "tsgu_lse.h"
#include "tsgu_parallel.h"
#include "tsgu_exp.h" /* last: its pragmas apply to the rest of the file */

typedef struct {
    const tsgu_csr *A;
    int zeros;
    void *out;
    int64_t ld;
} lse_rows_ctx;

#define TSGU_TEMPLATE_FILE "lse_rows.c"
#include "tsgu_template.h"

int tsgu_lse_rows(const tsgu_csr *A, int include_zeros, void *out, int64_t ld, void *item_out,
                  int nthreads)
{
    lse_rows_ctx x = {A, include_zeros, out, ld};
    int status = tsgu_parallel_rows(A, 4, nthreads, TSGU_PICK(lse_rows_range, A->rtype, A->itype), &x);
    if (status == TSGU_OK && item_out) TSGU_PICK(lse_items, A->rtype, A->itype)(&x, item_out);
    return status;
}

#else /* template body: real_t, idx_t, TSGU_FN */

#include "tsgu_rows.h"

/* sum_j exp(v[j] - shift) over n values, in lanes j % 4 added in a fixed order */
TSGU_ISA_ATTR TSGU_ALWAYS_INLINE double TSGU_FN(sum_exp)(const real_t *v, int64_t n, real_t shift)
{
    double s[4] = {0, 0, 0, 0};
    real_t buf[64];
    for (int64_t j0 = 0; j0 < n; j0 += 64) {
        int64_t w = n - j0 < 64 ? n - j0 : 64;
        for (int64_t j = 0; j < w; j++) buf[j] = TSGU_EXP((real_t)(v[j0 + j] - shift));  /* vectorized */
        for (int64_t j = 0; j < w; j++) s[j & 3] += buf[j];
    }
    return (s[0] + s[1]) + (s[2] + s[3]);
}

TSGU_ISA_ATTR static int TSGU_FN(lse_rows_range)(void *vctx, int64_t r0, int64_t r1)
{
    const lse_rows_ctx *x = vctx;
    const tsgu_csr *A = x->A;
    const idx_t *Aj = A->col;
    const real_t *Ax = A->val;
    real_t *out = x->out;
    int64_t n = A->nrows, m = A->ncols, ld = x->ld;
    int zeros = x->zeros;
    for (int64_t r = r0; r < r1; r++) {
        int64_t k = tsgu_item_of(A, r), i = r - k * n, start, end, prev = -1;
        if (!TSGU_FN(row_entries)(A, k, i, &start, &end)) return TSGU_EPTR_ORDER;
        real_t vmax = -INFINITY;
        for (int64_t e = start; e < end; e++) {
            int64_t j = Aj[e];
            if (j <= prev || j >= m) return tsgu_col_error(j, m);
            prev = j;
            if (Ax[e] > vmax) vmax = Ax[e];
        }
        int64_t nz = zeros ? m - (end - start) : 0;
        double shift = tsgu_lse_shift(vmax, nz);
        double s = TSGU_FN(sum_exp)(Ax + start, end - start, (real_t)shift);
        out[k * ld + i] = (real_t)tsgu_lse_finish(shift, s, nz);
    }
    return TSGU_OK;
}

/* item_out[k] = log sum_i exp(out[k*ld + i]), in row order */
TSGU_ISA_ATTR static void TSGU_FN(lse_items)(const lse_rows_ctx *x, void *vitem_out)
{
    const real_t *out = x->out;
    real_t *item_out = vitem_out;
    int64_t b = x->A->batch, n = x->A->nrows, ld = x->ld;
    for (int64_t k = 0; k < b; k++) {
        const real_t *o = out + k * ld;
        real_t vmax = -INFINITY;
        for (int64_t i = 0; i < n; i++)
            if (o[i] > vmax) vmax = o[i];
        double shift = tsgu_lse_shift(vmax, 0);
        item_out[k] = (real_t)tsgu_lse_finish(shift, TSGU_FN(sum_exp)(o, n, (real_t)shift), 0);
    }
}

#endif
