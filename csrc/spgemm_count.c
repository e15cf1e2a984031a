#ifndef TSGU_IN_TEMPLATE
/* spgemm_count.c: the pattern sizes of C = A·B, sparse times sparse, item by item
 * (A[k] n x l, B[k] l x m, both CSR): row i of C[k] holds the columns
 *     { c : (i, j) stored in A[k] and (j, c) stored in B[k] for some j },
 * the structural product (a sum that cancels to zero is still an entry, as in
 * torch.sparse.mm), and
 *     Cptr[r] = number of entries of C in global rows before r    (r = k*n + i),
 * Cptr of batch*n+1 int64: the row pointers spgemm.c fills the product into.
 * Both structures are checked first (csr_check.c); each row counts its distinct
 * columns in a bitmap of the m columns, or past 2^26 columns a row accumulator
 * (tsgu_accum.h); rows split by work (spgemm_split.c). */
#include "tsgu.h"
#include "tsgu_accum.h"
#include "tsgu_parallel.h"

#define TSGU_COUNT_MAX_BITS ((int64_t)1 << 26)   /* a thread's bitmap: 8 MiB at most */

typedef struct {
    const tsgu_csr *A, *B;
    int64_t *Cptr;
    const int64_t *bounds;
} count_ctx;

#define TSGU_INDEX_ONLY 1
#define TSGU_TEMPLATE_FILE "spgemm_count.c"
#include "tsgu_template.h"

int tsgu_spgemm_count(const tsgu_csr *A, const tsgu_csr *B, int64_t *Cptr, int nthreads)
{
    int64_t bounds[TSGU_MAX_THREADS + 1], R = A->batch * A->nrows;
    int status = tsgu_csr_check(A, nthreads);
    if (status == TSGU_OK) status = tsgu_csr_check(B, nthreads);
    if (status != TSGU_OK) return status;
    int64_t T = tsgu_split_product_rows(A, B, nthreads, nthreads, bounds);
    if (T < 0) return TSGU_ENOMEM;
    count_ctx x = {A, B, Cptr, bounds};
    status = tsgu_parallel_tasks(T, TSGU_PICK_INDEX(count_rows, A->itype), &x);
    if (status != TSGU_OK) return status;
    Cptr[0] = 0;
    for (int64_t r = 0; r < R; r++) Cptr[r + 1] += Cptr[r];
    return TSGU_OK;
}

#else /* template body: idx_t and TSGU_FN (real_t unused) */

#define TSGU_SPGEMM_ROWS 1
#include "tsgu_rows.h"

/* Cptr[r + 1] = the number of columns of global row r, for the rows of chunk t: each
 * column's bit set in a bitmap of the m columns (cleared again by a second walk over
 * the row's products, then in cache), or for m past TSGU_COUNT_MAX_BITS, a table */
static int TSGU_FN(count_rows)(void *ctx, int64_t t)
{
    const count_ctx *x = ctx;
    const tsgu_csr *A = x->A, *B = x->B;
    const idx_t *Aj = A->col, *Bj = B->col;
    int64_t n = A->nrows, m = B->ncols;
    tsgu_accum acc = {0};
    uint64_t *bits = m <= TSGU_COUNT_MAX_BITS ? calloc((size_t)(m / 64 + 1), sizeof *bits) : NULL;
    int status = m <= TSGU_COUNT_MAX_BITS && !bits ? TSGU_ENOMEM : TSGU_OK;
    for (int64_t r = x->bounds[t]; r < x->bounds[t + 1] && status == TSGU_OK; r++) {
        int64_t k = r / n, i = r - k * n, start, end, bs, be, want = 0, count = 0;
        TSGU_FN(row_entries)(A, k, i, &start, &end);
        for (int64_t e = start; e < end; e++) {        /* an upper bound, and B's rows on their way */
            TSGU_FN(prefetch_brow)(A, B, k, e, NULL);
            TSGU_FN(row_entries)(B, k, Aj[e], &bs, &be);
            want += be - bs;
        }
        if (bits) {
            for (int64_t e = start; e < end; e++) {
                TSGU_FN(row_entries)(B, k, Aj[e], &bs, &be);
                for (int64_t f = bs; f < be; f++) {
                    uint64_t *w = bits + (Bj[f] >> 6), bit = UINT64_C(1) << (Bj[f] & 63);
                    count += !(*w & bit);
                    *w |= bit;
                }
            }
            for (int64_t e = start; e < end; e++) {
                TSGU_FN(row_entries)(B, k, Aj[e], &bs, &be);
                for (int64_t f = bs; f < be; f++) bits[Bj[f] >> 6] = 0;
            }
        } else if (want && (status = tsgu_accum_reset(&acc, want, m)) == TSGU_OK) {
            for (int64_t e = start; e < end; e++) {
                TSGU_FN(row_entries)(B, k, Aj[e], &bs, &be);
                for (int64_t f = bs; f < be; f++) {
                    int64_t c = Bj[f], s = tsgu_accum_slot(&acc, c);
                    count += acc.key[s] < 0;
                    acc.key[s] = c;
                }
            }
        }
        x->Cptr[r + 1] = count;
    }
    free(bits);
    tsgu_accum_free(&acc);
    return status;
}

#endif
