#ifndef TSGU_IN_TEMPLATE
/* softmax_cols_grad.c: the gradient w.r.t. the values of softmax_cols.c, from its
 * output y and the output's gradient g, column by column, for each of H heads
 *     softmax:      gv_eh = y_eh (g_eh - sum_{f in column c} g_fh y_fh)
 *     log-softmax:  gv_eh = g_eh - exp(y_eh) sum_{f in column c} g_fh
 * for every entry e of global column c = k*m + j and head h; y, g and gv are
 * (nnz, H), at e*H + h.  As softmax_cols.c, with no transpose: thread t owns a range
 * of the columns and walks the entries in entry order twice (tsgu_cols.h), the first
 * time checking the row pointers and columns and summing its columns' terms (in
 * double, in entry order, by one thread: the bits do not depend on the thread
 * count), the second writing their gradients (log: the exps of a block of entries
 * together, tsgu_exp.h).  16-bit arrays are computed in float and rounded once.
 * Workspace: the sum of every (column, head), a double, and a block of
 * TSGU_COLS_BLOCK * H floats per thread. */
#include <stdlib.h>
#include "tsgu.h"
#include "tsgu_advise.h"
#include "tsgu_parallel.h"
#include "tsgu_exp.h" /* last: its pragmas apply to the rest of the file */

typedef struct {
    const tsgu_csr *A;
    int64_t heads;     /* H */
    const void *y, *g; /* the output and its gradient, (nnz, H) */
    int is_log;        /* 1: of log-softmax */
    void *out;         /* gv, (nnz, H) */
    double *state;     /* column c: its sums, at c*H */
    double *block;     /* thread t's block: TSGU_COLS_BLOCK * H doubles at t times that */
    int64_t bounds[TSGU_MAX_THREADS + 1]; /* thread t owns the columns [bounds[t], bounds[t+1]) */
} softmax_cols_grad_ctx;

#define TSGU_HALF_TOO 1
#define TSGU_TEMPLATE_FILE "softmax_cols_grad.c"
#include "tsgu_template.h"

int tsgu_softmax_cols_grad(const tsgu_csr *A, int64_t heads, const void *y, const void *g, int is_log, void *out,
                           int nthreads)
{
    softmax_cols_grad_ctx x = {.A = A, .heads = heads, .y = y, .g = g, .is_log = is_log, .out = out};
    int64_t T = tsgu_split_cols(A, nthreads, x.bounds), C = A->batch * A->ncols, blocks = T * TSGU_COLS_BLOCK * heads;
    if (C > ((int64_t)(SIZE_MAX / sizeof(double)) - blocks) / heads) return TSGU_ENOMEM;
    x.state = malloc((size_t)(C * heads + blocks) * sizeof(double));
    if (!x.state) return TSGU_ENOMEM;
    tsgu_advise_output(x.state, C * heads * (int64_t)sizeof(double));  /* huge pages: read at random */
    x.block = x.state + C * heads;
    int status = tsgu_parallel_tasks(T, TSGU_PICK_HALF(softmax_cols_grad_task, A->rtype, A->itype), &x);
    free(x.state);
    return status;
}

#else /* template body: real_t, acc_t, idx_t, TSGU_LOAD, TSGU_STORE, TSGU_FN */

#include "tsgu_rows.h"
#include "tsgu_cols.h"
#include "tsgu_softmax_grad.h"

/* one thread's part: the context and its block */
typedef struct {
    const softmax_cols_grad_ctx *x;
    acc_t *d;
} TSGU_FN(softmax_cols_grad_job);

/* pass 1: the sums of g y (log: of g) over each (column, head), in entry order */
TSGU_ISA_ATTR static void TSGU_FN(softmax_cols_grad_sum)(void *vjob, const int64_t *es, const int64_t *cs,
                                                         int64_t w)
{
    const softmax_cols_grad_ctx *x = ((const TSGU_FN(softmax_cols_grad_job) *)vjob)->x;
    const real_t *y = x->y, *g = x->g;
    const int64_t H = x->heads;
    for (int64_t q = 0; q < w; q++) {
        double *s = x->state + cs[q] * H;
        const real_t *ye = y + es[q] * H, *ge = g + es[q] * H;
        if (x->is_log)   /* a constant in each loop */
            for (int64_t h = 0; h < H; h++) s[h] += TSGU_FN(softmax_grad_term)(TSGU_LOAD(ye[h]), TSGU_LOAD(ge[h]), 1);
        else
            for (int64_t h = 0; h < H; h++) s[h] += TSGU_FN(softmax_grad_term)(TSGU_LOAD(ye[h]), TSGU_LOAD(ge[h]), 0);
    }
}

/* pass 2: the gradients */
TSGU_ISA_ATTR static void TSGU_FN(softmax_cols_grad_out)(void *vjob, const int64_t *es, const int64_t *cs,
                                                         int64_t w)
{
    const TSGU_FN(softmax_cols_grad_job) *job = vjob;
    const softmax_cols_grad_ctx *x = job->x;
    const real_t *y = x->y, *g = x->g;
    real_t *out = x->out;
    const int64_t H = x->heads, L = TSGU_COLS_BLOCK * H;
    if (!x->is_log) {
        for (int64_t q = 0; q < w; q++) {
            const double *s = x->state + cs[q] * H;
            const int64_t at = es[q] * H;
            for (int64_t h = 0; h < H; h++)
                out[at + h] = TSGU_STORE(TSGU_FN(softmax_grad_of)(TSGU_LOAD(y[at + h]), 0, TSGU_LOAD(g[at + h]),
                                                                  (acc_t)s[h], 0));
        }
        return;
    }
    acc_t *restrict d = job->d;       /* exp(y) of the block, each through the same code wherever it sits */
    for (int64_t q = 0; q < w; q++)
        for (int64_t h = 0; h < H; h++) d[q * H + h] = TSGU_LOAD(y[es[q] * H + h]);
    for (int64_t q = w * H; q < L; q++) d[q] = 0;
    for (int64_t q = 0; q < L; q++) d[q] = TSGU_EXP(d[q]);   /* vectorized */
    for (int64_t q = 0; q < w; q++) {
        const double *s = x->state + cs[q] * H;
        const int64_t at = es[q] * H;
        for (int64_t h = 0; h < H; h++)
            out[at + h] = TSGU_STORE(TSGU_FN(softmax_grad_of)(0, d[q * H + h], TSGU_LOAD(g[at + h]), (acc_t)s[h], 1));
    }
}

/* thread t: its columns' sums, then their gradients */
TSGU_ISA_ATTR static int TSGU_FN(softmax_cols_grad_task)(void *vctx, int64_t t)
{
    const softmax_cols_grad_ctx *x = vctx;
    const int64_t H = x->heads, lo = x->bounds[t], hi = x->bounds[t + 1];
    TSGU_FN(softmax_cols_grad_job) job = {x, (acc_t *)(x->block + t * TSGU_COLS_BLOCK * H)};
    for (int64_t c = lo * H; c < hi * H; c++) x->state[c] = 0;
    int status = TSGU_FN(cols_walk)(x->A, lo, hi, 1, x->state, H * 8, NULL, 0, TSGU_FN(softmax_cols_grad_sum), &job);
    if (status != TSGU_OK) return status;
    for (int64_t c = lo * H; c < hi * H; c++) x->state[c] = (acc_t)x->state[c];  /* the sums as the rows' */
    TSGU_FN(cols_walk)(x->A, lo, hi, 0, x->state, H * 8, NULL, 0, TSGU_FN(softmax_cols_grad_out), &job);
    return TSGU_OK;
}

#endif
