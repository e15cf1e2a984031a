#ifndef TSGU_IN_TEMPLATE
/* grouped_mm.c: one small product per group of rows (gather_mm, segment_mm and
 * their gradient w.r.t. a)
 *     C[i,:] = A[i,:] @ M[r]      for every row i of group r
 * with A (n, K), M (R, K, P), C (n, P) and the groups of tsgu_groups.  Rows are
 * taken TSGU_MR at a time from one group, so each row of M[r] loaded feeds
 * TSGU_MR rows; a block short of TSGU_MR rows repeats its last row (computed
 * twice, written twice with the same bits).  Every row is thus computed by the
 * same instructions in k order wherever a thread boundary falls: the bits do
 * not depend on the thread count.  Threads take equal runs of the row order. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=fast") /* a*b+c as one FMA where the instruction set has it */
#endif
#include "tsgu.h"
#include "tsgu_parallel.h"
#include "tsgu_prefetch.h"

typedef struct {
    const tsgu_groups *g;
    const tsgu_dense *A, *M;
    tsgu_dense *C;
    int64_t T;
} grouped_mm_ctx;

#if defined(__GNUC__) && !defined(__clang__)
#define TSGU_UNROLL _Pragma("GCC unroll 16") /* the tile's rows in registers, not in a loop */
#else
#define TSGU_UNROLL
#endif
#define TSGU_MR 6                  /* rows of C per tile */
#define TSGU_VEC_BYTES 32          /* one AVX2 register; a tile is two of them wide */
#define TSGU_MIN_WORK (1 << 20)    /* multiply-adds below which one thread does it all */

#define TSGU_TEMPLATE_FILE "grouped_mm.c"
#include "tsgu_template.h"

int tsgu_grouped_mm(const tsgu_groups *g, const tsgu_dense *A, const tsgu_dense *M, tsgu_dense *C,
                    int nthreads)
{
    int status = tsgu_groups_check(g, A->rows);
    if (status) return status;
    int64_t T = nthreads < 1 ? 1 : nthreads, work = A->rows * M->rows * M->cols;
    if (T > TSGU_MAX_THREADS) T = TSGU_MAX_THREADS;
    if (T > work / TSGU_MIN_WORK) T = work / TSGU_MIN_WORK;
    if (T < 1) T = 1;
    grouped_mm_ctx x = {g, A, M, C, T};
    return tsgu_parallel_tasks(T, TSGU_PICK(grouped_mm_task, A->rtype, TSGU_I64), &x);
}

#else /* template body: real_t, TSGU_FN (idx_t unused: groups are int64) */

#define TSGU_NV (TSGU_VEC_BYTES / (int64_t)sizeof(real_t)) /* values per vector */
#define TSGU_NR (2 * TSGU_NV)                                /* columns per tile: two vectors */
typedef real_t TSGU_FN(vec) __attribute__((vector_size(TSGU_VEC_BYTES), aligned(sizeof(real_t)), may_alias));

/* c[m][0:NR] = a[m][0:K] @ Mr[0:K, 0:NR] for the TSGU_MR rows m: the accumulator
 * is TSGU_MR x 2 vectors, in registers */
TSGU_ISA_ATTR TSGU_ALWAYS_INLINE void TSGU_FN(mm_tile)(const real_t *const *a, const real_t *Mr,
                                                       int64_t ldm, int64_t K, real_t *const *c)
{
    typedef TSGU_FN(vec) vec;
    vec acc[TSGU_MR][2];
    TSGU_UNROLL for (int m = 0; m < TSGU_MR; m++) acc[m][0] = acc[m][1] = (vec){0};
    for (int64_t k = 0; k < K; k++) {
        const vec m0 = *(const vec *)(Mr + k * ldm), m1 = *(const vec *)(Mr + k * ldm + TSGU_NV);
        TSGU_UNROLL for (int m = 0; m < TSGU_MR; m++) {
            const real_t av = a[m][k];
            acc[m][0] += av * m0;                                   /* acc += A[i,k] * M[k,:] */
            acc[m][1] += av * m1;
        }
    }
    TSGU_UNROLL for (int m = 0; m < TSGU_MR; m++) {
        *(vec *)c[m] = acc[m][0];
        *(vec *)(c[m] + TSGU_NV) = acc[m][1];
    }
}

/* the same for the last w < NR columns, one row at a time */
TSGU_ISA_ATTR static void TSGU_FN(mm_tail)(const real_t *const *a, const real_t *Mr, int64_t ldm,
                                           int64_t K, real_t *const *c, int64_t w)
{
    for (int m = 0; m < TSGU_MR; m++)
        for (int64_t t = 0; t < w; t++) {
            real_t s = 0;
            for (int64_t k = 0; k < K; k++) s += a[m][k] * Mr[k * ldm + t];
            c[m][t] = s;
        }
}

/* positions [q0, q1) of the row order */
TSGU_ISA_ATTR static int TSGU_FN(grouped_mm_range)(const grouped_mm_ctx *x, int64_t q0, int64_t q1)
{
    const int64_t *off = x->g->off, *perm = x->g->perm;
    const real_t *Ax = x->A->data, *Mx = x->M->data;
    real_t *Cx = x->C->data;
    int64_t n = x->A->rows, K = x->M->rows, P = x->M->cols;
    int64_t lda = x->A->rstride, ldm = x->M->rstride, ldc = x->C->rstride, bsm = x->M->bstride;
    int64_t lo = 0, hi = x->g->ngroups;          /* r: the last group starting at or before q0 */
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        if (off[mid] <= q0) lo = mid;
        else hi = mid - 1;
    }
    for (int64_t r = lo, qstart = q0; qstart < q1; r++) {
        int64_t qend = off[r + 1] < q1 ? off[r + 1] : q1;
        const real_t *Mr = Mx + r * bsm;
        for (int64_t q = qstart; q < qend; q += TSGU_MR) {
            const real_t *a[TSGU_MR];
            real_t *c[TSGU_MR];
            for (int m = 0; m < TSGU_MR; m++) {
                int64_t qm = q + m < qend ? q + m : qend - 1, i = perm ? perm[qm] : qm;
                if (i < 0 || i >= n) return TSGU_EGROUP;
                a[m] = Ax + i * lda;
                c[m] = Cx + i * ldc;
                if (perm && qm + TSGU_MR < qend) { /* the next block's gathered rows; a prefetch cannot fault */
                    const real_t *an = Ax + perm[qm + TSGU_MR] * lda;
                    for (int64_t t = 0; t < K; t += TSGU_LINE / (int64_t)sizeof(real_t)) TSGU_PREFETCH(an + t);
                }
            }
            for (int64_t t0 = 0; t0 < P; t0 += TSGU_NR) {
                real_t *ct[TSGU_MR];
                for (int m = 0; m < TSGU_MR; m++) ct[m] = c[m] + t0;
                if (t0 + TSGU_NR <= P) TSGU_FN(mm_tile)(a, Mr + t0, ldm, K, ct);
                else TSGU_FN(mm_tail)(a, Mr + t0, ldm, K, ct, P - t0);
            }
        }
        if (qend > qstart) qstart = qend;
    }
    return TSGU_OK;
}

TSGU_ISA_ATTR static int TSGU_FN(grouped_mm_task)(void *vctx, int64_t t)
{
    const grouped_mm_ctx *x = vctx;
    int64_t n = x->A->rows;
    return TSGU_FN(grouped_mm_range)(x, n * t / x->T, n * (t + 1) / x->T);
}

#undef TSGU_NR
#undef TSGU_NV
#endif
