#ifndef TSGU_IN_TEMPLATE
/* softmax_rows.c: softmax, or log-softmax, over the stored entries of every row
 * of a sparse matrix (each item of a batch), for each of H heads
 *     y_eh = exp(v_eh - M_rh) / S_rh        (log: y_eh = (v_eh - M_rh) - log S_rh)
 *     M_rh = max_{f in row r} v_fh,  S_rh = sum_{f in row r} exp(v_fh - M_rh)
 * for every entry e of global row r = k*n + i and head h; the values are
 * (nnz, H), v_eh at e*H + h (H = 1: one value per entry).  Absent entries are
 * left out (an empty row has nothing to write).  The columns are only checked
 * (in range, increasing in a row), unless the caller has checked them already
 * (a COO tensor's indices, checked as its row pointers were built, or the rows of
 * a transpose's pattern: skipping them spares a third of the memory traffic).
 * Each row is computed by tsgu_softmax.h (how, and what becomes of infinities and
 * NaNs, is said there), by one thread, so the bits do not depend on the thread
 * count.  16-bit values are computed in float and rounded once. */
#include "tsgu.h"
#include "tsgu_parallel.h"
#include "tsgu_exp.h" /* last: its pragmas apply to the rest of the file */

typedef struct {
    const tsgu_csr *A;
    int64_t heads;  /* H: values and y are (nnz, H) */
    int is_log;     /* 1: log-softmax */
    int check_cols; /* 1: check the columns (0: the caller has) */
    void *out;     /* y, (nnz, H), in A's entry order */
} softmax_rows_ctx;

#define TSGU_HALF_TOO 1
#define TSGU_TEMPLATE_FILE "softmax_rows.c"
#include "tsgu_template.h"

int tsgu_softmax_rows(const tsgu_csr *A, int64_t heads, int is_log, int check_cols, void *out, int nthreads)
{
    softmax_rows_ctx x = {A, heads, is_log, check_cols, out};
    return tsgu_parallel_rows(A, 8 * heads, nthreads, TSGU_PICK_HALF(softmax_rows_range, A->rtype, A->itype), &x);
}

#else /* template body: real_t, acc_t, idx_t, TSGU_LOAD, TSGU_STORE, TSGU_FN */

#include "tsgu_rows.h"
#include "tsgu_softmax.h"

TSGU_ISA_ATTR static int TSGU_FN(softmax_rows_range)(void *vctx, int64_t r0, int64_t r1)
{
    const softmax_rows_ctx *x = vctx;
    const tsgu_csr *A = x->A;
    const idx_t *Aj = A->col;
    const real_t *Ax = A->val;
    real_t *out = x->out;
    const int64_t n = A->nrows, m = A->ncols, H = x->heads;
    /* softmax of a full-width type: the exps go straight into y, scaled by 1/sum after */
    const int keep = !x->is_log && !TSGU_NARROW;
    TSGU_FN(softmax_walk) w = {.keep = keep, .is_log = x->is_log};
    for (int64_t r = r0; r < r1; r++) {
        int64_t k = tsgu_item_of(A, r), i = r - k * n, start, end, prev = -1;
        if (!TSGU_FN(row_entries)(A, k, i, &start, &end)) return TSGU_EPTR_ORDER;
        for (int64_t e = start; x->check_cols && e < end; e++) {
            int64_t j = Aj[e];
            if (j <= prev || j >= m) return tsgu_col_error(j, m);
            prev = j;
        }
        if (start == end) continue;
        if (H == 1) TSGU_FN(softmax_rows_add)(&w, Ax + start, out + start, end - start);
        else TSGU_FN(softmax_row)(Ax + start * H, out + start * H, end - start, H, keep, x->is_log);
    }
    TSGU_FN(softmax_rows_end)(&w);
    return TSGU_OK;
}

#endif
