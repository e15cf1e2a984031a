#ifndef TSGU_IN_TEMPLATE
/* cg.c: conjugate gradients for A X = B, A symmetric positive definite, every
 * column of the n x k block B an independent system, on b / ||b|| per column:
 *     r = b/||b|| - A x,  p = r
 *     alpha = r^T r / p^T A p,  x += alpha p,  r -= alpha A p
 *     beta = r'^T r' / r^T r,   p = r' + beta p
 * A column is frozen (alpha = beta = 0) once its relative residual ||r|| is at
 * most stop; the loop ends when every column's (or with mean, their mean) is at
 * most tol, after at least min_iter and at most max_iter iterations.  Then
 * x *= ||b|| and the true residual ||b - A x|| / ||b|| is recomputed.  This is
 * the CPU path of utils.linear_cg for a sparse A without a preconditioner or
 * Lanczos probes: the same steps, tests and breakdown rules, in one call. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "tsgu.h"

/* an unconverged column's inner product that CG cannot divide by */
static int cg_bad(double v, double tiny) { return !(v >= tiny) || !isfinite(v); }

#define TSGU_TEMPLATE_FILE "cg.c"
#include "tsgu_template.h"

int tsgu_cg(const tsgu_csr *A, const tsgu_dense *B, tsgu_dense *X, int has_x0, const tsgu_krylov_opts *o,
            double *rel, double *true_rel, tsgu_krylov_info *info, int nthreads)
{
    tsgu_csr C;
    void *mem;
    memset(info, 0, sizeof *info);
    int status = tsgu_csr_compact(A, &C, &mem);  /* checked once, read unchecked below */
    if (status == TSGU_OK)
        status = TSGU_PICK(cg_run, C.rtype, C.itype)(&C, B, X, has_x0, o, rel, true_rel, info, nthreads);
    free(mem);
    return status;
}

#else /* template body: real_t, idx_t, TSGU_FN */

#include "tsgu_krylov.h"

TSGU_ISA_ATTR TSGU_ALWAYS_INLINE int TSGU_FN(cg_loop)(const tsgu_csr *A, const tsgu_dense *Bd, tsgu_dense *Xd,
                                                      int has_x0, const tsgu_krylov_opts *o, double *rel,
                                                      double *true_rel, tsgu_krylov_info *info, int nthreads,
                                                      const int64_t k)
{
    int64_t n = A->nrows, nk = n * k, it = 0, cap = o->max_iter;
    const real_t *B = Bd->data;
    real_t *X = Xd->data;
    real_t *R = malloc(3 * (size_t)nk * sizeof(real_t) + 1);
    double *s = malloc(6 * (size_t)k * sizeof(double) + 1);
    int status = TSGU_ENOMEM;
    if (!R || !s) goto done;
    real_t *P = R + nk, *AP = P + nk;
    double *bnorm = s, *rz = s + k, *pap = s + 2 * k, *alpha = s + 3 * k, *beta = s + 4 * k,
           *zero = s + 5 * k;
    TSGU_FN(col_dot)(B, B, n, k, bnorm);
    for (int64_t c = 0; c < k; c++) {          /* a zero column's solution is zero */
        zero[c] = bnorm[c] == 0;
        bnorm[c] = zero[c] ? 1 : sqrt(bnorm[c]);
    }
    for (int64_t i = 0; i < n; i++)
        for (int64_t c = 0; c < k; c++)
            X[i * k + c] = has_x0 && !zero[c] ? X[i * k + c] / (real_t)bnorm[c] : 0;
    if ((status = TSGU_FN(matvec)(A, X, AP, k, nthreads)) != TSGU_OK) goto done;
    info->matvecs = 1;
    for (int64_t i = 0; i < n; i++)
        for (int64_t c = 0; c < k; c++) R[i * k + c] = B[i * k + c] / (real_t)bnorm[c] - AP[i * k + c];
    TSGU_FN(col_dot)(R, R, n, k, rz);
    int all_frozen = 1;
    for (int64_t c = 0; c < k; c++) {
        rel[c] = sqrt(rz[c]);
        all_frozen &= rel[c] <= o->stop;
    }
    info->stopped_before = all_frozen && o->min_iter == 0;
    if (info->stopped_before) cap = 0;
    memcpy(P, R, (size_t)nk * sizeof(real_t));
    for (int64_t c = 0; c < k && !info->stopped_before; c++)
        if (!(rel[c] <= o->stop) && cg_bad(rz[c], o->tiny)) info->breakdown = TSGU_CG_BREAK_START;
    if (info->breakdown) goto done;
    while (it < cap) {
        if ((status = TSGU_FN(matvec)(A, P, AP, k, nthreads)) != TSGU_OK) goto done;
        info->matvecs++;
        TSGU_FN(col_dot)(P, AP, n, k, pap);
        for (int64_t c = 0; c < k; c++) {
            int active = !(rel[c] <= o->stop);
            if (active && cg_bad(pap[c], o->tiny)) info->breakdown = TSGU_CG_BREAK_PAP;
            else if (active && cg_bad(rz[c], o->tiny) && !info->breakdown) info->breakdown = TSGU_CG_BREAK_RZ;
            alpha[c] = active ? rz[c] / pap[c] : 0;
        }
        if (info->breakdown) goto done;
        for (int64_t c = 0; c < k; c++) beta[c] = 0; /* r'^T r', summed with the update */
        for (int64_t i = 0; i < n; i++)
            for (int64_t c = 0; c < k; c++) {
                real_t a = (real_t)alpha[c];
                X[i * k + c] += a * P[i * k + c];
                R[i * k + c] -= a * AP[i * k + c];
                beta[c] += (double)R[i * k + c] * R[i * k + c];
            }
        for (int64_t c = 0; c < k; c++) {
            int active = !(rel[c] <= o->stop);
            double rz_new = beta[c];
            beta[c] = active ? rz_new / rz[c] : 0;
            rz[c] = rz_new;
        }
        for (int64_t i = 0; i < n; i++)
            for (int64_t c = 0; c < k; c++) P[i * k + c] = R[i * k + c] + (real_t)beta[c] * P[i * k + c];
        double sum = 0;
        int all = 1;
        for (int64_t c = 0; c < k; c++) {
            rel[c] = sqrt(rz[c]);
            sum += rel[c];
            all &= rel[c] <= o->tol;
        }
        it++;
        if (it >= o->min_iter && (o->mean ? sum / (double)k <= o->tol : all)) {
            info->recursive_stop = 1;
            break;
        }
    }
    for (int64_t i = 0; i < n; i++)
        for (int64_t c = 0; c < k; c++) X[i * k + c] *= (real_t)bnorm[c];
    if ((status = TSGU_FN(matvec)(A, X, AP, k, nthreads)) != TSGU_OK) goto done;
    info->matvecs++;
    TSGU_FN(residual_norms)(B, AP, n, k, bnorm, true_rel);
done:
    info->iterations = it;
    free(R);
    free(s);
    return status;
}

TSGU_ISA_ATTR static int TSGU_FN(cg_run)(const tsgu_csr *A, const tsgu_dense *B, tsgu_dense *X, int has_x0,
                                         const tsgu_krylov_opts *o, double *rel, double *true_rel,
                                         tsgu_krylov_info *info, int nthreads)
{
    TSGU_BY_COLS(B->cols, TSGU_FN(cg_loop), A, B, X, has_x0, o, rel, true_rel, info, nthreads);
}

#endif
