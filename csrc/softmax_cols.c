#ifndef TSGU_IN_TEMPLATE
/* softmax_cols.c: softmax, or log-softmax, over the stored entries of every column
 * of a sparse matrix (each item of a batch), for each of H heads
 *     y_eh = exp(v_eh - M_ch) / S_ch        (log: y_eh = (v_eh - M_ch) - log S_ch)
 *     M_ch = max_{f in column c} v_fh,  S_ch = sum_{f in column c} exp(v_fh - M_ch)
 * for every entry e of global column c = k*m + j and head h; the values are (nnz, H),
 * v_eh at e*H + h.  No transpose, no atomics and no per-entry workspace: thread t owns
 * a range of the global columns (tsgu_split_cols: of about equal entries) and walks
 * the entries of the items it has columns in, in entry order, three times
 * (tsgu_cols.h), touching its own columns' entries alone: their max M, checking the
 * row pointers and columns as it reads them; the sum S of exp(v - M) (tsgu_exp.h's
 * vectorized exp, a block of entries at a time, each exp through the same code
 * wherever it sits); the results.  Each column's S is summed in double, in entry
 * order, by one thread, so the bits do not depend on the thread count.  The results
 * are tsgu_softmax.h's terms, as a row's: softmax exp(v - M) * (1/S), its exp taken
 * again in the third pass rather than kept; log-softmax (v - M) - log S.  As in
 * torch.softmax, a column holding +inf or only -inf is NaN throughout, a -inf beside
 * finite values gives 0 (log: -inf), a NaN makes its column NaN.  16-bit values are
 * computed in float and rounded once.  Workspace: S of every (column, head), a
 * double, and M and 1/S (or log S) in the values' type (float for 16-bit values), each
 * pass touching no more of them than it needs (they outgrow the caches first), and a
 * block of TSGU_COLS_BLOCK * H pairs of those per thread. */
#include <stdlib.h>
#include "tsgu.h"
#include "tsgu_advise.h"
#include "tsgu_parallel.h"
#include "tsgu_exp.h" /* last: its pragmas apply to the rest of the file */

typedef struct {
    const tsgu_csr *A;
    int64_t heads;  /* H: values and y are (nnz, H) */
    int is_log;     /* 1: log-softmax */
    void *out;      /* y, (nnz, H), in A's entry order */
    double *sum;    /* S of (column c, head h) at c*H + h, and as the values' acc_t (float or double): */
    void *shift;    /* M, */
    void *c;        /* 1/S (softmax) or log S (log-softmax), */
    void *block;    /* and thread t's block: 2 * TSGU_COLS_BLOCK * H at t times that */
    int64_t bounds[TSGU_MAX_THREADS + 1]; /* thread t owns the columns [bounds[t], bounds[t+1]) */
} softmax_cols_ctx;

#define TSGU_HALF_TOO 1
#define TSGU_TEMPLATE_FILE "softmax_cols.c"
#include "tsgu_template.h"

int tsgu_softmax_cols(const tsgu_csr *A, int64_t heads, int is_log, void *out, int nthreads)
{
    softmax_cols_ctx x = {.A = A, .heads = heads, .is_log = is_log, .out = out};
    int64_t T = tsgu_split_cols(A, nthreads, x.bounds), C = A->batch * A->ncols;
    int64_t as = A->rtype == TSGU_F64 ? sizeof(double) : sizeof(float), blocks = T * 2 * TSGU_COLS_BLOCK * heads;
    if (C > ((int64_t)(SIZE_MAX / sizeof(double)) - blocks) / 2 / heads) return TSGU_ENOMEM;
    int64_t bytes = C * heads * ((int64_t)sizeof(double) + 2 * as);    /* S, M and c */
    x.sum = malloc((size_t)(bytes + blocks * as));
    if (!x.sum) return TSGU_ENOMEM;
    tsgu_advise_output(x.sum, bytes);     /* huge pages: read at random, so few TLB misses */
    x.shift = x.sum + C * heads;
    x.c = (char *)x.shift + C * heads * as;
    x.block = (char *)x.c + C * heads * as;
    int status = tsgu_parallel_tasks(T, TSGU_PICK_HALF(softmax_cols_task, A->rtype, A->itype), &x);
    free(x.sum);
    return status;
}

#else /* template body: real_t, acc_t, idx_t, TSGU_LOAD, TSGU_STORE, TSGU_FN */

#include "tsgu_rows.h"
#include "tsgu_cols.h"
#ifndef TSGU_SOFTMAX_TERMS_ONLY
#define TSGU_SOFTMAX_TERMS_ONLY
#endif
#include "tsgu_softmax.h"

/* one thread's part: the context and its block (d: the terms, cc: their columns' c) */
typedef struct {
    const softmax_cols_ctx *x;
    acc_t *d, *cc;
} TSGU_FN(softmax_cols_job);

/* pass 1: M of each (column, head) of the block's entries (NaNs skipped here; they make S NaN) */
TSGU_ISA_ATTR static void TSGU_FN(softmax_cols_max)(void *vjob, const int64_t *es, const int64_t *cs, int64_t w)
{
    const softmax_cols_ctx *x = ((const TSGU_FN(softmax_cols_job) *)vjob)->x;
    const real_t *v = x->A->val;
    const int64_t H = x->heads;
    for (int64_t q = 0; q < w; q++) {
        acc_t *M = (acc_t *)x->shift + cs[q] * H;
        const real_t *ve = v + es[q] * H;
        for (int64_t h = 0; h < H; h++) {
            acc_t a = TSGU_LOAD(ve[h]);
            M[h] = a > M[h] ? a : M[h];
        }
    }
}

/* d[q*H + h] = v - M of the block's entries, the rest of the block 0; the width of the block */
TSGU_ISA_ATTR TSGU_ALWAYS_INLINE int64_t TSGU_FN(softmax_cols_shifted)(const softmax_cols_ctx *x, acc_t *d,
                                                                       const int64_t *es, const int64_t *cs,
                                                                       int64_t w)
{
    const real_t *v = x->A->val;
    const int64_t H = x->heads, L = TSGU_COLS_BLOCK * H;
    for (int64_t q = 0; q < w; q++) {
        const acc_t *M = (const acc_t *)x->shift + cs[q] * H;
        const real_t *ve = v + es[q] * H;
        for (int64_t h = 0; h < H; h++) d[q * H + h] = (acc_t)(TSGU_LOAD(ve[h]) - M[h]);
    }
    for (int64_t q = w * H; q < L; q++) d[q] = 0;
    return L;
}

/* pass 2: S += exp(v - M), in entry order */
TSGU_ISA_ATTR static void TSGU_FN(softmax_cols_sum)(void *vjob, const int64_t *es, const int64_t *cs, int64_t w)
{
    const TSGU_FN(softmax_cols_job) *job = vjob;
    const softmax_cols_ctx *x = job->x;
    const int64_t H = x->heads;
    acc_t *restrict d = job->d;
    int64_t L = TSGU_FN(softmax_cols_shifted)(x, d, es, cs, w);
    for (int64_t q = 0; q < L; q++) d[q] = TSGU_EXP(d[q]);   /* vectorized */
    for (int64_t q = 0; q < w; q++) {
        double *S = x->sum + cs[q] * H;
        for (int64_t h = 0; h < H; h++) S[h] += d[q * H + h];
    }
}

/* pass 3: the results, from v - M and c (1/S, or log S) */
TSGU_ISA_ATTR static void TSGU_FN(softmax_cols_out)(void *vjob, const int64_t *es, const int64_t *cs, int64_t w)
{
    const TSGU_FN(softmax_cols_job) *job = vjob;
    const softmax_cols_ctx *x = job->x;
    const int64_t H = x->heads;
    const int is_log = x->is_log, keep = !is_log && !TSGU_NARROW;
    acc_t *restrict d = job->d, *restrict cc = job->cc;
    real_t *y = x->out;
    int64_t L = TSGU_FN(softmax_cols_shifted)(x, d, es, cs, w);
    for (int64_t q = 0; q < w; q++) {
        const acc_t *c = (const acc_t *)x->c + cs[q] * H;
        for (int64_t h = 0; h < H; h++) cc[q * H + h] = c[h];
    }
    for (int64_t q = w * H; q < L; q++) cc[q] = 0;
    if (keep)
        for (int64_t q = 0; q < L; q++) d[q] = TSGU_FN(softmax_of)(TSGU_EXP(d[q]), 0, cc[q], 1, 0); /* vectorized */
    else
        for (int64_t q = 0; q < L; q++) d[q] = TSGU_FN(softmax_of)(d[q], 0, cc[q], 0, is_log);
    for (int64_t q = 0; q < w; q++)
        for (int64_t h = 0; h < H; h++) y[es[q] * H + h] = TSGU_STORE(d[q * H + h]);
}

/* thread t: its columns' M, S and c, then their results */
TSGU_ISA_ATTR static int TSGU_FN(softmax_cols_task)(void *vctx, int64_t t)
{
    const softmax_cols_ctx *x = vctx;
    const int64_t H = x->heads, lo = x->bounds[t], hi = x->bounds[t + 1], as = sizeof(acc_t);
    const int keep = !x->is_log && !TSGU_NARROW;
    acc_t *d = (acc_t *)x->block + t * 2 * TSGU_COLS_BLOCK * H, *M = x->shift, *c = x->c;
    TSGU_FN(softmax_cols_job) job = {x, d, d + TSGU_COLS_BLOCK * H};
    double *S = x->sum;
    for (int64_t q = lo * H; q < hi * H; q++) {
        M[q] = -INFINITY;
        S[q] = 0;
    }
    int status = TSGU_FN(cols_walk)(x->A, lo, hi, 1, M, H * as, NULL, 0, TSGU_FN(softmax_cols_max), &job);
    if (status != TSGU_OK) return status;
    TSGU_FN(cols_walk)(x->A, lo, hi, 0, M, H * as, S, H * 8, TSGU_FN(softmax_cols_sum), &job);
    for (int64_t q = lo * H; q < hi * H; q++) c[q] = TSGU_FN(softmax_c)(S[q], keep);
    TSGU_FN(cols_walk)(x->A, lo, hi, 0, M, H * as, c, H * as, TSGU_FN(softmax_cols_out), &job);
    return TSGU_OK;
}

#endif
