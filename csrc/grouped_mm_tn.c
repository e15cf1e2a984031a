#ifndef TSGU_IN_TEMPLATE
/* grouped_mm_tn.c: per group of rows, the sum of their outer products
 *     out[r] = sum_{i in group r} A[i,:]^T G[i,:]      (A (n, K), G (n, P), out (R, K, P))
 * the gradient w.r.t. b of gather_mm and segment_mm, with no atomics and no
 * temporary: a task owns the rows [k0, k1) of one out[r] and adds the group's
 * rows into them in the order of the group (increasing i), TSGU_CHUNK rows at
 * a time, so each element is one running sum in the order of the serial loop
 * and the bits do not depend on the thread count.  Tasks are (relation, slice
 * of K); threads take runs of tasks of about equal cost (rows x width). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=fast") /* a*b+c as one FMA where the instruction set has it */
#endif
#include "tsgu.h"
#include "tsgu_parallel.h"
#include "tsgu_prefetch.h"

typedef struct {
    const tsgu_groups *g;
    const tsgu_dense *A, *G;
    tsgu_dense *out;
    int64_t T, slices; /* threads; slices of K per relation */
    int64_t total;     /* cost of all tasks */
} grouped_mm_tn_ctx;

#if defined(__GNUC__) && !defined(__clang__)
#define TSGU_UNROLL _Pragma("GCC unroll 16") /* the tile's rows in registers, not in a loop */
#else
#define TSGU_UNROLL
#endif
#define TSGU_MR 6                  /* rows of out[r] per tile */
#define TSGU_VEC_BYTES 32          /* one AVX2 register; a tile is two of them wide */
#define TSGU_CHUNK 128             /* rows of the group per pass over a task's tiles */
#define TSGU_MIN_WORK (1 << 20)    /* multiply-adds below which one thread does it all */

/* rows [k0, k1) of slice s of S over K rows in tiles of TSGU_MR */
static void slice_rows(int64_t K, int64_t s, int64_t S, int64_t *k0, int64_t *k1)
{
    int64_t tiles = (K + TSGU_MR - 1) / TSGU_MR;
    *k0 = TSGU_MR * (tiles * s / S);
    *k1 = TSGU_MR * (tiles * (s + 1) / S);
    if (*k1 > K) *k1 = K;
}

/* cost of task j = (relation j / S, slice j % S): (rows + 1) x slice width */
static int64_t task_cost(const grouped_mm_tn_ctx *x, int64_t j)
{
    int64_t r = j / x->slices, k0, k1;
    slice_rows(x->A->cols, j % x->slices, x->slices, &k0, &k1);
    return (x->g->off[r + 1] - x->g->off[r] + 1) * (k1 - k0);
}

#define TSGU_TEMPLATE_FILE "grouped_mm_tn.c"
#include "tsgu_template.h"

int tsgu_grouped_mm_tn(const tsgu_groups *g, const tsgu_dense *A, const tsgu_dense *G,
                       tsgu_dense *out, int nthreads)
{
    int status = tsgu_groups_check(g, A->rows);
    if (status) return status;
    int64_t R = g->ngroups, K = A->cols, P = G->cols;
    int64_t T = nthreads < 1 ? 1 : nthreads, work = (A->rows + R) * K * P;
    if (T > TSGU_MAX_THREADS) T = TSGU_MAX_THREADS;
    if (T > work / TSGU_MIN_WORK) T = work / TSGU_MIN_WORK;
    if (T < 1) T = 1;
    if (R == 0 || K == 0) return TSGU_OK;
    /* enough tasks that the largest relations can be shared: about 4 per thread */
    int64_t tiles = (K + TSGU_MR - 1) / TSGU_MR, S = (4 * T + R - 1) / R;
    if (S > tiles) S = tiles;
    grouped_mm_tn_ctx x = {g, A, G, out, T, S, 0};
    for (int64_t j = 0; j < R * S; j++) x.total += task_cost(&x, j);
    return tsgu_parallel_tasks(T, TSGU_PICK(grouped_mm_tn_task, A->rtype, TSGU_I64), &x);
}

#else /* template body: real_t, TSGU_FN (idx_t unused: groups are int64) */

#define TSGU_NV (TSGU_VEC_BYTES / (int64_t)sizeof(real_t)) /* values per vector */
#define TSGU_NR (2 * TSGU_NV)                                /* columns per tile: two vectors */
typedef real_t TSGU_FN(vec) __attribute__((vector_size(TSGU_VEC_BYTES), aligned(sizeof(real_t)), may_alias));

/* o[m][0:NR] += sum_q a[q][k_m] * g[q][t0:t0+NR] over the cnt rows q of a chunk,
 * in q order, with k_m = kk[m], or kb + m when kk is NULL (a full tile: constant
 * offsets); the accumulator is TSGU_MR x 2 vectors, in registers */
TSGU_ISA_ATTR TSGU_ALWAYS_INLINE void TSGU_FN(tn_tile)(const real_t *const *a, const real_t *const *g,
                                                       int64_t cnt, int64_t kb, const int64_t *kk,
                                                       int64_t t0, real_t *const *o)
{
    typedef TSGU_FN(vec) vec;
    vec acc[TSGU_MR][2];
    TSGU_UNROLL for (int m = 0; m < TSGU_MR; m++) {
        acc[m][0] = *(const vec *)o[m];
        acc[m][1] = *(const vec *)(o[m] + TSGU_NV);
    }
    for (int64_t q = 0; q < cnt; q++) {
        const vec g0 = *(const vec *)(g[q] + t0), g1 = *(const vec *)(g[q] + t0 + TSGU_NV);
        TSGU_UNROLL for (int m = 0; m < TSGU_MR; m++) {
            const real_t av = kk ? a[q][kk[m]] : a[q][kb + m];
            acc[m][0] += av * g0;                                   /* += A[i,k] * G[i,:] */
            acc[m][1] += av * g1;
        }
    }
    TSGU_UNROLL for (int m = 0; m < TSGU_MR; m++) {
        *(vec *)o[m] = acc[m][0];
        *(vec *)(o[m] + TSGU_NV) = acc[m][1];
    }
}

/* the same for the last w < NR columns, element by element in the same q order;
 * a repeated row (the end of a short tile) is added into once */
TSGU_ISA_ATTR static void TSGU_FN(tn_tail)(const real_t *const *a, const real_t *const *g, int64_t cnt,
                                           const int64_t *kk, int64_t t0, real_t *const *o, int64_t w)
{
    for (int m = 0; m < TSGU_MR && (m == 0 || kk[m] != kk[m - 1]); m++)
        for (int64_t t = 0; t < w; t++) {
            real_t s = o[m][t];
            for (int64_t q = 0; q < cnt; q++) s += a[q][kk[m]] * g[q][t0 + t];
            o[m][t] = s;
        }
}

/* rows [k0, k1) of out[r] */
TSGU_ISA_ATTR static int TSGU_FN(tn_task)(const grouped_mm_tn_ctx *x, int64_t r, int64_t k0,
                                          int64_t k1)
{
    const int64_t *off = x->g->off, *perm = x->g->perm;
    const real_t *Ax = x->A->data, *Gx = x->G->data;
    int64_t n = x->A->rows, P = x->G->cols, lda = x->A->rstride, ldg = x->G->rstride, ldo = x->out->rstride;
    real_t *Or = (real_t *)x->out->data + r * x->out->bstride;
    const real_t *a[TSGU_CHUNK], *g[TSGU_CHUNK];
    for (int64_t k = k0; k < k1; k++)
        for (int64_t t = 0; t < P; t++) Or[k * ldo + t] = 0;
    for (int64_t q0 = off[r]; q0 < off[r + 1]; q0 += TSGU_CHUNK) {
        int64_t cnt = off[r + 1] - q0 < TSGU_CHUNK ? off[r + 1] - q0 : TSGU_CHUNK;
        for (int64_t q = 0; q < cnt; q++) {
            int64_t i = perm ? perm[q0 + q] : q0 + q;
            if (i < 0 || i >= n) return TSGU_EGROUP;
            a[q] = Ax + i * lda;
            g[q] = Gx + i * ldg;
            for (int64_t t = k0; t < k1; t += TSGU_LINE / (int64_t)sizeof(real_t)) TSGU_PREFETCH(a[q] + t);
            for (int64_t t = 0; t < P; t += TSGU_LINE / (int64_t)sizeof(real_t)) TSGU_PREFETCH(g[q] + t);
        }
        for (int64_t kb = k0; kb < k1; kb += TSGU_MR) {
            int64_t kk[TSGU_MR];
            real_t *o[TSGU_MR];
            for (int m = 0; m < TSGU_MR; m++) {   /* a short tile repeats its last row */
                kk[m] = kb + m < k1 ? kb + m : k1 - 1;
                o[m] = Or + kk[m] * ldo;
            }
            for (int64_t t0 = 0; t0 < P; t0 += TSGU_NR) {
                real_t *ot[TSGU_MR];
                for (int m = 0; m < TSGU_MR; m++) ot[m] = o[m] + t0;
                if (t0 + TSGU_NR > P) TSGU_FN(tn_tail)(a, g, cnt, kk, t0, ot, P - t0);
                else if (kb + TSGU_MR <= k1) TSGU_FN(tn_tile)(a, g, cnt, kb, NULL, t0, ot);
                else TSGU_FN(tn_tile)(a, g, cnt, kb, kk, t0, ot);
            }
        }
    }
    return TSGU_OK;
}

/* thread t runs the tasks whose cumulative cost starts in [total*t/T, total*(t+1)/T) */
TSGU_ISA_ATTR static int TSGU_FN(grouped_mm_tn_task)(void *vctx, int64_t t)
{
    const grouped_mm_tn_ctx *x = vctx;
    int64_t lo = x->total * t / x->T, hi = x->total * (t + 1) / x->T, S = x->slices;
    int64_t R = x->g->ngroups, K = x->A->cols, before = 0;
    for (int64_t j = 0; j < R * S; j++) {
        int64_t cost = task_cost(x, j);
        if (before >= lo && before < hi) {
            int64_t k0, k1;
            slice_rows(K, j % S, S, &k0, &k1);
            if (k0 < k1) {
                int status = TSGU_FN(tn_task)(x, j / S, k0, k1);
                if (status) return status;
            }
        }
        before += cost;
    }
    return TSGU_OK;
}

#undef TSGU_NR
#undef TSGU_NV
#endif
