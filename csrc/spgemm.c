#ifndef TSGU_IN_TEMPLATE
/* spgemm.c: C = A·B, sparse times sparse, item by item (A[k] n x l, B[k] l x m, CSR):
 *     C[k][i,c] = sum over the entries (i, j) of A[k] and (j, c) of B[k] of A[k][i,j] * B[k][j,c]
 * on the pattern that spgemm_count.c sized: Cptr (batch*n+1, int64, global rows) in,
 * and out the columns (increasing in each row: Ccol int64, or Ccol32 int32, a smaller
 * output where they fit, the other NULL) and values Cval (nnzC);
 * where Crow (and Citem) are not NULL, each entry's row i (and item k) too: the index
 * rows of a COO tensor, written with the columns.
 * Gustavson's row-by-row product: row i scales the rows j of B that its entries
 * name and adds them up in a row accumulator (tsgu_accum.h: the sparse accumulator,
 * a sum per column read back in order through its bitmap, or for m past what that
 * takes, a hashed table whose keys are sorted), in the order of A's entries then
 * B's, one row per thread (rows split by work, spgemm_split.c): the same bits for
 * any thread count.  16-bit values are summed in float and rounded once.
 * Both structures are checked first; a row whose product does not have the count
 * Cptr gives it is TSGU_EPRODUCT, found before anything is written past the row. */
#include "tsgu.h"
#include "tsgu_accum.h"
#include "tsgu_advise.h"
#include "tsgu_parallel.h"

typedef struct {
    const tsgu_csr *A, *B;
    const int64_t *Cptr;
    int64_t *Ccol, *Crow, *Citem;
    int32_t *Ccol32;
    void *Cval;
    int64_t nnzC;
    const int64_t *bounds;
} spgemm_ctx;

#define TSGU_HALF_TOO 1
#define TSGU_TEMPLATE_FILE "spgemm.c"
#include "tsgu_template.h"

int tsgu_spgemm(const tsgu_csr *A, const tsgu_csr *B, const int64_t *Cptr, int64_t *Ccol, int32_t *Ccol32,
                int64_t *Crow, int64_t *Citem, void *Cval, int64_t nnzC, int nthreads)
{
    int64_t bounds[TSGU_MAX_THREADS + 1], R = A->batch * A->nrows;
    if (Cptr[0] != 0 || Cptr[R] != nnzC) return TSGU_EPRODUCT;
    int status = tsgu_csr_check(A, nthreads);
    if (status == TSGU_OK) status = tsgu_csr_check(B, nthreads);
    if (status != TSGU_OK) return status;
    int64_t T = tsgu_split_product_rows(A, B, nthreads, nthreads, bounds);
    if (T < 0) return TSGU_ENOMEM;
    spgemm_ctx x = {A, B, Cptr, Ccol, Crow, Citem, Ccol32, Cval, nnzC, bounds};
    if (Ccol) tsgu_advise_output(Ccol, nnzC * (int64_t)sizeof *Ccol);  /* fresh outputs: huge pages */
    else tsgu_advise_output(Ccol32, nnzC * (int64_t)sizeof *Ccol32);
    if (Crow) tsgu_advise_output(Crow, nnzC * (int64_t)sizeof *Crow);
    if (Citem) tsgu_advise_output(Citem, nnzC * (int64_t)sizeof *Citem);
    tsgu_advise_output(Cval, nnzC * tsgu_real_size(A->rtype));
    return tsgu_parallel_tasks(T, TSGU_PICK_HALF(spgemm_rows, A->rtype, A->itype), &x);
}

#else /* template body: real_t, acc_t, idx_t, TSGU_FN, ... (tsgu_template_types.h) */

#define TSGU_SPGEMM_ROWS 1
#include "tsgu_rows.h"

/* row r of C into its slots [c0, c1): with spa (constant), through the sparse
 * accumulator (a sum per column), else through the table acc; the row's columns are
 * read back into Ccol, or for int32 columns into keys (room for the row) first */
TSGU_ALWAYS_INLINE int TSGU_FN(spgemm_row)(const spgemm_ctx *x, int64_t r, tsgu_spa *spa, tsgu_accum *acc,
                                           const int use_spa, int64_t *keys)
{
    const tsgu_csr *A = x->A, *B = x->B;
    const idx_t *Aj = A->col, *Bj = B->col;
    const real_t *Av = A->val, *Bv = B->val;
    real_t *Cv = x->Cval;
    int64_t n = A->nrows, k = r / n, i = r - k * n, start, end, bs, be, c0 = x->Cptr[r], c1 = x->Cptr[r + 1];
    int64_t count = 0, *Ccol = x->Ccol ? x->Ccol + c0 : keys;
    if (c0 < 0 || c0 > c1 || c1 > x->nnzC) return TSGU_EPRODUCT;
    TSGU_FN(row_entries)(A, k, i, &start, &end);
    if (!use_spa && start < end) {
        int status = tsgu_accum_reset(acc, c1 - c0, B->ncols);
        if (status != TSGU_OK) return status;
    }
    acc_t *sum = use_spa ? spa->sum : acc->sum;
    for (int64_t e = start; e < end; e++) {
        acc_t a = TSGU_LOAD(Av[e]);
        TSGU_FN(prefetch_brow)(A, B, k, e, Bv);
        TSGU_FN(row_entries)(B, k, Aj[e], &bs, &be);
        for (int64_t f = bs; f < be; f++) {
            int64_t c = Bj[f], s = use_spa ? c : tsgu_accum_slot(acc, c);
            acc_t v = a * TSGU_LOAD(Bv[f]);
            if (use_spa ? tsgu_spa_mark(spa, c) : acc->key[s] < 0) {
                if (++count > c1 - c0) return TSGU_EPRODUCT;   /* more columns than Cptr has room for */
                if (!use_spa) acc->key[s] = c;
                sum[s] = v;
            } else {
                sum[s] += v;
            }
        }
    }
    if (count != c1 - c0) return TSGU_EPRODUCT;    /* (an error ends the task: spa is not reused) */
    if (count == 0) return TSGU_OK;                /* an empty row: nothing marked, nothing to write */
    if (use_spa) {
        tsgu_spa_keys(spa, Ccol);
        for (int64_t q = 0; q < count; q++) Cv[c0 + q] = TSGU_STORE(sum[Ccol[q]]);
    } else {
        tsgu_accum_keys(acc, Ccol, count);
        for (int64_t q = 0; q < count; q++) Cv[c0 + q] = TSGU_STORE(sum[tsgu_accum_slot(acc, Ccol[q])]);
    }
    if (x->Ccol32)                                 /* columns < m <= 2^31 - 1 (the caller's size check) */
        for (int64_t q = 0; q < count; q++) x->Ccol32[c0 + q] = (int32_t)Ccol[q];
    if (x->Crow)
        for (int64_t q = c0; q < c1; q++) x->Crow[q] = i;
    if (x->Citem)
        for (int64_t q = c0; q < c1; q++) x->Citem[q] = k;
    return TSGU_OK;
}

/* room for the columns of the longest row of C in rows [r0, r1) (none with int64
 * columns, read back into Ccol itself): a row has at most m and nnzC columns, and one
 * whose pointers claim more fails its count check before anything is written */
static int64_t *TSGU_FN(spgemm_keys)(const spgemm_ctx *x, int64_t r0, int64_t r1, int *status)
{
    int64_t most = 1, cap = x->B->ncols < x->nnzC ? x->B->ncols : x->nnzC;
    if (x->Ccol) return NULL;
    for (int64_t r = r0; r < r1 && most < cap; r++)
        if (x->Cptr[r + 1] - x->Cptr[r] > most) most = x->Cptr[r + 1] - x->Cptr[r];
    int64_t *keys = malloc((size_t)(most < cap ? most : cap > 0 ? cap : 1) * sizeof *keys);
    if (!keys) *status = TSGU_ENOMEM;
    return keys;
}

static int TSGU_FN(spgemm_rows)(void *ctx, int64_t t)
{
    const spgemm_ctx *x = ctx;
    tsgu_spa spa;
    tsgu_accum acc = {.sum_size = sizeof(acc_t)};
    int init = tsgu_spa_init(&spa, x->B->ncols, sizeof(acc_t));     /* -1: m too large, take the table */
    int status = init == -1 ? TSGU_OK : init;
    int64_t *keys = status == TSGU_OK ? TSGU_FN(spgemm_keys)(x, x->bounds[t], x->bounds[t + 1], &status) : NULL;
    for (int64_t r = x->bounds[t]; r < x->bounds[t + 1] && status == TSGU_OK; r++)
        status = init == TSGU_OK ? TSGU_FN(spgemm_row)(x, r, &spa, &acc, 1, keys)
                                 : TSGU_FN(spgemm_row)(x, r, NULL, &acc, 0, keys);
    free(keys);
    tsgu_spa_free(&spa);
    tsgu_accum_free(&acc);
    return status;
}

#endif
