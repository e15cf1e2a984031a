/* glue_reduce.c: the entry points of sparse_mm's amax/amin kernels (spmm_arg.c,
 * spmm_t_arg.c, sddmm_arg.c).  reduce="mean" runs the kernels of glue_mm.c with
 * their mean flag. */
#include "glue.h"

/* arg: int32, contiguous, (batch, n, p) or for batch 1 (n, p): one per output
 * element; -1 with a ValueError if not */
static int arg_array(const held *h, int64_t batch, int64_t n, int64_t p)
{
    const DLTensor *t = dl(h);
    int ok = t->dtype.code == kDLInt && t->dtype.bits == 32 && t->dtype.lanes == 1 &&
             ((t->ndim == 3 && t->shape[0] == batch && t->shape[1] == n && t->shape[2] == p) ||
              (t->ndim == 2 && batch == 1 && t->shape[0] == n && t->shape[1] == p));
    if (!ok) {
        PyErr_Format(PyExc_ValueError, "%s must be int32 of shape (%lld, %lld, %lld)", h->name, (long long)batch,
                     (long long)n, (long long)p);
        return -1;
    }
    return need_contiguous(h);
}

/* ---- spmm_arg(ptr, col, val, batch, n, m, B, C, arg_or_None, is_min, nthreads) ----
 * C[k][i,t] = max (min with is_min) over the entries e of row i of A.val[e] * B[k][col[e],t];
 * arg (batch, n, p) int32, or None when not wanted: the offset of e in its row, -1 for none. */
PyObject *py_spmm_arg(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *o[6];
    long long batch, n, m;
    int is_min, nthreads, status;
    call c = {0};
    tsgu_csr A;
    tsgu_dense B, C;
    if (!PyArg_ParseTuple(args, "OOOLLLOOOpi", &o[0], &o[1], &o[2], &batch, &n, &m, &o[3], &o[4], &o[5],
                          &is_min, &nthreads))
        return NULL;
    int has_arg = o[5] != Py_None;
    const char *names[6] = {"crow_indices", "col_indices", "values", "B", "out", "arg"};
    const held *h = c.t;
    if (take_all(&c, o, names, 5 + has_arg) || make_csr(&h[0], &h[1], &h[2], batch, n, m, &A, 1) ||
        make_dense(&h[3], batch, m, last_dim(&h[4]), A.rtype, &B) ||
        make_dense(&h[4], batch, n, last_dim(&h[4]), A.rtype, &C) || need_contiguous(&h[4]) ||
        (has_arg && arg_array(&h[5], batch, n, C.cols)))
        return finish(&c, -1);
    int32_t *arg = has_arg ? data_of(&h[5]) : NULL;
    Py_BEGIN_ALLOW_THREADS
    status = tsgu_spmm_arg(&A, &B, &C, arg, is_min, nthreads);
    Py_END_ALLOW_THREADS
    return finish(&c, status);
}

/* ---- spmm_t_arg(ptr, col, val, batch, n, m, arg, G, out, nthreads) ----
 * out[k][j,t] = sum of A.val[e] * G[k][i,t] over the rows i whose arg entry e of column t
 * lies in column j: grad_B of spmm_arg; G (batch, n, p), out (batch, m, p). */
PyObject *py_spmm_t_arg(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *o[6];
    long long batch, n, m;
    int nthreads, status;
    call c = {0};
    tsgu_csr A;
    tsgu_dense G, out;
    if (!PyArg_ParseTuple(args, "OOOLLLOOOi", &o[0], &o[1], &o[2], &batch, &n, &m, &o[3], &o[4], &o[5],
                          &nthreads))
        return NULL;
    const char *names[6] = {"crow_indices", "col_indices", "values", "arg", "grad", "out"};
    const held *h = c.t;
    if (take_all(&c, o, names, 6) || make_csr(&h[0], &h[1], &h[2], batch, n, m, &A, 1) ||
        make_dense(&h[4], batch, n, last_dim(&h[5]), A.rtype, &G) ||
        make_dense(&h[5], batch, m, last_dim(&h[5]), A.rtype, &out) || need_contiguous(&h[5]) ||
        arg_array(&h[3], batch, n, out.cols))
        return finish(&c, -1);
    const int32_t *arg = data_of(&h[3]);
    Py_BEGIN_ALLOW_THREADS
    status = tsgu_spmm_t_arg(&A, arg, &G, &out, nthreads);
    Py_END_ALLOW_THREADS
    return finish(&c, status);
}

/* ---- sddmm_arg(ptr, col, batch, n, m, arg, G, B, out, nthreads) ----
 * out[e] = sum of G[k][i,t] * B[k][col[e],t] over the columns t whose arg is e: grad of
 * spmm_arg w.r.t. A's values, shaped like col (out's dtype that of G and B). */
PyObject *py_sddmm_arg(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *o[6];
    long long batch, n, m;
    int nthreads, status;
    call c = {0};
    tsgu_csr A;
    tsgu_dense G, B;
    if (!PyArg_ParseTuple(args, "OOLLLOOOOi", &o[0], &o[1], &batch, &n, &m, &o[2], &o[3], &o[4], &o[5],
                          &nthreads))
        return NULL;
    const char *names[6] = {"crow_indices", "col_indices", "arg", "grad", "B", "out"};
    const held *h = c.t;
    /* out is checked as the value array of the pattern: one value per entry */
    if (take_all(&c, o, names, 6) || make_csr(&h[0], &h[1], &h[5], batch, n, m, &A, 1) ||
        make_dense(&h[3], batch, n, last_dim(&h[3]), A.rtype, &G) ||
        make_dense(&h[4], batch, m, last_dim(&h[3]), A.rtype, &B) || arg_array(&h[2], batch, n, G.cols))
        return finish(&c, -1);
    const int32_t *arg = data_of(&h[2]);
    Py_BEGIN_ALLOW_THREADS
    status = tsgu_sddmm_arg(&A, arg, &G, &B, (void *)A.val, nthreads);
    Py_END_ALLOW_THREADS
    return finish(&c, status);
}
