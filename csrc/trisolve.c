#ifndef TSGU_IN_TEMPLATE
/* trisolve.c: sparse triangular solve by substitution, for each item k of a batch
 *     X[k] = A[k]^{-1} X[k]     (trans = 0)   or   X[k] = A[k]^{-T} X[k]   (trans = 1)
 * in place: X holds the right-hand side B on entry and the solution on return.
 * A is upper or lower triangular CSR with sorted rows; with unit set its
 * diagonal is implicit ones and must not be stored.
 *   A x = b:    row-oriented substitution, x[i] = (b[i] - sum_{j!=i} a_ij x[j]) / a_ii
 *   A^T x = b:  column-oriented substitution on the same rows, no A^T built:
 *               x[i] = b[i] / a_ii, then b[j] -= a_ij x[i] for the other j of row i,
 *               taking the rows in the order that makes row i final when reached.
 * Each row is checked (pointers, column range and order, side of the diagonal,
 * diagonal present and non-zero) as it is solved, before anything is read or
 * written through its indices, so a bad matrix is an error, never inf/nan or
 * an out-of-bounds access (X then holds a partial solution).  The error
 * reported is the first broken rule in row order over the whole batch (a
 * second O(nnz) pass, on the error path only), whatever row the solve met
 * first.  Items are independent and go to threads whole; the columns of X are
 * solved together (every row update is an axpy over p), and the p = 1 sum of
 * a row is split over four partial sums added in a fixed order, so
 * the result does not depend on the thread count. */
#include "tsgu.h"
#include "tsgu_parallel.h"

typedef struct {
    const tsgu_csr *A;
    tsgu_dense *X;
    int upper, unit, trans;
} trisolve_ctx;

/* prev < j < hi, the rule of every off-diagonal column j after prev in a row,
 * in one comparison (unsigned: any j, however wild, compares without overflow) */
static inline int tri_col_ok(int64_t j, int64_t prev, int64_t hi)
{
    return (uint64_t)j - (uint64_t)(prev + 1) < (uint64_t)(hi - prev - 1);
}

#define TSGU_TEMPLATE_FILE "trisolve.c"
#include "tsgu_template.h"

typedef struct {
    int (*solve)(const trisolve_ctx *, int64_t, int64_t);
    const trisolve_ctx *x;
    int64_t batch, T;
} tri_job;

static int tri_task(void *vjob, int64_t t)   /* whole items per thread */
{
    const tri_job *j = vjob;
    return j->solve(j->x, j->batch * t / j->T, j->batch * (t + 1) / j->T);
}

int tsgu_trisolve(const tsgu_csr *A, tsgu_dense *X, int upper, int unit, int trans, int nthreads)
{
    trisolve_ctx x = {A, X, upper, unit, trans};
    int (*solve)(const trisolve_ctx *, int64_t, int64_t) = TSGU_PICK(tri_solve, A->rtype, A->itype);
    int (*check)(const trisolve_ctx *, int64_t) = TSGU_PICK(tri_check, A->rtype, A->itype);
    int64_t b = A->batch, T = nthreads < 1 ? 1 : nthreads;
    if (T > b) T = b;
    if ((A->nnz + A->nrows) * (X->cols + 1) * 4 < (1 << 16) * T) T = 1; /* too small to split */
    tri_job job = {solve, &x, b, T};
    int status = b ? tsgu_parallel_tasks(T, tri_task, &job) : TSGU_OK;
    if (status == TSGU_OK) return TSGU_OK;
    int first = check(&x, b);                 /* the first error in row order */
    return first != TSGU_OK ? first : status;
}

#else /* template body: real_t, idx_t, TSGU_FN */

#include "tsgu_rows.h"

/* status of row i of item k: its pointers and columns valid, every entry on
 * the allowed side, and (unless unit) the diagonal stored and non-zero; the
 * first rule an entry breaks, in entry order, names the error.  Sorted columns
 * put the diagonal first in an upper row and last in a lower row. */
TSGU_ISA_ATTR static int TSGU_FN(tri_row_status)(const trisolve_ctx *x, int64_t k, int64_t i)
{
    const tsgu_csr *A = x->A;
    const idx_t *Aj = A->col;
    const real_t *Ax = A->val;
    int64_t m = A->ncols, prev = -1, start, end;
    int upper = x->upper, unit = x->unit;
    if (!TSGU_FN(row_entries)(A, k, i, &start, &end)) return TSGU_EPTR_ORDER;
    for (int64_t e = start; e < end; e++) {
        int64_t j = Aj[e];
        if (j <= prev || j >= m) return tsgu_col_error(j, m);
        prev = j;
        if (upper ? j < i : j > i) return TSGU_ETRI_SIDE;
        if (j == i && unit) return TSGU_EDIAG_UNIT;
    }
    if (unit) return TSGU_OK;
    int64_t e = upper ? start : end - 1;   /* where the diagonal must be */
    return start == end || Aj[e] != i || Ax[e] == 0 ? TSGU_EDIAG_ZERO : TSGU_OK;
}

/* status of items [0, b), rows in order: the first row's error, or TSGU_OK */
TSGU_ISA_ATTR static int TSGU_FN(tri_check)(const trisolve_ctx *x, int64_t b)
{
    int64_t n = x->A->nrows;
    for (int64_t r = 0; r < b * n; r++) {
        int status = TSGU_FN(tri_row_status)(x, r / n, r % n);
        if (status != TSGU_OK) return status;
    }
    return TSGU_OK;
}

/* Row i of item k, for the solve: [*start, *end) its entries without the
 * diagonal, *d the diagonal's value (1 when unit), after checking its pointers
 * and that the diagonal (unless unit) is where sorted columns put it and
 * non-zero.  The other columns are checked by the solve as it reads them,
 * with tri_col_ok; where a check fails, tri_row_status names the broken rule. */
TSGU_ISA_ATTR TSGU_ALWAYS_INLINE int TSGU_FN(tri_row)(const trisolve_ctx *x, int64_t k, int64_t i,
                                                      int64_t *start, int64_t *end, real_t *d)
{
    const idx_t *Aj = x->A->col;
    const real_t *Ax = x->A->val;
    if (!TSGU_FN(row_entries)(x->A, k, i, start, end)) return TSGU_EPTR_ORDER;
    *d = 1;
    if (!x->unit) {
        int64_t e = x->upper ? *start : *end - 1;
        if (*start == *end || Aj[e] != i || Ax[e] == 0) return TSGU_FN(tri_row_status)(x, k, i);
        *d = Ax[e];
        if (x->upper) ++*start;
        else --*end;
    }
    return TSGU_OK;
}

/* solve item k in place, p columns (inlined with p constant for p = 1).  The
 * off-diagonal columns of row i increase strictly inside (i, m) in an upper
 * row and (-1, i) in a lower one: prev starts at the low end, hi is the high. */
TSGU_ISA_ATTR TSGU_ALWAYS_INLINE int TSGU_FN(tri_item)(const trisolve_ctx *x, int64_t k, const int64_t p)
{
    const idx_t *Aj = x->A->col;
    const real_t *Ax = x->A->val;
    int64_t n = x->A->nrows, ld = x->X->rstride;
    real_t *Xk = (real_t *)x->X->data + k * x->X->bstride;
    int upper = x->upper, trans = x->trans;
    /* A x = b visits rows towards the diagonal's far end; A^T x = b the other way */
    int forward = trans ? upper : !upper;
#define TSGU_TRI_COL(j)                                                   \
    do {                                                                  \
        if (!tri_col_ok((j), prev, hi)) return TSGU_FN(tri_row_status)(x, k, i); \
        prev = (j);                                                       \
    } while (0)
    for (int64_t s = 0; s < n; s++) {
        int64_t i = forward ? s : n - 1 - s, start, end;
        real_t d;
        int status = TSGU_FN(tri_row)(x, k, i, &start, &end, &d);
        if (status != TSGU_OK) return status;
        int64_t prev = upper ? i : -1, hi = upper ? n : i, e = start;
        real_t *restrict xi = Xk + i * ld;
        if (!trans && p == 1) {             /* x[i] = (b[i] - sum a_ij x[j]) / a_ii */
            real_t s0 = xi[0], s1 = 0, s2 = 0, s3 = 0;  /* four sums: a quarter of the chain */
            for (; e + 3 < end; e += 4) {
                int64_t j0 = Aj[e], j1 = Aj[e + 1], j2 = Aj[e + 2], j3 = Aj[e + 3];
                TSGU_TRI_COL(j0);
                TSGU_TRI_COL(j1);
                TSGU_TRI_COL(j2);
                TSGU_TRI_COL(j3);
                s0 -= Ax[e] * Xk[j0 * ld];
                s1 -= Ax[e + 1] * Xk[j1 * ld];
                s2 -= Ax[e + 2] * Xk[j2 * ld];
                s3 -= Ax[e + 3] * Xk[j3 * ld];
            }
            for (; e < end; e++) {
                int64_t j = Aj[e];
                TSGU_TRI_COL(j);
                s0 -= Ax[e] * Xk[j * ld];
            }
            xi[0] = ((s0 + s2) + (s1 + s3)) / d;
        } else if (!trans) {
            for (; e < end; e++) {
                int64_t j = Aj[e];
                TSGU_TRI_COL(j);
                const real_t a = Ax[e];
                const real_t *restrict xj = Xk + j * ld;
                for (int64_t t = 0; t < p; t++) xi[t] -= a * xj[t];
            }
            if (d != 1)
                for (int64_t t = 0; t < p; t++) xi[t] /= d;
        } else {                               /* x[i] = b[i] / a_ii; b[j] -= a_ij x[i] */
            if (d != 1)
                for (int64_t t = 0; t < p; t++) xi[t] /= d;
            for (; e < end; e++) {
                int64_t j = Aj[e];
                TSGU_TRI_COL(j);
                const real_t a = Ax[e];
                real_t *restrict xj = Xk + j * ld;
                for (int64_t t = 0; t < p; t++) xj[t] -= a * xi[t];
            }
        }
    }
#undef TSGU_TRI_COL
    return TSGU_OK;
}

/* solve items [k0, k1) in place */
TSGU_ISA_ATTR static int TSGU_FN(tri_solve)(const trisolve_ctx *x, int64_t k0, int64_t k1)
{
    int64_t p = x->X->cols;
    for (int64_t k = k0; k < k1; k++) {
        int status = p == 1 ? TSGU_FN(tri_item)(x, k, 1) : TSGU_FN(tri_item)(x, k, p);
        if (status != TSGU_OK) return status;
    }
    return TSGU_OK;
}

#endif
