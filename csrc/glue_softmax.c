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
PyObject *py_softmax_rows(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *o[4];
    long long batch, n, m, heads;
    int is_log, cols_checked, nthreads, status;
    call c = {0};
    tsgu_csr A;
    if (!PyArg_ParseTuple(args, "OOOLLLLppOi", &o[0], &o[1], &o[2], &batch, &n, &m, &heads, &is_log,
                          &cols_checked, &o[3], &nthreads))
        return NULL;
    const char *names[4] = {"crow_indices", "col_indices", "values", "out"};
    const held *h = c.t;
    if (check_heads(heads) || take_all(&c, o, names, 4) || make_csr(&h[0], &h[1], NULL, batch, n, m, &A, 1))
        return finish(&c, -1);
    int rt = real_type(&h[2], 1);
    if (rt < 0) return finish(&c, -1);
    A.rtype = rt;
    A.val = data_of(&h[2]);
    if (entry_array(&h[2], &A, heads) || entry_array(&h[3], &A, heads)) return finish(&c, -1);
    void *out = data_of(&h[3]);
    Py_BEGIN_ALLOW_THREADS
    status = tsgu_softmax_rows(&A, heads, is_log, !cols_checked, out, nthreads);
    Py_END_ALLOW_THREADS
    return finish(&c, status);
}

/* ---- softmax_grad(ptr, col, batch, n, m, heads, y, g, log, out, nthreads) ----
 * y, g, out (nnz, heads): out = the gradient w.r.t. the values of y = softmax_rows
 * (log: log-softmax) for y's gradient g. */
PyObject *py_softmax_grad(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *o[5];
    long long batch, n, m, heads;
    int is_log, nthreads, status;
    call c = {0};
    tsgu_csr A;
    if (!PyArg_ParseTuple(args, "OOLLLLOOpOi", &o[0], &o[1], &batch, &n, &m, &heads, &o[2], &o[3], &is_log,
                          &o[4], &nthreads))
        return NULL;
    const char *names[5] = {"crow_indices", "col_indices", "y", "grad", "out"};
    const held *h = c.t;
    if (check_heads(heads) || take_all(&c, o, names, 5) || make_csr(&h[0], &h[1], NULL, batch, n, m, &A, 1))
        return finish(&c, -1);
    int rt = real_type(&h[2], 1);
    if (rt < 0) return finish(&c, -1);
    A.rtype = rt;
    if (entry_array(&h[2], &A, heads) || entry_array(&h[3], &A, heads) || entry_array(&h[4], &A, heads))
        return finish(&c, -1);
    const void *y = data_of(&h[2]), *g = data_of(&h[3]);
    void *out = data_of(&h[4]);
    Py_BEGIN_ALLOW_THREADS
    status = tsgu_softmax_grad(&A, heads, y, g, is_log, out, nthreads);
    Py_END_ALLOW_THREADS
    return finish(&c, status);
}
