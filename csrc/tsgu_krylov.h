/* tsgu_krylov.h: the block pieces shared by the Krylov solvers (cg.c, minres.c), a
 * template fragment (no include guard) included once per variant with real_t and
 * TSGU_FN defined.  A block is n x k, contiguous and row-major: column c of row i
 * at [i*k + c].  Column sums run over the rows in order, in double.  The solvers
 * inline these with k constant for k = 1 (TSGU_BY_COLS). */

/* out[c] = sum_i x[i,c] * y[i,c] */
TSGU_ISA_ATTR TSGU_ALWAYS_INLINE void TSGU_FN(col_dot)(const real_t *x, const real_t *y, int64_t n, int64_t k,
                                                       double *out)
{
    for (int64_t c = 0; c < k; c++) out[c] = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t c = 0; c < k; c++) out[c] += (double)x[i * k + c] * y[i * k + c];
}

#ifndef TSGU_KRYLOV_ONCE /* the parts that are the same in every variant */
#define TSGU_KRYLOV_ONCE
#include <math.h>
#include "tsgu_parallel.h"
/* return fn(args..., k) with k a compile-time constant when it is 1 */
#define TSGU_BY_COLS(k, fn, ...) return (k) == 1 ? fn(__VA_ARGS__, 1) : fn(__VA_ARGS__, k)
#define TSGU_KRYLOV_PER_THREAD (1 << 20)
typedef struct {
    const tsgu_csr *A;
    const void *x;
    void *y;
} tsgu_matvec_ctx;
#endif

/* rows [r0, r1) of y = A x for one column, on a structure already checked:
 * four partial sums per row, added in a fixed order */
TSGU_ISA_ATTR static int TSGU_FN(matvec_rows)(void *vctx, int64_t r0, int64_t r1)
{
    const tsgu_matvec_ctx *c = vctx;
    const idx_t *Ap = c->A->ptr, *Aj = c->A->col;
    const real_t *Ax = c->A->val, *x = c->x;
    real_t *y = c->y;
    for (int64_t i = r0; i < r1; i++) {
        real_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        int64_t e = Ap[i], end = Ap[i + 1];
        for (; e + 3 < end; e += 4) {
            s0 += Ax[e] * x[Aj[e]];
            s1 += Ax[e + 1] * x[Aj[e + 1]];
            s2 += Ax[e + 2] * x[Aj[e + 2]];
            s3 += Ax[e + 3] * x[Aj[e + 3]];
        }
        for (; e < end; e++) s0 += Ax[e] * x[Aj[e]];
        y[i] = (s0 + s2) + (s1 + s3);
    }
    return TSGU_OK;
}

/* y = A x, x and y n x k, for A checked by tsgu_csr_compact.  Threads start anew
 * for every product of the loop, so they are used only from TSGU_KRYLOV_PER_THREAD
 * entries each (at n = 4000, 637k entries, a CG solve took 5.5 ms on one thread
 * and 13.6 ms on two; at 2.1M entries 200 ms and 133 ms). */
static int TSGU_FN(matvec)(const tsgu_csr *A, const real_t *x, real_t *y, int64_t k, int nthreads)
{
    int64_t most = A->nnz * k / TSGU_KRYLOV_PER_THREAD;
    if (nthreads > most) nthreads = most > 1 ? (int)most : 1;
    if (k == 1) {
        tsgu_matvec_ctx c = {A, x, y};
        return tsgu_parallel_rows(A, 1, nthreads, TSGU_FN(matvec_rows), &c);
    }
    int64_t n = A->nrows;
    const tsgu_dense X = {(void *)x, 1, n, k, 0, k, A->rtype};
    tsgu_dense Y = {y, 1, n, k, 0, k, A->rtype};
    return tsgu_spmm(A, &X, &Y, nthreads);
}

/* true_rel[c] = ||B[:,c] - Y[:,c]|| / bnorm[c] for Y = M X (overwritten with B - Y) */
TSGU_ISA_ATTR TSGU_ALWAYS_INLINE void TSGU_FN(residual_norms)(const real_t *B, real_t *Y, int64_t n, int64_t k,
                                                              const double *bnorm, double *true_rel)
{
    for (int64_t q = 0; q < n * k; q++) Y[q] = B[q] - Y[q];
    TSGU_FN(col_dot)(Y, Y, n, k, true_rel);
    for (int64_t c = 0; c < k; c++) true_rel[c] = sqrt(true_rel[c]) / bnorm[c];
}
