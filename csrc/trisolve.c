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
 * A first O(nnz) pass checks the whole structure (pointers, column range and
 * order, side of the diagonal, diagonal present and non-zero) before any
 * solving, so a bad matrix is an error, never inf/nan or an out-of-bounds read.
 * Items are independent and go to threads whole; the columns of X are solved
 * together (every row update is an axpy over p), so the result does not
 * depend on the thread count. */
#include "tsgu.h"

typedef struct {
    const tsgu_csr *A;
    tsgu_dense *X;
    int upper, unit, trans;
} trisolve_ctx;

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
    int (*check)(const trisolve_ctx *, int64_t, int64_t) = TSGU_PICK(tri_check, A->rtype, A->itype);
    int (*solve)(const trisolve_ctx *, int64_t, int64_t) = TSGU_PICK(tri_solve, A->rtype, A->itype);
    int64_t b = A->batch, T = nthreads < 1 ? 1 : nthreads;
    int status = check(&x, 0, b);              /* whole structure first, O(nnz) */
    if (status != TSGU_OK) return status;
    if (T > b) T = b;
    if ((A->nnz + A->nrows) * (X->cols + 1) * 4 < (1 << 16) * T) T = 1; /* too small to split */
    tri_job job = {solve, &x, b, T};
    return b ? tsgu_parallel_tasks(T, tri_task, &job) : TSGU_OK;
}

#else /* template body: real_t, idx_t, TSGU_FN */

#include "tsgu_rows.h"

/* items [k0, k1): every row's pointers and columns valid, every entry on the
 * allowed side, and (unless unit) the diagonal stored and non-zero.  Sorted
 * columns put the diagonal first in an upper row and last in a lower row. */
static int TSGU_FN(tri_check)(const trisolve_ctx *x, int64_t k0, int64_t k1)
{
    const tsgu_csr *A = x->A;
    const idx_t *Aj = A->col;
    const real_t *Ax = A->val;
    int64_t n = A->nrows, m = A->ncols;
    for (int64_t k = k0; k < k1; k++) {
        for (int64_t i = 0; i < n; i++) {
            int64_t start, end;
            if (!TSGU_FN(row_entries)(A, k, i, &start, &end)) return TSGU_EPTR_ORDER;
            int64_t prev = -1;
            for (int64_t e = start; e < end; e++) {
                int64_t j = Aj[e];
                if (j <= prev || j >= m) return tsgu_col_error(j, m);
                prev = j;
                if (x->upper ? j < i : j > i) return TSGU_ETRI_SIDE;
                if (j == i && x->unit) return TSGU_EDIAG_UNIT;
            }
            if (!x->unit) {
                int64_t d = x->upper ? start : end - 1; /* where the diagonal must be */
                if (start == end || Aj[d] != i || Ax[d] == 0) return TSGU_EDIAG_ZERO;
            }
        }
    }
    return TSGU_OK;
}

/* solve items [k0, k1) in place; the structure has been checked */
static int TSGU_FN(tri_solve)(const trisolve_ctx *x, int64_t k0, int64_t k1)
{
    const tsgu_csr *A = x->A;
    const idx_t *Aj = A->col;
    const real_t *Ax = A->val;
    int64_t n = A->nrows, p = x->X->cols, ld = x->X->rstride;
    /* A x = b visits rows towards the diagonal's far end; A^T x = b the other way */
    int forward = x->trans ? x->upper : !x->upper;
    for (int64_t k = k0; k < k1; k++) {
        real_t *Xk = (real_t *)x->X->data + k * x->X->bstride;
        for (int64_t s = 0; s < n; s++) {
            int64_t i = forward ? s : n - 1 - s, start, end;
            TSGU_FN(row_entries)(A, k, i, &start, &end);  /* validated by tri_check */
            real_t d = 1;
            if (!x->unit) {                    /* diagonal: first (upper) or last (lower) */
                if (x->upper) d = Ax[start++];
                else d = Ax[--end];
            }
            real_t *restrict xi = Xk + i * ld;
            if (!x->trans) {                   /* x[i] = (b[i] - sum a_ij x[j]) / a_ii */
                for (int64_t e = start; e < end; e++) {
                    const real_t a = Ax[e];
                    const real_t *restrict xj = Xk + (int64_t)Aj[e] * ld;
                    for (int64_t t = 0; t < p; t++) xi[t] -= a * xj[t];
                }
                if (d != 1)
                    for (int64_t t = 0; t < p; t++) xi[t] /= d;
            } else {                           /* x[i] = b[i] / a_ii; b[j] -= a_ij x[i] */
                if (d != 1)
                    for (int64_t t = 0; t < p; t++) xi[t] /= d;
                for (int64_t e = start; e < end; e++) {
                    const real_t a = Ax[e];
                    real_t *restrict xj = Xk + (int64_t)Aj[e] * ld;
                    for (int64_t t = 0; t < p; t++) xj[t] -= a * xi[t];
                }
            }
        }
    }
    return TSGU_OK;
}

#endif
