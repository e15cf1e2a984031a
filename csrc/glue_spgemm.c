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

/* the upstream gradient G of C (batch x n x m): sparse (ptr, col, val the arguments g[0..2],
 * into *G) when has_col, else dense (g[0], into *Gd); the sparse one's index type A's */
static int take_grad(const arg *g, int has_col, const tsgu_csr *A, int64_t batch, int64_t n, int64_t m,
                     tsgu_csr *G, tsgu_dense *Gd)
{
    if (has_col)
        return make_csr(g[0].t, g[1].t, g[2].t, batch, n, m, G, 1) || same_index(A, G, "grad") ||
               (G->rtype != A->rtype ? (PyErr_SetString(PyExc_TypeError, "grad must have the dtype of the "
                                                                         "sparse values"), -1) : 0);
    return make_dense(g[0].t, batch, n, m, A->rtype, Gd);
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

static PyObject *py_spgemm(PyObject *self, PyObject *args)
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
static int spgemm_grad_check(frame *f)
{
    const arg *a = f->a;
    long long batch = a[6].L, n = a[7].L, l = a[8].L, m = a[9].L;
    const held *ga = a[13].t, *gb = a[14].t;
    tsgu_csr gA, gB;
    if (!a[11].t != !a[12].t) {
        PyErr_SetString(PyExc_ValueError, "grad's col_indices and values are both given or both None");
        return -1;
    }
    if (make_csr(a[0].t, a[1].t, a[2].t, batch, n, l, &f->A, 1) ||
        make_csr(a[3].t, a[4].t, a[5].t, batch, l, m, &f->B, 1) || same_index(&f->A, &f->B, "B") ||
        (f->B.rtype != f->A.rtype ? (PyErr_SetString(PyExc_TypeError, "A and B must have one dtype"), 1) : 0) ||
        take_grad(&a[10], a[11].t != NULL, &f->A, batch, n, m, &f->C, &f->X) ||
        /* each gradient is checked as its operand's values: one per stored entry, the dtype */
        (ga && make_csr(a[0].t, a[1].t, ga, batch, n, l, &gA, 1)) ||
        (gb && make_csr(a[3].t, a[4].t, gb, batch, l, m, &gB, 1)) ||
        (ga && gA.rtype != f->A.rtype) || (gb && gB.rtype != f->A.rtype)) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "grad_A and grad_B must have the dtype of A");
        return -1;
    }
    return 0;
}
static int spgemm_grad_kernel(frame *f)
{
    const arg *a = f->a;
    return tsgu_spgemm_grad(&f->A, &f->B, a[11].t ? &f->C : NULL, &f->X, data_or_null(a[13].t),
                            data_or_null(a[14].t), a[15].i);
}

ENTRY(spgemm_grad, "ttttttLLLLtnnnni", spgemm_grad_check, spgemm_grad_kernel, NULL, "A's crow_indices",
      "A's col_indices", "A's values", "B's crow_indices", "B's col_indices", "B's values", "grad",
      "grad's col_indices", "grad's values", "grad_A", "grad_B")

PyMethodDef glue_spgemm[] = {
    {"spgemm", py_spgemm, METH_VARARGS,
     "spgemm(Aptr, Acol, Aval, Bptr, Bcol, Bval, batch, n, l, m, out_crow, alloc, nthreads) -> alloc(nnz)"},
    METHOD(spgemm_grad, "spgemm_grad(Aptr, Acol, Aval, Bptr, Bcol, Bval, batch, n, l, m, G, Gcol, Gval, grad_A, "
                        "grad_B, nthreads)"),
    {NULL, NULL, 0, NULL}};
