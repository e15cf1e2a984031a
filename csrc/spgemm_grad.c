#ifndef TSGU_IN_TEMPLATE
/* spgemm_grad.c: the gradients of C = A·B (sparse times sparse, item by item) w.r.t.
 * the operands' values, at their stored entries alone (masked products: never the
 * full G·B^T or A^T·G):
 *     gA[e] = sum over the entries f = (j, c) of B[k] of B[k][j,c] * G[k][i,c],   e = (k, i, j) in A
 *     gB[f] = sum over the entries e = (i, j) of A[k] of A[k][i,j] * G[k][i,c],   f = (k, j, c) in B
 * with the upstream gradient G sparse (a checked CSR of C's shape, any pattern: an
 * entry it lacks is a zero) or dense (Gd, (batch, n, m)); gA or gB NULL when not wanted.
 * Both come from one walk over A's rows i, the products of A·B in forward's order:
 * a sparse G's row i is spread over a zeroed array of m values once (a hashed table
 * past TSGU_SPA_MAX_BYTES, tsgu_accum.h), each product (e, f) reads G[i,c] there and
 * adds B's value times it into gA[e] and A's value times it into gB[f].  Time: the
 * products, plus nnz(G); G is read once, in order.  gA[e] belongs to row i's walk.
 * gB[f] gets products from many rows: the rows are cut into K chunks of about equal
 * work, K <= TSGU_GRAD_CHUNKS set by the matrices alone (spgemm_split.c), each chunk
 * sums into its own float array of nnz(B) (where large, on a kept block, kept_blocks.c:
 * a training step's next call finds it paged in), and the chunks' sums are added in
 * chunk order; so both are the same bits for any thread count (threads take chunks t,
 * t+T, ...).  16-bit values are summed in float and rounded once.  A, B and a sparse G
 * are checked first. */
#include <stdlib.h>
#include <string.h>
#include "tsgu.h"
#include "tsgu_accum.h"
#include "tsgu_advise.h"
#include "tsgu_kept_blocks.h"
#include "tsgu_parallel.h"

#define TSGU_GRAD_CHUNKS 4   /* K: gB's partial sums take K * nnz(B) floats */

typedef struct {
    const tsgu_csr *A, *B, *G;
    const tsgu_dense *Gd;
    void *gA, *gB;
    void *partial;          /* K arrays of nnz(B) float sums of gB, one per chunk */
    const int64_t *bounds;  /* the K chunks' rows */
    int64_t K, T;
} grad_ctx;

#define TSGU_HALF_TOO 1
#define TSGU_TEMPLATE_FILE "spgemm_grad.c"
#include "tsgu_template.h"

int tsgu_spgemm_grad(const tsgu_csr *A, const tsgu_csr *B, const tsgu_csr *G, const tsgu_dense *Gd, void *gA,
                     void *gB, int nthreads)
{
    int64_t bounds[TSGU_MAX_THREADS + 1];
    int status = tsgu_csr_check(A, nthreads);
    if (status == TSGU_OK) status = tsgu_csr_check(B, nthreads);
    if (status == TSGU_OK && G) status = tsgu_csr_check(G, nthreads);
    if (status != TSGU_OK) return status;
    int64_t K = tsgu_split_product_rows(A, B, TSGU_GRAD_CHUNKS, nthreads, bounds);
    if (K < 0) return TSGU_ENOMEM;
    int64_t T = nthreads < 1 ? 1 : nthreads > K ? K : nthreads;
    size_t sum_size = B->rtype == TSGU_F64 ? sizeof(double) : sizeof(float);
    size_t bytes = (size_t)(K * B->nnz + 1) * sum_size, kept = gB && bytes >= TSGU_KEPT_MIN_BYTES ? bytes : 0;
    void *partial = NULL;       /* a large one on a kept block (paged in by an earlier call), zeroed here */
    if (gB && !(partial = kept ? tsgu_block_take(&kept) : calloc(1, bytes))) return TSGU_ENOMEM;
    if (kept) memset(partial, 0, bytes);
    grad_ctx x = {A, B, G, Gd, gA, gB, partial, bounds, K, T};
    if (gA) tsgu_advise_output(gA, A->nnz * tsgu_real_size(A->rtype));      /* fresh outputs: huge pages */
    if (gB) tsgu_advise_output(gB, B->nnz * tsgu_real_size(A->rtype));
    status = tsgu_parallel_tasks(T, TSGU_PICK_HALF(grad_chunks, B->rtype, A->itype), &x);
    if (status == TSGU_OK && gB) status = tsgu_parallel_tasks(T, TSGU_PICK_HALF(grad_b_sum, B->rtype, A->itype), &x);
    if (kept && partial) tsgu_block_give(partial, kept);
    else free(partial);
    return status;
}

#else /* template body: real_t, acc_t, idx_t, TSGU_FN, ... (tsgu_template_types.h) */

#define TSGU_SPGEMM_ROWS 1
#include "tsgu_rows.h"

/* the rows of chunk c; Gi: a zeroed array of m values (use_table 0, constant) or acc */
TSGU_ALWAYS_INLINE int TSGU_FN(grad_rows)(const grad_ctx *x, int64_t c, acc_t *Gi, tsgu_accum *acc,
                                          const int use_table)
{
    const tsgu_csr *A = x->A, *B = x->B, *G = x->G;
    const idx_t *Aj = A->col, *Bj = B->col, *Gj = G ? G->col : NULL;
    const real_t *Av = A->val, *Bv = B->val, *Gv = G ? G->val : NULL;
    real_t *gA = x->gA;
    acc_t *gB = x->gB ? (acc_t *)x->partial + c * B->nnz : NULL;
    int64_t n = A->nrows, m = B->ncols;
    for (int64_t r = x->bounds[c]; r < x->bounds[c + 1]; r++) {
        int64_t k = tsgu_item_of(A, r), i = r - k * n, start, end, bs, be, gs = 0, ge = 0;
        TSGU_FN(row_entries)(A, k, i, &start, &end);
        if (start == end) continue;
        const real_t *gi = NULL;                     /* dense G: its row i */
        acc_t *sum = Gi;                             /* sparse G: its row i, by column or in acc */
        if (G) {
            TSGU_FN(row_entries)(G, k, i, &gs, &ge);
            if (use_table) {
                int status = tsgu_accum_reset(acc, ge - gs, m);
                if (status != TSGU_OK) return status;
                sum = acc->sum;
                for (int64_t q = gs; q < ge; q++) {
                    int64_t s = tsgu_accum_slot(acc, Gj[q]);
                    acc->key[s] = Gj[q];
                    sum[s] = TSGU_LOAD(Gv[q]);
                }
            } else {
                for (int64_t q = gs; q < ge; q++) Gi[Gj[q]] = TSGU_LOAD(Gv[q]);
            }
        } else {
            gi = (const real_t *)x->Gd->data + k * x->Gd->bstride + i * x->Gd->rstride;
        }
        for (int64_t e = start; e < end; e++) {
            acc_t a = TSGU_LOAD(Av[e]), s = 0;
            TSGU_FN(prefetch_brow)(A, B, k, e, Bv);
            TSGU_FN(row_entries)(B, k, Aj[e], &bs, &be);
            for (int64_t f = bs; f < be; f++) {
                int64_t col = Bj[f];
                acc_t g;
                if (!G) {
                    g = TSGU_LOAD(gi[col]);
                } else if (use_table) {
                    int64_t slot = tsgu_accum_slot(acc, col);
                    g = acc->key[slot] == col ? sum[slot] : 0;
                } else {
                    g = Gi[col];
                }
                s += TSGU_LOAD(Bv[f]) * g;
                if (gB) gB[f] += a * g;
            }
            if (gA) gA[e] = TSGU_STORE(s);
        }
        if (G && !use_table)                          /* zero again for the next row */
            for (int64_t q = gs; q < ge; q++) Gi[Gj[q]] = 0;
    }
    return TSGU_OK;
}

/* chunks t, t + T, ... */
static int TSGU_FN(grad_chunks)(void *ctx, int64_t t)
{
    const grad_ctx *x = ctx;
    int64_t m = x->B->ncols;
    int use_table = x->G && m * (int64_t)sizeof(acc_t) > TSGU_SPA_MAX_BYTES;
    acc_t *Gi = x->G && !use_table ? calloc((size_t)(m > 0 ? m : 1), sizeof *Gi) : NULL;
    tsgu_accum acc = {.sum_size = sizeof(acc_t)};
    int status = x->G && !use_table && !Gi ? TSGU_ENOMEM : TSGU_OK;
    for (int64_t c = t; c < x->K && status == TSGU_OK; c += x->T)
        status = use_table ? TSGU_FN(grad_rows)(x, c, NULL, &acc, 1) : TSGU_FN(grad_rows)(x, c, Gi, NULL, 0);
    free(Gi);
    tsgu_accum_free(&acc);
    return status;
}

/* gB[f] = the chunks' sums at f, added in chunk order, for the f of task t's share */
static int TSGU_FN(grad_b_sum)(void *ctx, int64_t t)
{
    const grad_ctx *x = ctx;
    int64_t nnz = x->B->nnz, f0 = nnz / x->T * t, f1 = t + 1 == x->T ? nnz : nnz / x->T * (t + 1);
    const acc_t *p = x->partial;
    real_t *gB = x->gB;
    for (int64_t f = f0; f < f1; f++) {
        acc_t s = p[f];
        for (int64_t c = 1; c < x->K; c++) s += p[c * nnz + f];
        gB[f] = TSGU_STORE(s);
    }
    return TSGU_OK;
}

#endif
