#ifndef TSGU_IN_TEMPLATE
/* spmm.c: sparse times dense, C = A*B, for each item k of a batch
 *     C[k][i,:] = sum_e A.val[e] * B[k][A.col[e],:]   (e over the entries of row i)
 * and with A.row_mean (reduce="mean") that sum divided by the row's number of
 * entries (0 for an empty row).  Each output row is summed by one thread in
 * entry order, so the result does not depend on the thread count; 16-bit
 * values are summed in float and rounded once. */
#include "tsgu.h"
#include "tsgu_advise.h"
#include "tsgu_parallel.h"
#include "tsgu_prefetch.h"

typedef struct {
    const tsgu_csr *A;
    const tsgu_dense *B;
    tsgu_dense *C;
} spmm_ctx;

#define TSGU_PBLOCK 64 /* columns of C summed at once, in registers for constant widths */

#define TSGU_HALF_TOO 1
#define TSGU_TEMPLATE_FILE "spmm.c"
#include "tsgu_template.h"

int tsgu_spmm(const tsgu_csr *A, const tsgu_dense *B, tsgu_dense *C, int nthreads)
{
    spmm_ctx x = {A, B, C};
    tsgu_advise_output(C->data, tsgu_dense_span(C));
    tsgu_rows_fn fn = TSGU_PICK_HALF(spmm_rows, A->rtype, A->itype);
    return tsgu_parallel_rows(A, C->cols, nthreads, fn, &x);
}

#else /* template body: real_t, acc_t, idx_t, TSGU_FN, ... (tsgu_template_types.h) */

#include "tsgu_rows.h"

/* C[i, t0:t0+w] = sum_e A.val[e] * B[A.col[e], t0:t0+w] over the entries
 * [start, end) of one row; inlined with w constant for full blocks and the
 * common widths, so the accumulator lives in registers, not in C */
TSGU_ISA_ATTR TSGU_ALWAYS_INLINE int TSGU_FN(spmm_block)(const spmm_ctx *x, int64_t start, int64_t end,
                                                         const real_t *Bk, real_t *restrict c,
                                                         int64_t t0, const int64_t w)
{
    const idx_t *Aj = x->A->col;
    const real_t *Ax = x->A->val;
    int64_t m = x->A->ncols, nnz = x->A->nnz, ldb = x->B->rstride;
    const int64_t ahead = tsgu_prefetch_ahead(w, sizeof(real_t));
    acc_t acc[TSGU_PBLOCK];
    for (int64_t t = 0; t < w; t++) acc[t] = 0;
    int64_t prev = -1;
    for (int64_t e = start; e < end; e++) {
        int64_t j = Aj[e];
        if (j <= prev || j >= m) return tsgu_col_error(j, m);
        prev = j;
        if (e + ahead < nnz) TSGU_PREFETCH_ROW(Bk, Aj[e + ahead], m, ldb, t0, w); /* B row soon */
        const acc_t a = TSGU_LOAD(Ax[e]);
        const real_t *restrict b = Bk + j * ldb + t0;
        for (int64_t t = 0; t < w; t++) acc[t] += a * TSGU_LOAD(b[t]);   /* acc += a * B[j,:] */
    }
    if (x->A->row_mean && end > start) {
        const acc_t count = (acc_t)(end - start);
        for (int64_t t = 0; t < w; t++) acc[t] /= count;
    }
    for (int64_t t = 0; t < w; t++) c[t0 + t] = TSGU_STORE(acc[t]);
    return TSGU_OK;
}

/* rows [r0, r1) of C, p columns, in blocks of TSGU_PBLOCK columns and a last
 * narrower one; inlined with p constant for the common widths.  The rows are
 * walked item by item, so no row divides to find its item, and each row
 * pointer is read once: a row ends where the next starts.  The pointer checks
 * are row_entries' (0 <= ptr[q] <= ptr[q+1] <= entries left after the item's
 * offset), made along the chain: the first pointer's sign once per item, then
 * each end against its start and the item's top. */
TSGU_ISA_ATTR TSGU_ALWAYS_INLINE int TSGU_FN(spmm_range)(const spmm_ctx *x, int64_t r0, int64_t r1,
                                                         const int64_t p)
{
    const tsgu_csr *A = x->A;
    const real_t *Bx = x->B->data;
    real_t *Cx = x->C->data;
    int64_t n = A->nrows, bsb = x->B->bstride, bsc = x->C->bstride, ldc = x->C->rstride;
    for (int64_t k = r0 / n, i = r0 - k * n, r = r0; r < r1; k++, i = 0) {
        const idx_t *Ap = (const idx_t *)A->ptr + k * A->ptr_stride;
        int64_t stop = r1 - r < n - i ? i + (r1 - r) : n; /* rows [i, stop) of item k */
        int64_t off = k * A->entry_stride, top = A->nnz - off, start = Ap[i];
        const real_t *Bk = Bx + k * bsb;
        real_t *c = Cx + k * bsc + i * ldc;
        if (start < 0) return TSGU_EPTR_ORDER;
        for (r += stop - i; i < stop; i++, c += ldc) {
            int64_t end = Ap[i + 1], t0 = 0;
            if (end < start || end > top) return TSGU_EPTR_ORDER;
            int status = TSGU_OK;
            for (; t0 + TSGU_PBLOCK <= p && status == TSGU_OK; t0 += TSGU_PBLOCK)
                status = TSGU_FN(spmm_block)(x, start + off, end + off, Bk, c, t0, TSGU_PBLOCK);
            if (t0 < p && status == TSGU_OK) status = TSGU_FN(spmm_block)(x, start + off, end + off, Bk, c, t0, p - t0);
            if (status != TSGU_OK) return status;
            start = end;
        }
    }
    return TSGU_OK;
}

TSGU_ISA_ATTR static int TSGU_FN(spmm_rows)(void *vctx, int64_t r0, int64_t r1)
{
    const spmm_ctx *x = vctx;
    TSGU_BY_WIDTH(x->C->cols, TSGU_FN(spmm_range), x, r0, r1)
}

#endif
