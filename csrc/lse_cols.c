#ifndef TSGU_IN_TEMPLATE
/* lse_cols.c: log-sum-exp of every column of a sparse matrix (each item of a batch)
 *     out[k*ld + j] = log( sum_{e in column j of item k} exp(v_e) + z_j )
 * with z_j = n - (entries of column j) absent entries counted as zeros, or
 * z_j = 0 (include_zeros false: an empty column gives -inf).  No transpose and
 * no atomics.
 *
 * Two passes, as in lse_rows.c: the first takes each column's max and count,
 * which give its shift (tsgu_lse_shift) and the zeros' part of its sum,
 * z exp(-shift); the second adds exp(v - shift), a block of entries at a time,
 * the exps vectorized (tsgu_exp.h); then lse = shift + log(sum).  One exp per
 * entry.
 *
 * Threads, with the same bits for any thread count: the rows are cut into P
 * chunks of about equal entries, P fixed by the matrix alone.  Each chunk keeps
 * one 16-byte state per column of the items it covers (max or shift, and a
 * double holding the count or the sum: an update touches one cache line) and
 * takes its entries in order.  Between the passes the chunks' maxima and
 * counts are combined per column (exactly: max and integer sums); at the end
 * their sums are added in chunk order.  Threads take whole chunks; with more
 * threads than chunks, Q threads share one, each reading all of its entries
 * and updating one range of its states (a row's columns increase, so "is this
 * entry mine" changes at most twice per row).
 * Workspace: the states, about P times the output. */
#include <math.h>
#include <stdlib.h>
#include "tsgu.h"
#include "tsgu_lse.h"
#include "tsgu_parallel.h"
#include "tsgu_prefetch.h"
#include "tsgu_exp.h" /* last: its pragmas apply to the rest of the file */

#define TSGU_MIN_ENTRIES (1 << 16) /* entries below which one thread does it all */
#define TSGU_CHUNKS 2              /* chunks of rows, when ... */
#define TSGU_CHUNK_ENTRIES 8       /* ... the matrix has this many entries per column */
#define TSGU_AHEAD 32              /* entries ahead whose column state is prefetched */
#define TSGU_BLOCK 64              /* entries whose exps are computed together */

typedef struct {
    const tsgu_csr *A;
    int zeros;
    void *out;
    int64_t ld;
    int64_t P, Q, tasks, T;             /* chunks, threads per chunk, chunk tasks, column tasks */
    int64_t rows[TSGU_MAX_THREADS + 1]; /* chunk p: global rows [rows[p], rows[p+1]), ... */
    int64_t k0[TSGU_MAX_THREADS];       /* ... of items [k0[p], k1[p]] (k1 < k0: none), ... */
    int64_t k1[TSGU_MAX_THREADS];
    int64_t base[TSGU_MAX_THREADS + 1]; /* ... column j of item k in state base[p] + (k - k0[p])*m + j */
    void *state;
} lse_cols_ctx;

/* x->P chunks of about equal entries, their items and their states' places;
 * the total count of states */
static int64_t lse_cols_chunks(lse_cols_ctx *x)
{
    const tsgu_csr *A = x->A;
    int64_t n = A->nrows, m = A->ncols, total = 0;
    x->P = tsgu_split_rows(A, 4, A->nnz / TSGU_CHUNK_ENTRIES >= m ? TSGU_CHUNKS : 1, x->rows);
    for (int64_t p = 0; p < x->P; p++) {
        int empty = x->rows[p] == x->rows[p + 1];            /* (n may be 0 only then) */
        x->k0[p] = empty ? 0 : x->rows[p] / n;
        x->k1[p] = empty ? -1 : (x->rows[p + 1] - 1) / n;
        x->base[p] = total;
        total += (x->k1[p] - x->k0[p] + 1) * m;
    }
    x->base[x->P] = total;
    return total;
}

#define TSGU_TEMPLATE_FILE "lse_cols.c"
#include "tsgu_template.h"

int tsgu_lse_cols(const tsgu_csr *A, int include_zeros, void *out, int64_t ld, int nthreads)
{
    return TSGU_PICK(lse_cols_run, A->rtype, A->itype)(A, include_zeros, out, ld, nthreads);
}

#else /* template body: real_t, idx_t, TSGU_FN */

#include "tsgu_rows.h"

/* one column's state in one chunk */
typedef struct {
    _Alignas(16) double s; /* pass 1: entries so far (exact below 2^53); pass 2: sum so far */
    real_t mx;             /* pass 1: largest value so far (-inf: none); pass 2: the shift */
} TSGU_FN(lse_col);

/* a prefetch of the state of entry e's column, if one of [lo, hi) (else of lo's) */
#define TSGU_PREFETCH_OWN(st, Aj, e, nnz, lo, hi)                                                \
    do {                                                                                         \
        if ((e) < (nnz)) {                                                                       \
            int64_t ja_ = (Aj)[e];                                                               \
            TSGU_PREFETCH_W((st) + ((uint64_t)(ja_ - (lo)) < (uint64_t)((hi) - (lo)) ? ja_ : (lo))); \
        }                                                                                        \
    } while (0)

/* pass 1 over rows [i0, i1) of item k, every column checked: the states [lo, hi)
 * of its columns st[0..m) take their columns' max and count */
TSGU_ISA_ATTR static int TSGU_FN(lse_cols_max)(const tsgu_csr *A, int64_t k, int64_t i0, int64_t i1,
                                               TSGU_FN(lse_col) *st, int64_t lo, int64_t hi)
{
    const idx_t *Aj = A->col;
    const real_t *Ax = A->val;
    int64_t m = A->ncols, nnz = A->nnz;
    for (int64_t i = i0; i < i1; i++) {
        int64_t start, end, prev = -1;
        if (!TSGU_FN(row_entries)(A, k, i, &start, &end)) return TSGU_EPTR_ORDER;
        for (int64_t e = start; e < end; e++) {
            int64_t j = Aj[e];
            if (j <= prev || j >= m) return tsgu_col_error(j, m);
            prev = j;
            TSGU_PREFETCH_OWN(st, Aj, e + TSGU_AHEAD, nnz, lo, hi);
            if (j < lo || j >= hi) continue;   /* another thread's column */
            const real_t v = Ax[e], mx = st[j].mx;
            st[j].mx = v > mx ? v : mx;
            st[j].s += 1;
        }
    }
    return TSGU_OK;
}

/* st[cs[q]].s += exp(d[q]) for q < w <= TSGU_BLOCK, the exps of a whole block
 * (padded) so that each goes through the same (vectorized) code wherever it sits */
TSGU_ISA_ATTR TSGU_ALWAYS_INLINE void TSGU_FN(lse_cols_add)(TSGU_FN(lse_col) *st, const int64_t *cs,
                                                            real_t *d, int64_t w)
{
    for (int64_t q = w; q < TSGU_BLOCK; q++) d[q] = 0;
    for (int64_t q = 0; q < TSGU_BLOCK; q++) d[q] = TSGU_EXP(d[q]);   /* vectorized */
    for (int64_t q = 0; q < w; q++) st[cs[q]].s += d[q];
}

/* pass 2 over the entries [e0, e1) (checked by pass 1) of item k: the states
 * [lo, hi) add exp(v - shift), a block at a time, gathered without branches (an
 * entry of another thread's column computes lo's and is dropped) */
TSGU_ISA_ATTR static void TSGU_FN(lse_cols_sum)(const tsgu_csr *A, int64_t e0, int64_t e1,
                                                TSGU_FN(lse_col) *st, int64_t lo, int64_t hi)
{
    const idx_t *Aj = A->col;
    const real_t *Ax = A->val;
    int64_t nnz = A->nnz, w = 0;
    real_t d[TSGU_BLOCK];
    int64_t cs[TSGU_BLOCK];
    for (int64_t e = e0; e < e1; e++) {
        int64_t j = Aj[e], own = (uint64_t)(j - lo) < (uint64_t)(hi - lo), c = own ? j : lo;
        TSGU_PREFETCH_OWN(st, Aj, e + TSGU_AHEAD, nnz, lo, hi);
        d[w] = Ax[e] - st[c].mx;
        cs[w] = c;
        w += own;
        if (w == TSGU_BLOCK) {
            TSGU_FN(lse_cols_add)(st, cs, d, w);
            w = 0;
        }
    }
    if (w) TSGU_FN(lse_cols_add)(st, cs, d, w);
}

/* task t: pass 1 (pass == 1, after setting the states) or 2 for every (chunk p,
 * state range q) pair u = p*Q + q with u = t mod tasks, item by item */
TSGU_ISA_ATTR static int TSGU_FN(lse_cols_pass)(const lse_cols_ctx *x, int64_t t, int pass)
{
    const tsgu_csr *A = x->A;
    const int64_t *rows = x->rows, *k0 = x->k0, *k1 = x->k1, *base = x->base;
    int64_t n = A->nrows, m = A->ncols, P = x->P, Q = x->Q, tasks = x->tasks;
    TSGU_FN(lse_col) *state = x->state;
    for (int64_t u = t; u < P * Q; u += tasks) {
        int64_t p = u / Q, q = u % Q, r0 = rows[p], r1 = rows[p + 1];
        int64_t span = base[p + 1] - base[p], lo = span * q / Q, hi = span * (q + 1) / Q;
        TSGU_FN(lse_col) *st = state + base[p];
        if (pass == 1)
            for (int64_t c = lo; c < hi; c++) st[c] = (TSGU_FN(lse_col)){0, -INFINITY};
        for (int64_t k = k0[p]; k <= k1[p]; k++) {     /* item k: states st[c0..c0+m) */
            int64_t c0 = (k - k0[p]) * m, jlo = lo - c0, jhi = hi - c0;
            int64_t i0 = k * n < r0 ? r0 - k * n : 0, i1 = (k + 1) * n > r1 ? r1 - k * n : n;
            if (jlo < 0) jlo = 0;
            if (jhi > m) jhi = m;
            if (jlo >= jhi) continue;
            if (pass == 1) {
                int status = TSGU_FN(lse_cols_max)(A, k, i0, i1, st + c0, jlo, jhi);
                if (status != TSGU_OK) return status;
            } else {                                    /* the rows' entries, checked in pass 1 */
                int64_t e0, e1, unused;
                TSGU_FN(row_entries)(A, k, i0, &e0, &unused);
                TSGU_FN(row_entries)(A, k, i1 - 1, &unused, &e1);
                TSGU_FN(lse_cols_sum)(A, e0, e1, st + c0, jlo, jhi);
            }
        }
    }
    return TSGU_OK;
}

TSGU_ISA_ATTR static int TSGU_FN(lse_cols_pass1)(void *vctx, int64_t t)
{
    return TSGU_FN(lse_cols_pass)(vctx, t, 1);
}

TSGU_ISA_ATTR static int TSGU_FN(lse_cols_pass2)(void *vctx, int64_t t)
{
    return TSGU_FN(lse_cols_pass)(vctx, t, 2);
}

/* task t, on the global columns [C*t/T, C*(t+1)/T), between the passes (finish
 * == 0): each column's max and count over the chunks that cover its item, then
 * in those chunks its shift, and its sum so far: z exp(-shift) in the first, 0
 * in the others; at the end (finish == 1): the sums added in chunk order, the lse */
TSGU_ISA_ATTR static int TSGU_FN(lse_cols_combine)(const lse_cols_ctx *x, int64_t t, int finish)
{
    TSGU_FN(lse_col) *state = x->state;
    real_t *out = x->out;
    const int64_t *k0 = x->k0, *k1 = x->k1, *base = x->base;
    int64_t n = x->A->nrows, m = x->A->ncols, C = x->A->batch * m, P = x->P, T = x->T, ld = x->ld;
    int64_t c0 = C * t / T, c1 = C * (t + 1) / T;
    int zeros = x->zeros;
    TSGU_FN(lse_col) *st[TSGU_MAX_THREADS];
    for (int64_t c = c0, k = c0 / m, j = c0 - k * m; c < c1; c++, j++) {
        if (j == m) {                                      /* the next item's first column */
            k++;
            j = 0;
        }
        int64_t covering = 0, first = 1;
        double mx = -INFINITY, s = 0;
        for (int64_t p = 0; p < P; p++)
            if (k0[p] <= k && k <= k1[p]) st[covering++] = state + base[p] + (k - k0[p]) * m + j;
        for (int64_t q = 0; q < covering; q++) {
            if (finish || st[q]->mx > mx) mx = st[q]->mx;   /* (the shift, the same in each) */
            s += st[q]->s;
        }
        if (finish) {
            out[k * ld + j] = (real_t)(covering ? mx + log(s) : -INFINITY);
            continue;
        }
        int64_t z = zeros ? n - (int64_t)s : 0;
        double shift = tsgu_lse_shift(mx, z);
        for (int64_t q = 0; q < covering; q++, first = 0)
            *st[q] = (TSGU_FN(lse_col)){first && z > 0 ? (double)z * exp(-shift) : 0, (real_t)shift};
    }
    return TSGU_OK;
}

TSGU_ISA_ATTR static int TSGU_FN(lse_cols_shift)(void *vctx, int64_t t)
{
    return TSGU_FN(lse_cols_combine)(vctx, t, 0);
}

TSGU_ISA_ATTR static int TSGU_FN(lse_cols_finish)(void *vctx, int64_t t)
{
    return TSGU_FN(lse_cols_combine)(vctx, t, 1);
}

TSGU_ISA_ATTR static int TSGU_FN(lse_cols_run)(const tsgu_csr *A, int include_zeros, void *out,
                                               int64_t ld, int nthreads)
{
    int64_t C = A->batch * A->ncols, T = nthreads < 1 ? 1 : nthreads;
    if (C == 0) return TSGU_OK;
    lse_cols_ctx x = {.A = A, .zeros = include_zeros, .out = out, .ld = ld};
    int64_t total = lse_cols_chunks(&x);
    if (T > TSGU_MAX_THREADS) T = TSGU_MAX_THREADS;
    if (T > A->nnz / TSGU_MIN_ENTRIES) T = A->nnz / TSGU_MIN_ENTRIES;
    if (T < 1) T = 1;
    x.T = T;
    x.Q = T > x.P ? T / x.P : 1;
    x.tasks = T > x.P ? x.P * x.Q : T;
    size_t bytes = ((size_t)total * sizeof(TSGU_FN(lse_col)) + TSGU_LINE - 1) / TSGU_LINE * TSGU_LINE;
    x.state = aligned_alloc(TSGU_LINE, bytes ? bytes : TSGU_LINE);
    if (!x.state) return TSGU_ENOMEM;
    int status = tsgu_parallel_tasks(x.tasks, TSGU_FN(lse_cols_pass1), &x);
    if (status == TSGU_OK) status = tsgu_parallel_tasks(T, TSGU_FN(lse_cols_shift), &x);
    if (status == TSGU_OK) status = tsgu_parallel_tasks(x.tasks, TSGU_FN(lse_cols_pass2), &x);
    if (status == TSGU_OK) status = tsgu_parallel_tasks(T, TSGU_FN(lse_cols_finish), &x);
    free(x.state);
    return status;
}

#endif
