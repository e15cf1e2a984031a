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
static PyObject *lse_either(PyObject *args, int cols)
{
    PyObject *o[5] = {NULL};
    long long batch, n, m;
    int zeros, nthreads, status;
    call c = {0};
    tsgu_csr A;
    tsgu_dense out, item = {0};
    int ok = cols ? PyArg_ParseTuple(args, "OOOLLLpOi", &o[0], &o[1], &o[2], &batch, &n, &m, &zeros,
                                     &o[3], &nthreads)
                  : PyArg_ParseTuple(args, "OOOLLLpOOi", &o[0], &o[1], &o[2], &batch, &n, &m, &zeros,
                                     &o[3], &o[4], &nthreads);
    if (!ok) return NULL;
    int has_item = o[4] && o[4] != Py_None;
    const char *names[5] = {"crow_indices", "col_indices", "values", "out", "item_out"};
    const held *h = c.t;
    if (take_all(&c, o, names, 4 + has_item) || make_csr(&h[0], &h[1], &h[2], batch, n, m, &A, 0))
        return finish(&c, -1);
    int64_t w = dl(&h[3])->ndim == 2 ? dl(&h[3])->shape[1] : -1, need = cols ? m : n;
    if (w < need) {
        PyErr_Format(PyExc_ValueError, "out must be 2D with at least %lld columns", (long long)need);
        return finish(&c, -1);
    }
    if (make_lse_array(&h[3], batch, w, A.rtype, 0, &out) ||
        (has_item && make_lse_array(&h[4], 1, batch, A.rtype, 1, &item)))
        return finish(&c, -1);
    Py_BEGIN_ALLOW_THREADS
    status = cols ? tsgu_lse_cols(&A, zeros, out.data, out.rstride, nthreads)
                  : tsgu_lse_rows(&A, zeros, out.data, out.rstride, item.data, nthreads);
    Py_END_ALLOW_THREADS
    return finish(&c, status);
}

PyObject *py_lse_rows(PyObject *self, PyObject *args)
{
    (void)self;
    return lse_either(args, 0);
}

PyObject *py_lse_cols(PyObject *self, PyObject *args)
{
    (void)self;
    return lse_either(args, 1);
}

/* ---- lse_grad(ptr, col, val, batch, n, m, row_lse, row_grad, col_lse, col_grad, out, nthreads) ----
 * out (1, nnz) = d(sum of row_grad * row lse + col_grad * col lse)/d values; row_lse and
 * row_grad (batch, n) contiguous, or both None; col_lse and col_grad (batch, m), or None. */
PyObject *py_lse_grad(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *o[8];
    long long batch, n, m;
    int nthreads, status;
    call c = {0};
    tsgu_csr A;
    const void *arr[4] = {NULL};
    if (!PyArg_ParseTuple(args, "OOOLLLOOOOOi", &o[0], &o[1], &o[2], &batch, &n, &m, &o[3], &o[4],
                          &o[5], &o[6], &o[7], &nthreads))
        return NULL;
    if ((o[3] == Py_None) != (o[4] == Py_None) || (o[5] == Py_None) != (o[6] == Py_None)) {
        PyErr_SetString(PyExc_ValueError, "row_lse/row_grad and col_lse/col_grad come in pairs");
        return NULL;
    }
    PyObject *objs[4] = {o[0], o[1], o[2], o[7]};
    const char *names[4] = {"crow_indices", "col_indices", "values", "out"};
    const char *opt_names[4] = {"row_lse", "row_grad", "col_lse", "col_grad"};
    const held *h = c.t;
    tsgu_dense D;
    if (take_all(&c, objs, names, 4) || make_csr(&h[0], &h[1], &h[2], batch, n, m, &A, 0) ||
        make_lse_array(&h[3], 1, A.nnz, A.rtype, 1, &D))
        return finish(&c, -1);
    for (int i = 0; i < 4; i++) {
        if (o[3 + i] == Py_None) continue;
        const held *t = &c.t[c.count];
        if (take(&c, o[3 + i], opt_names[i]) || make_lse_array(t, batch, i < 2 ? n : m, A.rtype, 1, &D))
            return finish(&c, -1);
        arr[i] = D.data;
    }
    void *out = data_of(&h[3]);
    Py_BEGIN_ALLOW_THREADS
    status = tsgu_lse_grad(&A, arr[0], arr[1], arr[2], arr[3], out, nthreads);
    Py_END_ALLOW_THREADS
    return finish(&c, status);
}
