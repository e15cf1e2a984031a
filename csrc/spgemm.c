#ifndef TSGU_IN_TEMPLATE
/* spgemm.c: C = A·B, sparse times sparse, item by item (A[k] n x l, B[k] l x m, CSR):
 *     C[k][i,c] = sum over the entries (i, j) of A[k] and (j, c) of B[k] of A[k][i,j] * B[k][j,c]
 * on the pattern that spgemm_count.c sized: Cptr (batch*n+1, int64, global rows) in,
 * and out the columns Ccol (int64, increasing in each row) and values Cval (nnzC).
 * Gustavson's row-by-row product: row i scales the rows j of B that its entries
 * name and adds them up in a row accumulator (tsgu_accum.h: hashed, or a slot per
 * column for a row that fills a good part of them), in the order of A's entries
 * then B's, one row per thread (rows split by work, spgemm_split.c): the same
 * bits for any thread count.  16-bit values are summed in float and rounded once.
 * Both structures are checked first; a row whose product does not have the count
 * Cptr gives it is TSGU_EPRODUCT, found before anything is written past the row. */
#include "tsgu.h"
#include "tsgu_accum.h"
#include "tsgu_parallel.h"

typedef struct {
    const tsgu_csr *A, *B;
    const int64_t *Cptr;
    int64_t *Ccol;
    void *Cval;
    int64_t nnzC;
    const int64_t *bounds;
} spgemm_ctx;

#define TSGU_HALF_TOO 1
#define TSGU_TEMPLATE_FILE "spgemm.c"
#include "tsgu_template.h"

int tsgu_spgemm(const tsgu_csr *A, const tsgu_csr *B, const int64_t *Cptr, int64_t *Ccol, void *Cval,
                int64_t nnzC, int nthreads)
{
    int64_t bounds[TSGU_MAX_THREADS + 1], R = A->batch * A->nrows;
    if (Cptr[0] != 0 || Cptr[R] != nnzC) return TSGU_EPRODUCT;
    int status = tsgu_csr_check(A, nthreads);
    if (status == TSGU_OK) status = tsgu_csr_check(B, nthreads);
    if (status != TSGU_OK) return status;
    int64_t T = tsgu_split_product_rows(A, B, nthreads, bounds);
    if (T < 0) return TSGU_ENOMEM;
    spgemm_ctx x = {A, B, Cptr, Ccol, Cval, nnzC, bounds};
    return tsgu_parallel_tasks(T, TSGU_PICK_HALF(spgemm_rows, A->rtype, A->itype), &x);
}

#else /* template body: real_t, acc_t, idx_t, TSGU_FN, ... (tsgu_template_types.h) */

#define TSGU_SPGEMM_ROWS 1
#include "tsgu_rows.h"

static int TSGU_FN(spgemm_rows)(void *ctx, int64_t t)
{
    const spgemm_ctx *x = ctx;
    const tsgu_csr *A = x->A, *B = x->B;
    const idx_t *Aj = A->col, *Bj = B->col;
    const real_t *Av = A->val, *Bv = B->val;
    real_t *Cv = x->Cval;
    int64_t n = A->nrows, m = B->ncols;
    tsgu_accum acc = {.sum_size = sizeof(acc_t)};
    int status = tsgu_accum_ordered(&acc, m);
    for (int64_t r = x->bounds[t]; r < x->bounds[t + 1] && status == TSGU_OK; r++) {
        int64_t k = r / n, i = r - k * n, start, end, bs, be, c0 = x->Cptr[r], c1 = x->Cptr[r + 1], count = 0;
        if (c0 < 0 || c0 > c1 || c1 > x->nnzC) {
            status = TSGU_EPRODUCT;
            break;
        }
        TSGU_FN(row_entries)(A, k, i, &start, &end);
        if (start == end) {
            if (c1 != c0) status = TSGU_EPRODUCT;
            continue;
        }
        if ((status = tsgu_accum_reset(&acc, c1 - c0, m)) != TSGU_OK) break;
        acc_t *sum = acc.sum;
        for (int64_t e = start; e < end && status == TSGU_OK; e++) {
            acc_t a = TSGU_LOAD(Av[e]);
            TSGU_FN(prefetch_brow)(A, B, k, e, Bv);
            TSGU_FN(row_entries)(B, k, Aj[e], &bs, &be);
            for (int64_t f = bs; f < be; f++) {
                int64_t c = Bj[f], s = tsgu_accum_slot(&acc, c);
                acc_t v = a * TSGU_LOAD(Bv[f]);
                if (acc.key[s] < 0) {
                    if (++count > c1 - c0) {      /* more columns than Cptr has room for */
                        status = TSGU_EPRODUCT;
                        break;
                    }
                    tsgu_accum_insert(&acc, s, c);
                    sum[s] = v;
                } else {
                    sum[s] += v;
                }
            }
        }
        if (status != TSGU_OK) break;
        if (count != c1 - c0) {
            status = TSGU_EPRODUCT;
            break;
        }
        tsgu_accum_keys(&acc, x->Ccol + c0, count);
        for (int64_t q = c0; q < c1; q++) Cv[q] = TSGU_STORE(sum[tsgu_accum_slot(&acc, x->Ccol[q])]);
    }
    tsgu_accum_free(&acc);
    return status;
}

#endif
