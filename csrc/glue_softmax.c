/* glue_softmax.c: the entry points of sparse_softmax and sparse_log_softmax
 * (softmax_rows.c, softmax_coo.c, softmax_grad.c; softmax_cols.c, softmax_cols_grad.c). */
#include "glue.h"
#include <string.h>

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
 * caller has checked them: a COO tensor's indices).
 * ---- softmax_cols(ptr, col, val, batch, n, m, heads, log, out, nthreads) ----
 * the same over every column's stored values, the columns checked. */
static int softmax_check(frame *f, int out)
{
    const arg *a = f->a;
    long long heads = a[6].L;
    if (check_heads(heads) || make_csr(a[0].t, a[1].t, NULL, a[3].L, a[4].L, a[5].L, &f->A, 1)) return -1;
    int rt = real_type(a[2].t, 1);
    if (rt < 0) return -1;
    f->A.rtype = rt;
    f->A.val = data_of(a[2].t);
    return entry_array(a[2].t, &f->A, heads) || entry_array(a[out].t, &f->A, heads);
}
static int softmax_rows_check(frame *f)
{
    return softmax_check(f, 9);
}
static int softmax_rows_kernel(frame *f)
{
    const arg *a = f->a;
    return tsgu_softmax_rows(&f->A, a[6].L, a[7].i, !a[8].i, data_of(a[9].t), a[10].i);
}
static int softmax_cols_check(frame *f)
{
    return softmax_check(f, 8);
}
static int softmax_cols_kernel(frame *f)
{
    const arg *a = f->a;
    return tsgu_softmax_cols(&f->A, a[6].L, a[7].i, data_of(a[8].t), a[9].i);
}

/* ---- softmax_coo(indices, values, sizes, coalesced, log, row_ptr, out, nthreads) -> bool ----
 * softmax_rows of a COO A given by its indices ((2|3, nnz) int64, unit-stride rows)
 * and values (nnz, 1), in one pass over the indices (softmax_coo.c): every index
 * checked, the row pointers written into row_ptr (int64, batch*n+1: A's view) and the
 * softmax (log-softmax with log) into out (nnz, 1).  True when done.  Entries not
 * strictly increasing in (row, col) raise coo_row_ptr's errors where A is flagged
 * coalesced; where it is not, they return False, with out and row_ptr unspecified:
 * the caller takes A's view instead (which coalesces them).  Written out: the status
 * is mapped after the kernel. */
static PyObject *py_softmax_coo(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *oi, *ov, *osizes, *optr, *oout;
    int64_t sizes[3], sd, R, ld, nnz, bad = -1;
    int coalesced, is_log, nthreads, status, rt = -1;
    call c = {0};
    const held *h = c.t;
    tsgu_csr A;
    if (!PyArg_ParseTuple(args, "OOOppOOi", &oi, &ov, &osizes, &coalesced, &is_log, &optr, &oout, &nthreads))
        return NULL;
    if (take_coo(&c, oi, osizes, sizes, &sd, &R, &ld, &nnz) || take(&c, ov, "values") ||
        (rt = real_type(&h[1], 1)) < 0 || take_row_ptr(&c, optr, R) || take(&c, oout, "out"))
        return finish(&c, -1);
    memset(&A, 0, sizeof A);
    A.nnz = nnz;
    A.rtype = rt;
    if (entry_array(&h[1], &A, 1) || entry_array(&h[3], &A, 1)) return finish(&c, -1);
    const int64_t *idx = data_of(&h[0]);
    Py_BEGIN_ALLOW_THREADS
    status = tsgu_softmax_coo(idx, ld, sd, nnz, sizes, data_of(&h[1]), rt, is_log, data_of(&h[2]), data_of(&h[3]),
                              nthreads, &bad);
    Py_END_ALLOW_THREADS
    int done = 1;
    if (!coalesced && (status == TSGU_EIDX_ORDER || status == TSGU_ECOL_ORDER)) {
        status = TSGU_OK;
        done = 0;
    }
    if (status == TSGU_EIDX_RANGE) status = raise_coo_range(idx, ld, sd, sizes, bad);
    PyObject *none = finish(&c, status);
    if (!none) return NULL;
    Py_DECREF(none);
    return PyBool_FromLong(done);
}

/* ---- softmax_grad(ptr, col, batch, n, m, heads, y, g, log, out, nthreads) ----
 * y, g, out (nnz, heads): out = the gradient w.r.t. the values of y = softmax_rows
 * (log: log-softmax) for y's gradient g.
 * ---- softmax_cols_grad(ptr, col, batch, n, m, heads, y, g, log, out, nthreads) ----
 * the same for y = softmax_cols. */
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
static int softmax_cols_grad_kernel(frame *f)
{
    const arg *a = f->a;
    return tsgu_softmax_cols_grad(&f->A, a[5].L, data_of(a[6].t), data_of(a[7].t), a[8].i, data_of(a[9].t),
                                  a[10].i);
}

ENTRY(softmax_rows, "tttLLLLppti", softmax_rows_check, softmax_rows_kernel, NULL, CSR_NAMES, "values", "out")
ENTRY(softmax_grad, "ttLLLLttpti", softmax_grad_check, softmax_grad_kernel, NULL, CSR_NAMES, "y", "grad", "out")
ENTRY(softmax_cols, "tttLLLLpti", softmax_cols_check, softmax_cols_kernel, NULL, CSR_NAMES, "values", "out")
ENTRY(softmax_cols_grad, "ttLLLLttpti", softmax_grad_check, softmax_cols_grad_kernel, NULL, CSR_NAMES, "y", "grad",
      "out")

PyMethodDef glue_softmax[] = {
    METHOD(softmax_rows, "softmax_rows(crow, col, values, batch, n, m, heads, log, cols_checked, out, nthreads)"),
    {"softmax_coo", py_softmax_coo, METH_VARARGS,
     "softmax_coo(indices, values, sizes, coalesced, log, row_ptr, out, nthreads) -> done"},
    METHOD(softmax_grad, "softmax_grad(crow, col, batch, n, m, heads, y, grad, log, out, nthreads)"),
    METHOD(softmax_cols, "softmax_cols(crow, col, values, batch, n, m, heads, log, out, nthreads)"),
    METHOD(softmax_cols_grad, "softmax_cols_grad(crow, col, batch, n, m, heads, y, grad, log, out, nthreads)"),
    {NULL, NULL, 0, NULL}};
