#ifndef TSGU_IN_TEMPLATE
/* spgemm_grad_b.c: the gradient of C = A·B (sparse times sparse) w.r.t. B's values,
 * at B's stored entries alone (a masked product, never the full A^T·G):
 *     out[f] = sum over the entries (i, j) of A[k] of A[k][i,j] * G[k][i,c],   f = (k, j, c) in B,
 * with G sparse (a checked CSR of C's shape, any pattern) or dense (Gd).  Column j
 * of A is row j of A^T, given as csr_transpose.c makes it: At (pointers, and the
 * rows i of A as its columns) and tperm (where each entry's value lies in A's
 * values).  Row j of B walks the entries (i, j) of A^T in increasing i and adds
 * A[i,j] * G[i,c] into a sum per entry (j, c) of B: a dense G is read at c, a
 * sparse row of G is merged with B's row j (a binary search per column of B where
 * G's row is much the longer).  One row of B per thread, sums in a fixed order:
 * the same bits for any thread count; 16-bit values summed in float, rounded once.
 * out is shaped like B's col; B's values are not read.  A, At, B and a sparse G are
 * checked first, and every tperm index before it is read through. */
#include <stdlib.h>
#include "tsgu.h"
#include "tsgu_parallel.h"

typedef struct {
    const tsgu_csr *A, *At, *B, *G;
    const void *tperm;
    const tsgu_dense *Gd;
    void *out;
} grad_b_ctx;

#define TSGU_HALF_TOO 1
#define TSGU_TEMPLATE_FILE "spgemm_grad_b.c"
#include "tsgu_template.h"

int tsgu_spgemm_grad_b(const tsgu_csr *A, const tsgu_csr *At, const void *tperm, const tsgu_csr *B,
                       const tsgu_csr *G, const tsgu_dense *Gd, void *out, int nthreads)
{
    int status = tsgu_csr_check(A, nthreads);
    if (status == TSGU_OK) status = tsgu_csr_check(At, nthreads);
    if (status == TSGU_OK) status = tsgu_csr_check(B, nthreads);
    if (status == TSGU_OK && G) status = tsgu_csr_check(G, nthreads);
    if (status != TSGU_OK) return status;
    grad_b_ctx x = {A, At, B, G, tperm, Gd, out};
    return tsgu_parallel_rows_weighted(At, 8, 1, nthreads, TSGU_PICK_HALF(grad_b_rows, A->rtype, A->itype), &x);
}

#else /* template body: real_t, acc_t, idx_t, TSGU_FN, ... (tsgu_template_types.h) */

#include "tsgu_rows.h"

/* the first q in [lo, hi) with Gj[q] >= c (hi when none) */
TSGU_ALWAYS_INLINE int64_t TSGU_FN(lower_bound)(const idx_t *Gj, int64_t lo, int64_t hi, int64_t c)
{
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (Gj[mid] < c) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static int TSGU_FN(grad_b_rows)(void *ctx, int64_t r0, int64_t r1)
{
    const grad_b_ctx *x = ctx;
    const tsgu_csr *A = x->A, *At = x->At, *B = x->B, *G = x->G;
    const idx_t *Ti = At->col, *Tq = x->tperm, *Bj = B->col;
    const real_t *Av = A->val;
    real_t *out = x->out;
    int64_t l = B->nrows, cap = 0;
    acc_t *sums = NULL;
    int status = TSGU_OK;
    for (int64_t r = r0; r < r1 && status == TSGU_OK; r++) {
        int64_t k = r / l, j = r - k * l, bs, be, ts, te;
        TSGU_FN(row_entries)(B, k, j, &bs, &be);
        if (bs == be) continue;
        int64_t len = be - bs;
        if (len > cap) {
            free(sums);
            cap = 2 * len;
            if (!(sums = malloc((size_t)cap * sizeof *sums))) {
                status = TSGU_ENOMEM;
                break;
            }
        }
        for (int64_t f = 0; f < len; f++) sums[f] = 0;
        TSGU_FN(row_entries)(At, k, j, &ts, &te);
        for (int64_t q = ts; q < te; q++) {
            int64_t i = Ti[q], e = Tq[q];
            if (e < 0 || e >= A->nnz) {
                status = TSGU_EIDX_RANGE;
                break;
            }
            acc_t a = TSGU_LOAD(Av[e]);
            if (!G) {
                const real_t *gi = (const real_t *)x->Gd->data + k * x->Gd->bstride + i * x->Gd->rstride;
                for (int64_t f = bs; f < be; f++) sums[f - bs] += a * TSGU_LOAD(gi[Bj[f]]);
                continue;
            }
            int64_t gs, ge;
            const idx_t *Gj = G->col;
            const real_t *Gv = G->val;
            TSGU_FN(row_entries)(G, k, i, &gs, &ge);
            if (ge - gs > 8 * len) {                 /* G's row much the longer: search it */
                for (int64_t f = bs; f < be && gs < ge; f++) {
                    gs = TSGU_FN(lower_bound)(Gj, gs, ge, Bj[f]);
                    if (gs < ge && Gj[gs] == Bj[f]) sums[f - bs] += a * TSGU_LOAD(Gv[gs]);
                }
            } else {                                 /* merge the two sorted rows */
                for (int64_t f = bs; f < be && gs < ge;) {
                    int64_t bc = Bj[f], gc = Gj[gs];
                    if (bc < gc) {
                        f++;
                    } else if (gc < bc) {
                        gs++;
                    } else {
                        sums[f - bs] += a * TSGU_LOAD(Gv[gs]);
                        f++;
                        gs++;
                    }
                }
            }
        }
        for (int64_t f = bs; f < be; f++) out[f] = TSGU_STORE(sums[f - bs]);
    }
    free(sums);
    return status;
}

#endif
