#ifndef TSGU_IN_TEMPLATE
/* spgemm_grad_a.c: the gradient of C = A·B (sparse times sparse) w.r.t. A's values,
 * at A's stored entries alone (a masked product, never the full G·B^T):
 *     out[e] = sum over the entries (j, c) of B[k] of B[k][j,c] * G[k][i,c],   e = (k, i, j) in A,
 * with the upstream gradient G either sparse (a checked CSR of C's shape, any
 * pattern: an entry G lacks is a zero) or dense (Gd, (batch, n, m)).  Row i of a
 * sparse G is put in a row accumulator (tsgu_accum.h) once, then each entry of A's
 * row i reads it at the columns of B's row j: O(nnz(G) + the products of A·B)
 * time, a row's worth of memory per thread.  One row of A per thread (rows split
 * by work, spgemm_split.c), sums in a fixed order: the same bits for any thread
 * count; 16-bit values summed in float, rounded once.  out is shaped like A's
 * col; A's values are not read.  A, B and a sparse G are checked first. */
#include "tsgu.h"
#include "tsgu_accum.h"
#include "tsgu_parallel.h"

typedef struct {
    const tsgu_csr *A, *B, *G;
    const tsgu_dense *Gd;
    void *out;
    const int64_t *bounds;
} grad_a_ctx;

#define TSGU_HALF_TOO 1
#define TSGU_TEMPLATE_FILE "spgemm_grad_a.c"
#include "tsgu_template.h"

int tsgu_spgemm_grad_a(const tsgu_csr *A, const tsgu_csr *B, const tsgu_csr *G, const tsgu_dense *Gd,
                       void *out, int nthreads)
{
    int64_t bounds[TSGU_MAX_THREADS + 1];
    int status = tsgu_csr_check(A, nthreads);
    if (status == TSGU_OK) status = tsgu_csr_check(B, nthreads);
    if (status == TSGU_OK && G) status = tsgu_csr_check(G, nthreads);
    if (status != TSGU_OK) return status;
    int64_t T = tsgu_split_product_rows(A, B, nthreads, bounds);
    if (T < 0) return TSGU_ENOMEM;
    grad_a_ctx x = {A, B, G, Gd, out, bounds};
    return tsgu_parallel_tasks(T, TSGU_PICK_HALF(grad_a_rows, B->rtype, A->itype), &x);
}

#else /* template body: real_t, acc_t, idx_t, TSGU_FN, ... (tsgu_template_types.h) */

#define TSGU_SPGEMM_ROWS 1
#include "tsgu_rows.h"

static int TSGU_FN(grad_a_rows)(void *ctx, int64_t t)
{
    const grad_a_ctx *x = ctx;
    const tsgu_csr *A = x->A, *B = x->B, *G = x->G;
    const idx_t *Aj = A->col, *Bj = B->col;
    const real_t *Bv = B->val;
    real_t *out = x->out;
    int64_t n = A->nrows, m = B->ncols;
    tsgu_accum acc = {.sum_size = sizeof(acc_t)};
    int status = TSGU_OK;
    for (int64_t r = x->bounds[t]; r < x->bounds[t + 1] && status == TSGU_OK; r++) {
        int64_t k = r / n, i = r - k * n, start, end, bs, be;
        TSGU_FN(row_entries)(A, k, i, &start, &end);
        if (start == end) continue;
        const real_t *gi = NULL;                 /* dense G: its row i */
        const acc_t *sum = NULL;                 /* sparse G: its row i in acc */
        if (G) {
            int64_t gs, ge;
            const idx_t *Gj = G->col;
            const real_t *Gv = G->val;
            TSGU_FN(row_entries)(G, k, i, &gs, &ge);
            if ((status = tsgu_accum_reset(&acc, ge - gs, m)) != TSGU_OK) break;
            acc_t *s = acc.sum;
            for (int64_t q = gs; q < ge; q++) {
                int64_t c = Gj[q], slot = tsgu_accum_slot(&acc, c);
                acc.key[slot] = c;
                s[slot] = TSGU_LOAD(Gv[q]);
            }
            sum = s;
        } else {
            gi = (const real_t *)x->Gd->data + k * x->Gd->bstride + i * x->Gd->rstride;
        }
        for (int64_t e = start; e < end; e++) {
            acc_t s = 0;
            TSGU_FN(prefetch_brow)(A, B, k, e, Bv);
            TSGU_FN(row_entries)(B, k, Aj[e], &bs, &be);
            if (G) {
                for (int64_t f = bs; f < be; f++) {
                    int64_t c = Bj[f], slot = tsgu_accum_slot(&acc, c);
                    if (acc.key[slot] == c) s += TSGU_LOAD(Bv[f]) * sum[slot];
                }
            } else {
                for (int64_t f = bs; f < be; f++) s += TSGU_LOAD(Bv[f]) * TSGU_LOAD(gi[Bj[f]]);
            }
            out[e] = TSGU_STORE(s);
        }
    }
    tsgu_accum_free(&acc);
    return status;
}

#endif
