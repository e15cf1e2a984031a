/* glue_spgemm.c: the entry points of sparse_mm's sparse @ sparse kernels
 * (spgemm.c, spgemm_grad.c).  Every batch item
 * is A[k] n x l times B[k] l x m; the sparse operands share one index type. */
#include "glue.h"

/* -1 with a TypeError unless Y has X's index type */
static int same_index(const tsgu_csr *X, const tsgu_csr *Y, const char *name)
{
    if (X->itype == Y->itype) return 0;
    PyErr_Format(PyExc_TypeError, "%s must have the index dtype of A", name);
    return -1;
}

/* a contiguous int64 array of `want` elements; -1 with a ValueError if not */
static int int64_array(const held *h, int64_t want)
{
    const DLTensor *t = dl(h);
    if (t->dtype.code == kDLInt && t->dtype.bits == 64 && t->dtype.lanes == 1 && t->ndim == 1 &&
        t->shape[0] == want)
        return need_contiguous(h);
    PyErr_Format(PyExc_ValueError, "%s must be int64 of shape (%lld,)", h->name, (long long)want);
    return -1;
}

/* the upstream gradient G of C (batch x n x m): sparse (ptr, col, val held at h[0..2],
 * into *G) when has_col, else dense (h[0], into *Gd); the sparse one's index type A's */
static int take_grad(const held *h, int has_col, const tsgu_csr *A, int64_t batch, int64_t n, int64_t m,
                     tsgu_csr *G, tsgu_dense *Gd)
{
    if (has_col)
        return make_csr(&h[0], &h[1], &h[2], batch, n, m, G, 1) || same_index(A, G, "grad") ||
               (G->rtype != A->rtype ? (PyErr_SetString(PyExc_TypeError, "grad must have the dtype of the "
                                                                         "sparse values"), -1) : 0);
    return make_dense(&h[0], batch, n, m, A->rtype, Gd);
}

/* ---- spgemm(Aptr, Acol, Aval, Bptr, Bcol, Bval, batch, n, l, m, Cptr, alloc, nthreads) ----
 * A @ B, computed once (spgemm.c); then alloc(nnz) gives its outputs (Cidx, Cval), which
 * come back filled, with the row pointers Cptr (batch*n+1, int64): Cidx is the columns
 * (nnz,) int64 or (for m < 2^31) int32, or a COO index array (2 or 3, nnz) int64 whose
 * last row gets the columns and the rows before it each entry's row (and batch item). */
static int write_product(call *c, const tsgu_spgemm_work *work, PyObject *out, int64_t nnzC, tsgu_real rtype,
                         long long m)
{
    const held *h = c->t;
    PyObject *o[2];
    const char *names[2] = {"out indices", "out values"};
    if (!PyTuple_Check(out) || PyTuple_Size(out) != 2) {
        PyErr_SetString(PyExc_TypeError, "alloc must return (indices, values)");
        return -1;
    }
    o[0] = PyTuple_GetItem(out, 0);
    o[1] = PyTuple_GetItem(out, 1);
    if (take_all(c, o, names, 2)) return -1;
    const DLTensor *I = dl(&h[7]), *V = dl(&h[8]);
    int rows = I->ndim == 2 ? (int)I->shape[0] : 1;
    int col32 = I->ndim == 1 && I->dtype.bits == 32 && m < INT32_MAX;
    if (!(I->ndim == 1 || (I->ndim == 2 && (rows == 2 || rows == 3))) || I->dtype.code != kDLInt ||
        (I->dtype.bits != 64 && !col32) || I->dtype.lanes != 1 || I->shape[I->ndim - 1] != nnzC) {
        PyErr_SetString(PyExc_ValueError, "out indices must be int64 of shape (nnz,), (2, nnz) or (3, nnz), "
                                          "or int32 of shape (nnz,) where the columns fit");
        return -1;
    }
    if (need_contiguous(&h[7]) || need_contiguous(&h[8])) return -1;
    if (real_type(&h[8], 1) != (int)rtype || V->ndim != 1 || V->shape[0] != nnzC) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "out values must have A's dtype, one per entry");
        return -1;
    }
    int64_t *idx = col32 ? NULL : data_of(&h[7]);   /* rows of a (rows, nnz) array: (item,) row, column */
    int64_t *col = col32 ? NULL : idx + (rows - 1) * nnzC, *row = rows > 1 ? idx + (rows - 2) * nnzC : NULL;
    int64_t *item = rows > 2 ? idx : NULL;
    int32_t *col_32 = col32 ? data_of(&h[7]) : NULL;
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = tsgu_spgemm_write(work, data_of(&h[6]), col, col_32, row, item, data_of(&h[8]));
    Py_END_ALLOW_THREADS
    return status;
}

PyObject *py_spgemm(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *o[7], *alloc, *out = NULL;
    long long batch, n, l, m;
    int nthreads, status;
    int64_t nnzC = 0;
    call c = {0};
    tsgu_csr A, B;
    tsgu_spgemm_work *work = NULL;
    if (!PyArg_ParseTuple(args, "OOOOOOLLLLOOi", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &batch, &n, &l, &m,
                          &o[6], &alloc, &nthreads))
        return NULL;
    const char *names[7] = {"A's crow_indices", "A's col_indices", "A's values", "B's crow_indices",
                            "B's col_indices", "B's values", "out crow_indices"};
    const held *h = c.t;
    if (take_all(&c, o, names, 7) || make_csr(&h[0], &h[1], &h[2], batch, n, l, &A, 1) ||
        make_csr(&h[3], &h[4], &h[5], batch, l, m, &B, 1) || same_index(&A, &B, "B") ||
        int64_array(&h[6], batch * n + 1))
        return finish(&c, -1);
    if (B.rtype != A.rtype) {
        PyErr_SetString(PyExc_TypeError, "A and B must have one dtype");
        return finish(&c, -1);
    }
    Py_BEGIN_ALLOW_THREADS
    status = tsgu_spgemm(&A, &B, &work, &nnzC, nthreads);
    Py_END_ALLOW_THREADS
    if (status == TSGU_OK) status = (out = PyObject_CallFunction(alloc, "L", (long long)nnzC)) ? 0 : -1;
    if (status == TSGU_OK) status = write_product(&c, work, out, nnzC, A.rtype, m);
    tsgu_spgemm_done(work);
    PyObject *none = finish(&c, status);   /* None, or NULL with the exception */
    if (!none) {
        Py_XDECREF(out);
        return NULL;
    }
    Py_DECREF(none);
    return out;
}

/* ---- spgemm_grad(Aptr, Acol, Aval, Bptr, Bcol, Bval, batch, n, l, m, G, Gcol, Gval, gA, gB, nthreads) ----
 * gA (shaped like Acol) and gB (like Bcol), each or None: the gradients of A @ B w.r.t.
 * A's and B's values; G is the dense upstream gradient (Gcol and Gval None) or the
 * row pointers of a sparse one. */
PyObject *py_spgemm_grad(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *o[11];
    long long batch, n, l, m;
    int nthreads, status;
    call c = {0};
    tsgu_csr A, B, G, gA = {0}, gB = {0};
    tsgu_dense Gd;
    if (!PyArg_ParseTuple(args, "OOOOOOLLLLOOOOOi", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &batch, &n, &l, &m,
                          &o[6], &o[7], &o[8], &o[9], &o[10], &nthreads))
        return NULL;
    int sparse = o[7] != Py_None, want_a = o[9] != Py_None, want_b = o[10] != Py_None;
    if (sparse != (o[8] != Py_None)) {
        PyErr_SetString(PyExc_ValueError, "grad's col_indices and values are both given or both None");
        return NULL;
    }
    /* the objects in the order they are held: A, B, G's one or three, then gA and gB where given */
    PyObject *obj[11];
    const char *names[11];
    int count = 0;
    const char *all[11] = {"A's crow_indices", "A's col_indices", "A's values", "B's crow_indices",
                           "B's col_indices", "B's values", "grad", "grad's col_indices", "grad's values", "grad_A",
                           "grad_B"};
    for (int q = 0; q < 11; q++)
        if (q < 7 || (q < 9 && sparse) || (q == 9 && want_a) || (q == 10 && want_b)) {
            obj[count] = o[q];
            names[count++] = all[q];
        }
    const held *h = c.t, *ha = &h[sparse ? 9 : 7], *hb = ha + want_a;
    if (take_all(&c, obj, names, count) || make_csr(&h[0], &h[1], &h[2], batch, n, l, &A, 1) ||
        make_csr(&h[3], &h[4], &h[5], batch, l, m, &B, 1) || same_index(&A, &B, "B") ||
        (B.rtype != A.rtype ? (PyErr_SetString(PyExc_TypeError, "A and B must have one dtype"), 1) : 0) ||
        take_grad(&h[6], sparse, &A, batch, n, m, &G, &Gd) ||
        /* each gradient is checked as its operand's values: one per stored entry, the dtype */
        (want_a && make_csr(&h[0], &h[1], ha, batch, n, l, &gA, 1)) ||
        (want_b && make_csr(&h[3], &h[4], hb, batch, l, m, &gB, 1)) ||
        (want_a && gA.rtype != A.rtype) || (want_b && gB.rtype != A.rtype)) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "grad_A and grad_B must have the dtype of A");
        return finish(&c, -1);
    }
    Py_BEGIN_ALLOW_THREADS
    status = tsgu_spgemm_grad(&A, &B, sparse ? &G : NULL, &Gd, want_a ? (void *)gA.val : NULL,
                              want_b ? (void *)gB.val : NULL, nthreads);
    Py_END_ALLOW_THREADS
    return finish(&c, status);
}
