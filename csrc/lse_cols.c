#ifndef TSGU_IN_TEMPLATE
/* lse_cols.c: log-sum-exp of every column of a sparse matrix (each item of a batch)
 *     out[k*ld + j] = log( sum_{e in column j of item k} exp(v_e) + z_j )
 * with z_j = n - (entries of column j) absent entries counted as zeros, or
 * z_j = 0 (include_zeros false: an empty column gives -inf).  No transpose and
 * no atomics: thread t owns the global columns c = k*m + j in [C*t/T,
 * C*(t+1)/T) (C = b*m), walks the rows of the items they belong to, and
 * updates only its own columns, each in entry order, so the bits do not depend
 * on the thread count.  (A row's columns increase, so the test "is this entry
 * mine" changes at most twice per row: a branch that predicts well.)
 * Two passes, as in lse_rows.c: the first takes each column's max and count,
 * and turns them into its shift (tsgu_lse_shift) and the zeros' part of the
 * sum, z exp(-shift); the second adds exp(v - shift) a block of entries at a
 * time, the exps vectorized (tsgu_exp.h); then lse = shift + log(sum).  One
 * exp per entry, no rescaling.
 * Workspace: one 16-byte state per column (max, then shift, and a double that
 * holds the count, then the sum), so that an update touches one cache line. */
#include <stdlib.h>
#include "tsgu.h"
#include "tsgu_exp.h"

typedef struct {
    const tsgu_csr *A;
    int zeros;
    void *out;
    int64_t ld, T;
    void *state; /* one per global column */
} lse_cols_ctx;

#define TSGU_MIN_ENTRIES (1 << 16) /* entries below which one thread does it all */
#define TSGU_AHEAD 32              /* entries ahead whose column state is prefetched */
#define TSGU_BLOCK 64              /* entries whose exps are computed together */

#define TSGU_TEMPLATE_FILE "lse_cols.c"
#include "tsgu_template.h"

int tsgu_lse_cols(const tsgu_csr *A, int include_zeros, void *out, int64_t ld, int nthreads)
{
    return TSGU_PICK(lse_cols_run, A->rtype, A->itype)(A, include_zeros, out, ld, nthreads);
}

#else /* template body: real_t, idx_t, TSGU_FN */

#include "tsgu_rows.h"

/* one column's state */
typedef struct {
    _Alignas(16) double s; /* pass 1: entries so far (exact below 2^53); pass 2: sum so far */
    real_t mx;             /* pass 1: largest value so far (-inf: none); pass 2: the shift */
} TSGU_FN(lse_col);

/* st[cs[q]].s += exp(d[q]) for q < w */
TSGU_ISA_ATTR TSGU_ALWAYS_INLINE void TSGU_FN(lse_cols_add)(TSGU_FN(lse_col) *st, const int64_t *cs,
                                                            real_t *d, int64_t w)
{
    for (int64_t q = 0; q < w; q++) d[q] = TSGU_EXP(d[q]);   /* vectorized */
    for (int64_t q = 0; q < w; q++) st[cs[q]].s += d[q];
}

/* the states [lo, hi) of item k's columns st[0..m): their entries in row order, each
 * checked; pass 1 takes max and count, pass 2 sums exp(v - shift) */
TSGU_ISA_ATTR TSGU_ALWAYS_INLINE int TSGU_FN(lse_cols_pass)(const tsgu_csr *A, int64_t k,
                                                            TSGU_FN(lse_col) *st, int64_t lo,
                                                            int64_t hi, int pass)
{
    const idx_t *Aj = A->col;
    const real_t *Ax = A->val;
    int64_t m = A->ncols, nnz = A->nnz, w = 0;
    real_t d[TSGU_BLOCK];
    int64_t cs[TSGU_BLOCK];
    for (int64_t i = 0; i < A->nrows; i++) {
        int64_t start, end, prev = -1;
        if (!TSGU_FN(row_entries)(A, k, i, &start, &end)) return TSGU_EPTR_ORDER;
        for (int64_t e = start; e < end; e++) {
            int64_t j = Aj[e];
            if (j <= prev || j >= m) return tsgu_col_error(j, m);
            prev = j;
            if (e + TSGU_AHEAD < nnz) {        /* a state updated soon: one of ours, or lo's */
                int64_t ja = Aj[e + TSGU_AHEAD];
                TSGU_PREFETCH_W(st + ((uint64_t)(ja - lo) < (uint64_t)(hi - lo) ? ja : lo));
            }
            if (j < lo || j >= hi) continue;   /* another thread's column */
            if (pass == 1) {
                st[j].s += 1;
                if (Ax[e] > st[j].mx) st[j].mx = Ax[e];
                continue;
            }
            d[w] = Ax[e] - st[j].mx;
            cs[w++] = j;
            if (w == TSGU_BLOCK) {
                TSGU_FN(lse_cols_add)(st, cs, d, w);
                w = 0;
            }
        }
    }
    TSGU_FN(lse_cols_add)(st, cs, d, w);
    return TSGU_OK;
}

/* thread t: its columns, item by item */
TSGU_ISA_ATTR static int TSGU_FN(lse_cols_task)(void *vctx, int64_t t)
{
    const lse_cols_ctx *x = vctx;
    const tsgu_csr *A = x->A;
    real_t *out = x->out;
    int64_t n = A->nrows, m = A->ncols, C = A->batch * m;
    int64_t c0 = C * t / x->T, c1 = C * (t + 1) / x->T;
    TSGU_FN(lse_col) *state = x->state;
    for (int64_t k = c0 / m; c0 < c1 && k <= (c1 - 1) / m; k++) {
        TSGU_FN(lse_col) *st = state + k * m;
        int64_t lo = k * m < c0 ? c0 - k * m : 0, hi = (k + 1) * m > c1 ? c1 - k * m : m;
        for (int64_t j = lo; j < hi; j++) st[j] = (TSGU_FN(lse_col)){0, -INFINITY};
        int status = TSGU_FN(lse_cols_pass)(A, k, st, lo, hi, 1);
        if (status != TSGU_OK) return status;
        for (int64_t j = lo; j < hi; j++) {                /* count -> zeros' part, max -> shift */
            int64_t z = x->zeros ? n - (int64_t)st[j].s : 0;
            double shift = tsgu_lse_shift(st[j].mx, z);
            st[j] = (TSGU_FN(lse_col)){z > 0 ? (double)z * exp(-shift) : 0, (real_t)shift};
        }
        status = TSGU_FN(lse_cols_pass)(A, k, st, lo, hi, 2);
        if (status != TSGU_OK) return status;
        for (int64_t j = lo; j < hi; j++) out[k * x->ld + j] = (real_t)(st[j].mx + log(st[j].s));
    }
    return TSGU_OK;
}

TSGU_ISA_ATTR static int TSGU_FN(lse_cols_run)(const tsgu_csr *A, int include_zeros, void *out,
                                               int64_t ld, int nthreads)
{
    int64_t C = A->batch * A->ncols, T = nthreads < 1 ? 1 : nthreads;
    if (T > TSGU_MAX_THREADS) T = TSGU_MAX_THREADS;
    if (T > A->nnz / TSGU_MIN_ENTRIES) T = A->nnz / TSGU_MIN_ENTRIES;
    if (T > C) T = C;
    if (T < 1) T = 1;
    if (C == 0) return TSGU_OK;
    lse_cols_ctx x = {A, include_zeros, out, ld, T, NULL};
    size_t bytes = ((size_t)C * sizeof(TSGU_FN(lse_col)) + TSGU_LINE - 1) / TSGU_LINE * TSGU_LINE;
    x.state = aligned_alloc(TSGU_LINE, bytes);
    int status = x.state ? tsgu_parallel_tasks(T, TSGU_FN(lse_cols_task), &x) : TSGU_ENOMEM;
    free(x.state);
    return status;
}

#endif
