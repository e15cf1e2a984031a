#ifndef TSGU_IN_TEMPLATE
/* lse_cols.c: log-sum-exp of every column of a sparse matrix (each item of a batch)
 *     out[k*ld + j] = log( sum_{e in column j of item k} exp(v_e) + z_j )
 * with z_j = n - (entries of column j) absent entries counted as zeros, or
 * z_j = 0 (include_zeros false: an empty column gives -inf).  No transpose and
 * no atomics.
 *
 * The rows are cut into P chunks of about equal entries, P fixed by the matrix
 * alone (never by the thread count).  Each chunk keeps, for every column of the
 * items it covers, a running max mx, the sum s of exp(v - mx) (rescaled when the
 * max grows) and a count, updated in entry order: one 16-byte (float) or
 * 32-byte (double) state per column, one cache line per update.  The chunks'
 * states are then merged column by column in chunk order,
 *     mx = max_p mx_p,   s = sum_p s_p exp(mx_p - mx),
 * and finished as
 *     lse = M + log(s exp(mx - M) + z exp(-M)),   M = max(mx, 0 if z > 0).
 * So the bits depend on P, not on the thread count.  Threads take whole chunks;
 * with more threads than chunks, Q threads share a chunk, each reading all of
 * its entries and updating one range of its columns.
 * Workspace: one state per column per chunk (about P times the output's columns). */
#include <stdlib.h>
#include "tsgu.h"
#include "tsgu_exp.h"

#define TSGU_MIN_ENTRIES (1 << 16)  /* entries below which one thread does it all */
#define TSGU_CHUNKS 2               /* chunks of rows with their own states, when ... */
#define TSGU_CHUNK_ENTRIES 8        /* ... the matrix has this many entries per column */
#define TSGU_AHEAD 32               /* entries ahead whose column state is prefetched */

typedef struct {
    const tsgu_csr *A;
    int zeros;
    void *out;
    int64_t ld;
    int64_t P, Q, tasks, T;             /* chunks, threads per chunk, accumulating tasks, threads */
    int64_t rows[TSGU_MAX_THREADS + 1]; /* chunk p: global rows [rows[p], rows[p+1]) */
    int64_t base[TSGU_MAX_THREADS + 1]; /* chunk p: its states start at state index base[p] */
    void *state;
} lse_cols_ctx;

/* the column's lse from its running max and sum and its z zeros */
static double lse_col_finish(double mx, double s, int64_t z)
{
    if (mx == INFINITY) return INFINITY;               /* no inf - inf */
    double M = z > 0 && !(mx > 0) ? 0 : mx;
    if (M == -INFINITY) return -INFINITY;              /* no values (or all -inf) and no zeros */
    return M + log((M == mx ? s : s * exp(mx - M)) + (z > 0 ? (double)z * exp(-M) : 0));
}

/* the chunks: P of about equal entries, each's count of any column (a 32-bit
 * state field) below 2^32, as it is at most min(n, the chunk's rows); then the
 * states' start of each chunk: it covers the columns of items rows[p] / n to
 * (rows[p+1] - 1) / n.  Returns the total number of states, or -1 when more
 * than TSGU_MAX_THREADS chunks would be needed. */
static int64_t lse_cols_chunks(lse_cols_ctx *x)
{
    const tsgu_csr *A = x->A;
    int64_t n = A->nrows, m = A->ncols, R = A->batch * n;
    if (n <= (int64_t)UINT32_MAX) {
        x->P = tsgu_split_rows(A, 4, A->nnz / TSGU_CHUNK_ENTRIES >= m ? TSGU_CHUNKS : 1, x->rows);
    } else {                                           /* equal rows, at most 2^32 - 1 each */
        x->P = (R - 1) / (int64_t)UINT32_MAX + 1;
        if (x->P > TSGU_MAX_THREADS) return -1;
        for (int64_t p = 0; p <= x->P; p++) x->rows[p] = R / x->P * p + R % x->P * p / x->P;
    }
    int64_t total = 0;
    for (int64_t p = 0; p < x->P; p++) {
        x->base[p] = total;
        if (x->rows[p] < x->rows[p + 1]) total += ((x->rows[p + 1] - 1) / n - x->rows[p] / n + 1) * m;
    }
    x->base[x->P] = total;
    return total;
}

#define TSGU_TEMPLATE_FILE "lse_cols.c"
#include "tsgu_template.h"

int tsgu_lse_cols(const tsgu_csr *A, int include_zeros, void *out, int64_t ld, int nthreads)
{
    if (A->batch * A->ncols == 0) return TSGU_OK;
    return TSGU_PICK(lse_cols_run, A->rtype, A->itype)(A, include_zeros, out, ld, nthreads);
}

#else /* template body: real_t, idx_t, TSGU_FN */

#include "tsgu_rows.h"

/* the running state of one column in one chunk */
typedef struct {
    _Alignas(16) double s; /* sum of exp(v - mx) so far */
    real_t mx;             /* largest value so far (-inf: none yet) */
    uint32_t cnt;          /* entries so far */
} TSGU_FN(lse_col);

/* task t: for every (chunk p, column range q) pair u = p*Q + q with u = t mod
 * tasks, the states of the range, from the chunk's entries in order */
TSGU_ISA_ATTR static int TSGU_FN(lse_cols_task)(void *vctx, int64_t t)
{
    const lse_cols_ctx *x = vctx;
    const tsgu_csr *A = x->A;
    const idx_t *Aj = A->col;
    const real_t *Ax = A->val;
    int64_t n = A->nrows, m = A->ncols, nnz = A->nnz;
    for (int64_t u = t; u < x->P * x->Q; u += x->tasks) {
        int64_t p = u / x->Q, q = u % x->Q, r0 = x->rows[p], r1 = x->rows[p + 1];
        if (r0 == r1) continue;
        TSGU_FN(lse_col) *st = (TSGU_FN(lse_col) *)x->state + x->base[p];  /* column k*m + j at [(k - k0)*m + j] */
        int64_t k0 = r0 / n, span = x->base[p + 1] - x->base[p];
        int64_t lo = span * q / x->Q, hi = span * (q + 1) / x->Q;           /* this task's states */
        for (int64_t c = lo; c < hi; c++) st[c] = (TSGU_FN(lse_col)){0, -INFINITY, 0};
        for (int64_t r = r0; r < r1; r++) {
            int64_t k = r / n, i = r - k * n, start, end, prev = -1, row0 = (k - k0) * m;
            if (!TSGU_FN(row_entries)(A, k, i, &start, &end)) return TSGU_EPTR_ORDER;
            for (int64_t e = start; e < end; e++) {
                int64_t j = Aj[e], c = row0 + j;
                if (j <= prev || j >= m) return tsgu_col_error(j, m);
                prev = j;
                if (e + TSGU_AHEAD < nnz) {     /* a state updated soon: one of ours, or lo */
                    int64_t ca = row0 + Aj[e + TSGU_AHEAD];
                    TSGU_PREFETCH_W(st + ((uint64_t)(ca - lo) < (uint64_t)(hi - lo) ? ca : lo));
                }
                if ((uint64_t)(c - lo) >= (uint64_t)(hi - lo)) continue;  /* another task's column */
                TSGU_FN(lse_col) *s = st + c;
                const real_t v = Ax[e], mx = s->mx;
                s->cnt++;
                if (v > mx) {                                  /* a new max: rescale the sum */
                    s->s = s->s * TSGU_EXP((real_t)(mx - v)) + 1;
                    s->mx = v;
                } else if (mx > -INFINITY) {                   /* (-inf onto -inf adds nothing) */
                    s->s += TSGU_EXP((real_t)(v - mx));
                }
            }
        }
    }
    return TSGU_OK;
}

/* task t: the global columns [C*t/T, C*(t+1)/T), each merged over the chunks
 * that cover its item, in chunk order, and finished */
TSGU_ISA_ATTR static int TSGU_FN(lse_cols_merge)(void *vctx, int64_t t)
{
    const lse_cols_ctx *x = vctx;
    const TSGU_FN(lse_col) *state = x->state;
    real_t *out = x->out;
    int64_t n = x->A->nrows, m = x->A->ncols, C = x->A->batch * m;
    for (int64_t c = C * t / x->T; c < C * (t + 1) / x->T; c++) {
        int64_t k = c / m, j = c - k * m, cnt = 0;
        double mx = -INFINITY, s = 0;
        for (int64_t p = 0; p < x->P; p++) {
            int64_t r0 = x->rows[p], r1 = x->rows[p + 1];
            if (r0 == r1 || k < r0 / n || k > (r1 - 1) / n) continue;       /* not in this chunk */
            const TSGU_FN(lse_col) *st = state + x->base[p] + (k - r0 / n) * m + j;
            double smx = st->mx;
            cnt += st->cnt;
            if (smx > mx) {
                s = mx == -INFINITY ? st->s : s * tsgu_exp_f64(mx - smx) + st->s;
                mx = smx;
            } else if (smx > -INFINITY) {
                s += smx == mx ? st->s : st->s * tsgu_exp_f64(smx - mx);
            }
        }
        out[k * x->ld + j] = (real_t)lse_col_finish(mx, s, x->zeros ? n - cnt : 0);
    }
    return TSGU_OK;
}

TSGU_ISA_ATTR static int TSGU_FN(lse_cols_run)(const tsgu_csr *A, int include_zeros, void *out,
                                               int64_t ld, int nthreads)
{
    lse_cols_ctx x = {.A = A, .zeros = include_zeros, .out = out, .ld = ld};
    int64_t total = lse_cols_chunks(&x), T = nthreads < 1 ? 1 : nthreads;
    if (total < 0) return TSGU_ENOMEM;
    if (T > TSGU_MAX_THREADS) T = TSGU_MAX_THREADS;
    if (T > A->nnz / TSGU_MIN_ENTRIES) T = A->nnz / TSGU_MIN_ENTRIES;
    if (T < 1) T = 1;
    x.T = T;
    x.Q = T > x.P ? T / x.P : 1;
    x.tasks = T > x.P ? x.P * x.Q : T;
    size_t bytes = ((size_t)total * sizeof(TSGU_FN(lse_col)) + TSGU_LINE - 1) / TSGU_LINE * TSGU_LINE;
    x.state = aligned_alloc(TSGU_LINE, bytes ? bytes : TSGU_LINE);
    if (!x.state) return TSGU_ENOMEM;
    int status = tsgu_parallel_tasks(x.tasks, TSGU_FN(lse_cols_task), &x);
    if (status == TSGU_OK) status = tsgu_parallel_tasks(T, TSGU_FN(lse_cols_merge), &x);
    free(x.state);
    return status;
}

#endif
