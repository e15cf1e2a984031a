#ifndef TSGU_IN_TEMPLATE
/* softmax_rows.c: softmax, or log-softmax, over the stored entries of every row
 * of a sparse matrix (each item of a batch)
 *     y_e = exp(v_e - L_r)        (log: y_e = v_e - L_r)
 *     L_r = log sum_{f in row r} exp(v_f)
 * for every entry e of global row r = k*n + i; absent entries are left out (an
 * empty row has nothing to write).  Per row: one pass for the max (checking the
 * columns), one for the shifted sum of exps (tsgu_lse.h's shift and finish,
 * tsgu_exp.h's vectorized exp, four fixed lanes), one writing y (for softmax in
 * float or double: the exps, kept in y by the second pass, divided by their sum).  Each row is
 * done by one thread, so the bits do not depend on the thread count.  16-bit
 * values are computed in float and rounded once. */
#include "tsgu.h"
#include "tsgu_lse.h"
#include "tsgu_parallel.h"
#include "tsgu_exp.h" /* last: its pragmas apply to the rest of the file */

typedef struct {
    const tsgu_csr *A;
    int is_log; /* 1: log-softmax */
    void *out; /* y, one per stored entry, in A's entry order */
} softmax_rows_ctx;

#define TSGU_BLOCK 64 /* entries of a row whose exps are computed together */

#define TSGU_HALF_TOO 1
#define TSGU_TEMPLATE_FILE "softmax_rows.c"
#include "tsgu_template.h"

int tsgu_softmax_rows(const tsgu_csr *A, int is_log, void *out, int nthreads)
{
    softmax_rows_ctx x = {A, is_log, out};
    return tsgu_parallel_rows(A, 8, nthreads, TSGU_PICK_HALF(softmax_rows_range, A->rtype, A->itype), &x);
}

#else /* template body: real_t, acc_t, idx_t, TSGU_LOAD, TSGU_STORE, TSGU_FN */

#include "tsgu_rows.h"

TSGU_ISA_ATTR static int TSGU_FN(softmax_rows_range)(void *vctx, int64_t r0, int64_t r1)
{
    const softmax_rows_ctx *x = vctx;
    const tsgu_csr *A = x->A;
    const idx_t *Aj = A->col;
    const real_t *Ax = A->val;
    real_t *out = x->out;
    int64_t n = A->nrows, m = A->ncols;
    acc_t buf[TSGU_BLOCK];
    for (int64_t r = r0; r < r1; r++) {
        int64_t k = r / n, i = r - k * n, start, end, prev = -1;
        if (!TSGU_FN(row_entries)(A, k, i, &start, &end)) return TSGU_EPTR_ORDER;
        acc_t vmax = -INFINITY;
        for (int64_t e = start; e < end; e++) {
            int64_t j = Aj[e];
            if (j <= prev || j >= m) return tsgu_col_error(j, m);
            prev = j;
            acc_t v = TSGU_LOAD(Ax[e]);
            vmax = v > vmax ? v : vmax;
        }
        if (start == end) continue;
        const acc_t shift = (acc_t)tsgu_lse_shift(vmax, 0);
        /* softmax of a full-width type: the exps go straight into y, divided by the sum after */
        const int keep = !x->is_log && !TSGU_NARROW;
        double s[4] = {0, 0, 0, 0};
        for (int64_t e0 = start; e0 < end; e0 += TSGU_BLOCK) {
            int64_t w = end - e0 < TSGU_BLOCK ? end - e0 : TSGU_BLOCK;
            acc_t *d = keep ? (acc_t *)(out + e0) : buf;  /* (keep: real_t is acc_t) */
            for (int64_t q = 0; q < w; q++) d[q] = TSGU_EXP((acc_t)(TSGU_LOAD(Ax[e0 + q]) - shift)); /* vectorized */
            for (int64_t q = 0; q < w; q++) s[q & 3] += d[q];
        }
        const double sum = (s[0] + s[1]) + (s[2] + s[3]);
        const acc_t L = (acc_t)tsgu_lse_finish(shift, sum, 0), ssum = (acc_t)sum;
        if (keep)
            for (int64_t e = start; e < end; e++) out[e] = TSGU_STORE(TSGU_LOAD(out[e]) / ssum);
        else if (x->is_log)
            for (int64_t e = start; e < end; e++) out[e] = TSGU_STORE((acc_t)(TSGU_LOAD(Ax[e]) - L));
        else
            for (int64_t e = start; e < end; e++) out[e] = TSGU_STORE(TSGU_EXP((acc_t)(TSGU_LOAD(Ax[e]) - L)));
    }
    return TSGU_OK;
}

#endif
