/* glue_lse.c: the entry points of sparse_logsumexp (lse_rows.c, lse_cols.c, lse_grad.c). */
#include "glue.h"

/* a (rows, cols) dense view of a log-sum-exp array, contiguous when asked */
static int make_lse_array(const held *h, int64_t rows, int64_t cols, int rt, int contiguous, tsgu_dense *D)
{
    return make_dense(h, 1, rows, cols, rt, D) || (contiguous && need_contiguous(h));
}

/* ---- lse_rows(ptr, col, val, batch, n, m, include_zeros, out, item_out, nthreads) ----
 * out (batch, w >= n): out[k, i] = log-sum-exp of row i of item k; item_out (1, batch)
 * or None: of the whole item.
 * ---- lse_cols(ptr, col, val, batch, n, m, include_zeros, out, nthreads) ----
 * out (batch, w >= m): out[k, j] = log-sum-exp of column j of item k. */
static int lse_either(frame *f, int cols)
{
    const arg *a = f->a;
    const held *out = a[7].t, *item = cols ? NULL : a[8].t;
    long long batch = a[3].L;
    if (make_csr(a[0].t, a[1].t, a[2].t, batch, a[4].L, a[5].L, &f->A, 0)) return -1;
    int64_t w = dl(out)->ndim == 2 ? dl(out)->shape[1] : -1, need = cols ? a[5].L : a[4].L;
    if (w < need) {
        PyErr_Format(PyExc_ValueError, "out must be 2D with at least %lld columns", (long long)need);
        return -1;
    }
    return make_lse_array(out, batch, w, f->A.rtype, 0, &f->X) ||
           (item && make_lse_array(item, 1, batch, f->A.rtype, 1, &f->Y));
}
static int lse_rows_check(frame *f) { return lse_either(f, 0); }
static int lse_cols_check(frame *f) { return lse_either(f, 1); }
static int lse_rows_kernel(frame *f)
{
    return tsgu_lse_rows(&f->A, f->a[6].i, f->X.data, f->X.rstride, f->Y.data, f->a[9].i);
}
static int lse_cols_kernel(frame *f) { return tsgu_lse_cols(&f->A, f->a[6].i, f->X.data, f->X.rstride, f->a[8].i); }

/* ---- lse_grad(ptr, col, val, batch, n, m, row_lse, row_grad, col_lse, col_grad, out, nthreads) ----
 * out (1, nnz) = d(sum of row_grad * row lse + col_grad * col lse)/d values; row_lse and
 * row_grad (batch, n) contiguous, or both None; col_lse and col_grad (batch, m), or None. */
static int lse_grad_check(frame *f)
{
    const arg *a = f->a;
    tsgu_dense D;
    if (!a[6].t != !a[7].t || !a[8].t != !a[9].t) {
        PyErr_SetString(PyExc_ValueError, "row_lse/row_grad and col_lse/col_grad come in pairs");
        return -1;
    }
    if (make_csr(a[0].t, a[1].t, a[2].t, a[3].L, a[4].L, a[5].L, &f->A, 0) ||
        make_lse_array(a[10].t, 1, f->A.nnz, f->A.rtype, 1, &D))
        return -1;
    for (int i = 0; i < 4; i++)
        if (a[6 + i].t && make_lse_array(a[6 + i].t, a[3].L, i < 2 ? a[4].L : a[5].L, f->A.rtype, 1, &D)) return -1;
    return 0;
}
static int lse_grad_kernel(frame *f)
{
    const arg *a = f->a;
    return tsgu_lse_grad(&f->A, data_or_null(a[6].t), data_or_null(a[7].t), data_or_null(a[8].t),
                         data_or_null(a[9].t), data_of(a[10].t), a[11].i);
}

ENTRY(lse_rows, "tttLLLptni", lse_rows_check, lse_rows_kernel, NULL, CSR_NAMES, "values", "out", "item_out")
ENTRY(lse_cols, "tttLLLpti", lse_cols_check, lse_cols_kernel, NULL, CSR_NAMES, "values", "out")
ENTRY(lse_grad, "tttLLLnnnnti", lse_grad_check, lse_grad_kernel, NULL, CSR_NAMES, "values", "row_lse", "row_grad",
      "col_lse", "col_grad", "out")

PyMethodDef glue_lse[] = {
    METHOD(lse_rows, "lse_rows(crow, col, values, batch, n, m, include_zeros, out, item_out, nthreads)"),
    METHOD(lse_cols, "lse_cols(crow, col, values, batch, n, m, include_zeros, out, nthreads)"),
    METHOD(lse_grad, "lse_grad(crow, col, values, batch, n, m, row_lse, row_grad, col_lse, col_grad, out, nthreads)"),
    {NULL, NULL, 0, NULL}};
