/* glue_softmax.c: the entry points of sparse_softmax and sparse_log_softmax
 * (softmax_rows.c, softmax_grad.c). */
#include "glue.h"

/* an array of `heads` values per stored entry of A, (nnz, heads) contiguous, of A's value type */
static int entry_array(const held *h, const tsgu_csr *A, long long heads)
{
    tsgu_dense D;
    return make_dense(h, 1, A->nnz, heads, A->rtype, &D) || need_contiguous(h);
}

/* the number of heads: at least 1 */
static int check_heads(long long heads)
{
    if (heads >= 1) return 0;
    PyErr_SetString(PyExc_ValueError, "heads must be at least 1");
    return -1;
}

/* ---- softmax_rows(ptr, col, val, batch, n, m, heads, log, cols_checked, out, nthreads) ----
 * val, out (nnz, heads): the softmax (log-softmax with log) of every row's stored
 * values, each head on its own; the columns are checked unless cols_checked (the
 * caller has checked them: a COO tensor's indices). */
static int softmax_rows_check(frame *f)
{
    const arg *a = f->a;
    long long heads = a[6].L;
    if (check_heads(heads) || make_csr(a[0].t, a[1].t, NULL, a[3].L, a[4].L, a[5].L, &f->A, 1)) return -1;
    int rt = real_type(a[2].t, 1);
    if (rt < 0) return -1;
    f->A.rtype = rt;
    f->A.val = data_of(a[2].t);
    return entry_array(a[2].t, &f->A, heads) || entry_array(a[9].t, &f->A, heads);
}
static int softmax_rows_kernel(frame *f)
{
    const arg *a = f->a;
    return tsgu_softmax_rows(&f->A, a[6].L, a[7].i, !a[8].i, data_of(a[9].t), a[10].i);
}

/* ---- softmax_grad(ptr, col, batch, n, m, heads, y, g, log, out, nthreads) ----
 * y, g, out (nnz, heads): out = the gradient w.r.t. the values of y = softmax_rows
 * (log: log-softmax) for y's gradient g. */
static int softmax_grad_check(frame *f)
{
    const arg *a = f->a;
    long long heads = a[5].L;
    if (check_heads(heads) || make_csr(a[0].t, a[1].t, NULL, a[2].L, a[3].L, a[4].L, &f->A, 1)) return -1;
    int rt = real_type(a[6].t, 1);
    if (rt < 0) return -1;
    f->A.rtype = rt;
    return entry_array(a[6].t, &f->A, heads) || entry_array(a[7].t, &f->A, heads) || entry_array(a[9].t, &f->A, heads);
}
static int softmax_grad_kernel(frame *f)
{
    const arg *a = f->a;
    return tsgu_softmax_grad(&f->A, a[5].L, data_of(a[6].t), data_of(a[7].t), a[8].i, data_of(a[9].t), a[10].i);
}

ENTRY(softmax_rows, "tttLLLLppti", softmax_rows_check, softmax_rows_kernel, NULL, CSR_NAMES, "values", "out")
ENTRY(softmax_grad, "ttLLLLttpti", softmax_grad_check, softmax_grad_kernel, NULL, CSR_NAMES, "y", "grad", "out")

PyMethodDef glue_softmax[] = {
    METHOD(softmax_rows, "softmax_rows(crow, col, values, batch, n, m, heads, log, cols_checked, out, nthreads)"),
    METHOD(softmax_grad, "softmax_grad(crow, col, batch, n, m, heads, y, grad, log, out, nthreads)"),
    {NULL, NULL, 0, NULL}};
