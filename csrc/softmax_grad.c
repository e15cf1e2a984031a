#ifndef TSGU_IN_TEMPLATE
/* softmax_grad.c: the gradient w.r.t. the values of softmax_rows.c, from its
 * output y and the output's gradient g, row by row
 *     softmax:      gv_e = y_e (g_e - sum_{f in row r} g_f y_f)
 *     log-softmax:  gv_e = g_e - exp(y_e) sum_{f in row r} g_f
 * for every entry e of global row r.  Only the row pointers are read (checked
 * as they are read); the row's sum runs in four fixed lanes, by one thread, so
 * the bits do not depend on the thread count.  16-bit arrays are computed in
 * float and rounded once. */
#include "tsgu.h"
#include "tsgu_parallel.h"
#include "tsgu_exp.h" /* last: its pragmas apply to the rest of the file */

typedef struct {
    const tsgu_csr *A;
    const void *y, *g; /* the output and its gradient, one per stored entry */
    int is_log;        /* 1: of log-softmax */
    void *out;         /* gv, one per stored entry */
} softmax_grad_ctx;

#define TSGU_HALF_TOO 1
#define TSGU_TEMPLATE_FILE "softmax_grad.c"
#include "tsgu_template.h"

int tsgu_softmax_grad(const tsgu_csr *A, const void *y, const void *g, int is_log, void *out, int nthreads)
{
    softmax_grad_ctx x = {A, y, g, is_log, out};
    return tsgu_parallel_rows(A, 4, nthreads, TSGU_PICK_HALF(softmax_grad_range, A->rtype, A->itype), &x);
}

#else /* template body: real_t, acc_t, idx_t, TSGU_LOAD, TSGU_STORE, TSGU_FN */

#include "tsgu_rows.h"

TSGU_ISA_ATTR static int TSGU_FN(softmax_grad_range)(void *vctx, int64_t r0, int64_t r1)
{
    const softmax_grad_ctx *x = vctx;
    const tsgu_csr *A = x->A;
    const real_t *y = x->y, *g = x->g;
    real_t *out = x->out;
    int64_t n = A->nrows;
    int is_log = x->is_log;
    for (int64_t r = r0; r < r1; r++) {
        int64_t k = r / n, i = r - k * n, start, end;
        if (!TSGU_FN(row_entries)(A, k, i, &start, &end)) return TSGU_EPTR_ORDER;
        double s[4] = {0, 0, 0, 0};
        if (is_log)
            for (int64_t e = start; e < end; e++) s[(e - start) & 3] += TSGU_LOAD(g[e]);
        else
            for (int64_t e = start; e < end; e++) s[(e - start) & 3] += TSGU_LOAD(g[e]) * TSGU_LOAD(y[e]);
        const acc_t sum = (acc_t)((s[0] + s[1]) + (s[2] + s[3]));
        if (is_log)
            for (int64_t e = start; e < end; e++)
                out[e] = TSGU_STORE(TSGU_LOAD(g[e]) - TSGU_EXP(TSGU_LOAD(y[e])) * sum);     /* vectorized */
        else
            for (int64_t e = start; e < end; e++)
                out[e] = TSGU_STORE(TSGU_LOAD(y[e]) * (TSGU_LOAD(g[e]) - sum));
    }
    return TSGU_OK;
}

#endif
