#ifndef TSGU_IN_TEMPLATE
/* minres.c: MINRES (Paige & Saunders) for M X = B, M = scale A + shift I with A
 * symmetric (possibly indefinite), every column of the n x k block B an
 * independent system.  The Lanczos step on v = r2 / beta,
 *     y = M v - (beta / oldb) r1,   alfa = v^T y,   y -= (alfa / beta) r2
 *     r1, r2 = r2, y,   beta' = ||y||
 * then a Givens rotation of the new tridiagonal column gives the search
 * direction w = (v - oldeps w1 - delta w2) / gamma and x += phi w, with |phibar|
 * the residual norm; a division by a zero beta (a column already solved
 * exactly) gives 0.  The loop ends when every column's |phibar| / ||b|| is at
 * most tol, or after max_iter iterations; then the true residual is recomputed.
 * This is the CPU path of utils.minres for a sparse A without a preconditioner:
 * the same steps, in one call. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "tsgu.h"

/* the scalars of one column's recurrence */
typedef struct {
    double bnorm, beta, oldb, alfa, dbar, epsln, oldeps, delta, gamma, phi, phibar, cs, sn, dot;
} minres_col;

static double safe_div(double a, double b) { return b == 0 ? 0 : a / b; }

/* the rotation of one iteration, from the column's alfa and its new beta = ||y|| */
static void minres_rotate(minres_col *m, double beta, double eps)
{
    m->oldb = m->beta;
    m->beta = beta;
    m->oldeps = m->epsln;
    m->delta = m->cs * m->dbar + m->sn * m->alfa;     /* the previous rotation on the new column */
    double gbar = m->sn * m->dbar - m->cs * m->alfa;
    m->epsln = m->sn * beta;
    m->dbar = -m->cs * beta;
    m->gamma = sqrt(gbar * gbar + beta * beta);
    if (m->gamma < eps) m->gamma = eps;
    m->cs = gbar / m->gamma;                           /* the next rotation */
    m->sn = beta / m->gamma;
    m->phi = m->cs * m->phibar;
    m->phibar = m->sn * m->phibar;
}

#define TSGU_TEMPLATE_FILE "minres.c"
#include "tsgu_template.h"

int tsgu_minres(const tsgu_csr *A, const tsgu_dense *B, tsgu_dense *X, const tsgu_krylov_opts *o,
                double *rel, double *true_rel, tsgu_krylov_info *info, int nthreads)
{
    tsgu_csr C;
    void *mem;
    memset(info, 0, sizeof *info);
    int status = tsgu_csr_compact(A, &C, &mem);  /* checked once, read unchecked below */
    if (status == TSGU_OK)
        status = TSGU_PICK(minres_run, C.rtype, C.itype)(&C, B, X, o, rel, true_rel, info, nthreads);
    free(mem);
    return status;
}

#else /* template body: real_t, idx_t, TSGU_FN */

#include "tsgu_krylov.h"

/* y = scale A v + shift v (each term only where it changes something) */
TSGU_ISA_ATTR TSGU_ALWAYS_INLINE int TSGU_FN(minres_op)(const tsgu_csr *A, const real_t *v, real_t *y,
                                                        int64_t k, const tsgu_krylov_opts *o, int nthreads)
{
    int64_t nk = A->nrows * k;
    int status = TSGU_FN(matvec)(A, v, y, k, nthreads);
    if (status != TSGU_OK) return status;
    if (o->scale != 1)
        for (int64_t q = 0; q < nk; q++) y[q] *= (real_t)o->scale;
    if (o->shift != 0)
        for (int64_t q = 0; q < nk; q++) y[q] += (real_t)o->shift * v[q];
    return TSGU_OK;
}

TSGU_ISA_ATTR TSGU_ALWAYS_INLINE int TSGU_FN(minres_loop)(const tsgu_csr *A, const tsgu_dense *Bd,
                                                          tsgu_dense *Xd, const tsgu_krylov_opts *o, double *rel,
                                                          double *true_rel, tsgu_krylov_info *info, int nthreads,
                                                          const int64_t k)
{
    int64_t n = A->nrows, nk = n * k, it = 0;
    const real_t *B = Bd->data;
    real_t *X = Xd->data;
    real_t *buf = malloc(6 * (size_t)nk * sizeof(real_t) + 1);
    minres_col *col = malloc((size_t)k * sizeof *col + 1);
    double *bnorm = malloc((size_t)k * sizeof(double) + 1);
    int status = TSGU_ENOMEM, done_all = 1;
    if (!buf || !col || !bnorm) goto done;
    /* r1, r2, y rotate (r1, r2 = r2, y); so do w and w2 (w1 = w2, w2 = w) */
    real_t *r1 = buf, *r2 = buf + nk, *y = buf + 2 * nk, *v = buf + 3 * nk, *w = buf + 4 * nk,
           *w2 = buf + 5 * nk, *t;
    TSGU_FN(col_dot)(B, B, n, k, bnorm);
    for (int64_t q = 0; q < nk; q++) {
        X[q] = w[q] = w2[q] = 0;
        r2[q] = B[q];
    }
    for (int64_t c = 0; c < k; c++) {
        double b = sqrt(bnorm[c]);                     /* beta1 = ||b|| */
        bnorm[c] = b == 0 ? 1 : b;
        col[c] = (minres_col){.bnorm = bnorm[c], .beta = b, .phibar = b, .cs = -1};
        rel[c] = b / bnorm[c];
        done_all &= rel[c] <= o->tol;
    }
    while (it < o->max_iter && !done_all) {
        it++;
        for (int64_t i = 0; i < n; i++)
            for (int64_t c = 0; c < k; c++) v[i * k + c] = r2[i * k + c] * (real_t)safe_div(1, col[c].beta);
        if ((status = TSGU_FN(minres_op)(A, v, y, k, o, nthreads)) != TSGU_OK) goto done;
        for (int64_t c = 0; c < k; c++) col[c].dot = 0;
        for (int64_t i = 0; i < n; i++)                /* y -= (beta / oldb) r1; alfa = v^T y */
            for (int64_t c = 0; c < k; c++) {
                int64_t q = i * k + c;
                if (it >= 2) y[q] -= (real_t)safe_div(col[c].beta, col[c].oldb) * r1[q];
                col[c].dot += (double)v[q] * y[q];
            }
        for (int64_t c = 0; c < k; c++) {
            col[c].alfa = col[c].dot;
            col[c].dot = 0;
        }
        for (int64_t i = 0; i < n; i++)                /* y -= (alfa / beta) r2; beta' = ||y|| */
            for (int64_t c = 0; c < k; c++) {
                int64_t q = i * k + c;
                y[q] -= (real_t)safe_div(col[c].alfa, col[c].beta) * r2[q];
                col[c].dot += (double)y[q] * y[q];
            }
        t = r1, r1 = r2, r2 = y, y = t;
        done_all = 1;
        for (int64_t c = 0; c < k; c++) {
            minres_rotate(&col[c], sqrt(col[c].dot), o->eps);
            rel[c] = fabs(col[c].phibar) / col[c].bnorm;
            done_all &= rel[c] <= o->tol;
        }
        for (int64_t i = 0; i < n; i++)                /* the new w, into w2's buffer; x += phi w */
            for (int64_t c = 0; c < k; c++) {
                const minres_col *m = &col[c];
                int64_t q = i * k + c;
                w2[q] = (v[q] - (real_t)m->oldeps * w2[q] - (real_t)m->delta * w[q]) / (real_t)m->gamma;
                X[q] += (real_t)m->phi * w2[q];
            }
        t = w2, w2 = w, w = t;
    }
    if ((status = TSGU_FN(minres_op)(A, X, y, k, o, nthreads)) != TSGU_OK) goto done;
    TSGU_FN(residual_norms)(B, y, n, k, bnorm, true_rel);
    info->matvecs = it + 1;
done:
    info->iterations = it;
    free(buf);
    free(col);
    free(bnorm);
    return status;
}

TSGU_ISA_ATTR static int TSGU_FN(minres_run)(const tsgu_csr *A, const tsgu_dense *B, tsgu_dense *X,
                                             const tsgu_krylov_opts *o, double *rel, double *true_rel,
                                             tsgu_krylov_info *info, int nthreads)
{
    TSGU_BY_COLS(B->cols, TSGU_FN(minres_loop), A, B, X, o, rel, true_rel, info, nthreads);
}

#endif
