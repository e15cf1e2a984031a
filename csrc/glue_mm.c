/* glue_mm.c: the entry points of sparse_mm's kernels (spmm.c, spmm_t.c, sddmm.c)
 * and of the structures they read (csr_transpose.c, coo_row_ptr.c). */
#include "glue.h"
#include <stdlib.h>
#include <string.h>

/* ---- spmm(ptr, col, val, batch, n, m, B, C, nthreads[, mean]) ----
 * C[k] = A[k] @ B[k]; A is batch x n x m, B (batch, m, p), C (batch, n, p).
 * ---- spmm_t(ptr, col, val, batch, n, m, G, out, nthreads[, mean]) ----
 * out[k] = A[k]^T @ G[k]; G (batch, n, p), out (batch, m, p).
 * With mean (reduce="mean"), A is D^-1 A: each row divided by its entry count. */
static PyObject *spmm_either(PyObject *args, int transposed)
{
    PyObject *o[5];
    long long batch, n, m;
    int nthreads, status, mean = 0;
    call c = {0};
    tsgu_csr A;
    tsgu_dense X, Y;
    if (!PyArg_ParseTuple(args, "OOOLLLOOi|p", &o[0], &o[1], &o[2], &batch, &n, &m, &o[3], &o[4],
                          &nthreads, &mean))
        return NULL;
    const char *names[5] = {"crow_indices", "col_indices", "values", transposed ? "grad" : "B", "out"};
    const held *h = c.t;
    if (take_all(&c, o, names, 5) || make_csr(&h[0], &h[1], &h[2], batch, n, m, &A, 1) ||
        make_dense(&h[3], batch, transposed ? n : m, last_dim(&h[4]), A.rtype, &X) ||
        make_dense(&h[4], batch, transposed ? m : n, last_dim(&h[4]), A.rtype, &Y) ||
        need_contiguous(&h[4]))
        return finish(&c, -1);
    A.row_mean = mean;
    Py_BEGIN_ALLOW_THREADS
    status = transposed ? tsgu_spmm_t(&A, &X, &Y, nthreads) : tsgu_spmm(&A, &X, &Y, nthreads);
    Py_END_ALLOW_THREADS
    return finish(&c, status);
}

PyObject *py_spmm(PyObject *self, PyObject *args)
{
    (void)self;
    return spmm_either(args, 0);
}

PyObject *py_spmm_t(PyObject *self, PyObject *args)
{
    (void)self;
    return spmm_either(args, 1);
}

/* ---- spmm_coo(indices, values, sizes, B, C, rows_per_entry, nthreads) -> bool ----
 * spmm of a COO A given by its indices ((2|3, nnz) int64) and values (nnz,), in one
 * call: its row pointers are built in a workspace, every index checked on the way
 * (coo_row_ptr.c), then spmm runs on them.  False, with C unwritten, where this does
 * not apply and the caller takes A's view instead: entries not strictly increasing in
 * (row, col) (not sorted and unique, whatever A's coalesced flag says: the view
 * coalesces them, or raises the error of a tensor flagged coalesced that is not),
 * index rows not unit-stride, or A hypersparse (more than rows_per_entry * (nnz + 1)
 * rows in its block diagonal). */
PyObject *py_spmm_coo(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *o[4], *osizes;
    int64_t sizes[3], sd, R, ld, nnz, bad = -1;
    long long rows_per_entry;
    int nthreads, status = TSGU_OK, sorted = 0, rt;
    call c = {0};
    tsgu_csr A;
    tsgu_dense X, Y;
    if (!PyArg_ParseTuple(args, "OOOOOLi", &o[0], &o[1], &osizes, &o[2], &o[3], &rows_per_entry, &nthreads) ||
        coo_sizes(osizes, sizes, &sd, &R))
        return NULL;
    const char *names[4] = {"indices", "values", "B", "out"};
    const held *h = c.t;
    if (take_all(&c, o, names, 4) || coo_indices(&h[0], sd, &ld, &nnz) || (rt = real_type(&h[1], 1)) < 0 ||
        need_contiguous(&h[1]))
        return finish(&c, -1);
    if (numel(dl(&h[1])) != nnz) {
        PyErr_Format(PyExc_ValueError, "values must have one value per entry (%lld), got %lld", (long long)nnz,
                     (long long)numel(dl(&h[1])));
        return finish(&c, -1);
    }
    memset(&A, 0, sizeof A);
    A.batch = sd == 3 ? sizes[0] : 1;
    A.nrows = sizes[sd - 2];
    A.ncols = sizes[sd - 1];
    A.nnz = nnz;
    A.ptr_stride = A.nrows;                               /* global layout: R + 1 pointers */
    A.itype = TSGU_I64;
    A.rtype = rt;
    A.val = data_of(&h[1]);
    if (make_dense(&h[2], A.batch, A.ncols, last_dim(&h[3]), rt, &X) ||
        make_dense(&h[3], A.batch, A.nrows, last_dim(&h[3]), rt, &Y) || need_contiguous(&h[3]))
        return finish(&c, -1);
    if (rows_per_entry < 1) {
        PyErr_SetString(PyExc_ValueError, "rows_per_entry must be positive");
        return finish(&c, -1);
    }
    if (ld >= 0 && (R - 1) / rows_per_entry < nnz + 1) {    /* R <= rows_per_entry * (nnz + 1) */
        const int64_t *idx = data_of(&h[0]);
        int64_t *ptr = malloc((size_t)(R + 1) * sizeof *ptr);
        if (!ptr) return finish(&c, TSGU_ENOMEM);
        A.ptr = ptr;
        A.col = idx + (sd - 1) * ld;
        Py_BEGIN_ALLOW_THREADS
        status = tsgu_coo_row_ptr(idx, ld, sd, nnz, sizes, ptr, nthreads, &sorted, &bad);
        if (status == TSGU_OK && sorted) status = tsgu_spmm(&A, &X, &Y, nthreads);
        Py_END_ALLOW_THREADS
        free(ptr);
        if (status == TSGU_EIDX_RANGE) status = raise_coo_range(idx, ld, sd, sizes, bad);
    }
    PyObject *done = finish(&c, status);
    if (!done) return NULL;
    Py_DECREF(done);
    return PyBool_FromLong(sorted);
}

/* ---- sddmm(ptr, col, batch, n, m, G, B, out, nthreads[, mean]) ----
 * out[e] = dot(G[k][i,:], B[k][j,:]) at every stored entry (k, i, j), divided by the
 * entry count of row i with mean (reduce="mean"). */
PyObject *py_sddmm(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *o[5];
    long long batch, n, m;
    int nthreads, status, mean = 0;
    call c = {0};
    tsgu_csr A;
    tsgu_dense G, B;
    if (!PyArg_ParseTuple(args, "OOLLLOOOi|p", &o[0], &o[1], &batch, &n, &m, &o[2], &o[3], &o[4],
                          &nthreads, &mean))
        return NULL;
    const char *names[5] = {"crow_indices", "col_indices", "grad", "B", "out"};
    const held *h = c.t;
    /* out is checked as the value array of the pattern: one float per entry */
    if (take_all(&c, o, names, 5) || make_csr(&h[0], &h[1], &h[4], batch, n, m, &A, 1) ||
        make_dense(&h[2], batch, n, last_dim(&h[2]), A.rtype, &G) ||
        make_dense(&h[3], batch, m, last_dim(&h[2]), A.rtype, &B))
        return finish(&c, -1);
    A.row_mean = mean;
    Py_BEGIN_ALLOW_THREADS
    status = tsgu_sddmm(&A, &G, &B, (void *)A.val, nthreads);
    Py_END_ALLOW_THREADS
    return finish(&c, status);
}

/* ---- csr_check(ptr, col, batch, n, m, nthreads) ----
 * raises ValueError unless (ptr, col) is a well-formed CSR structure */
PyObject *py_csr_check(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *o[2];
    long long batch, n, m;
    int nthreads, status;
    call c = {0};
    tsgu_csr A;
    if (!PyArg_ParseTuple(args, "OOLLLi", &o[0], &o[1], &batch, &n, &m, &nthreads)) return NULL;
    const char *names[2] = {"crow_indices", "col_indices"};
    if (take_all(&c, o, names, 2) || make_csr(&c.t[0], &c.t[1], NULL, batch, n, m, &A, 0))
        return finish(&c, -1);
    Py_BEGIN_ALLOW_THREADS
    status = tsgu_csr_check(&A, nthreads);
    Py_END_ALLOW_THREADS
    return finish(&c, status);
}

/* ---- csr_transpose(ptr, col, batch, n, m, tptr, trow, tperm, nthreads) ----
 * the pattern of every item's transpose, in the global layout (batch*m+1 pointers) */
PyObject *py_csr_transpose(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *o[5];
    long long batch, n, m;
    int nthreads, status;
    call c = {0};
    tsgu_csr A;
    if (!PyArg_ParseTuple(args, "OOLLLOOOi", &o[0], &o[1], &batch, &n, &m, &o[2], &o[3], &o[4],
                          &nthreads))
        return NULL;
    const char *names[5] = {"crow_indices", "col_indices", "tptr", "trow", "tperm"};
    const held *h = c.t;
    if (take_all(&c, o, names, 5) || make_csr(&h[0], &h[1], NULL, batch, n, m, &A, 0) ||
        index_array(&h[2], &A, batch * m + 1, names[0]) || index_array(&h[3], &A, A.nnz, names[0]) ||
        index_array(&h[4], &A, A.nnz, names[0]))
        return finish(&c, -1);
    Py_BEGIN_ALLOW_THREADS
    status = tsgu_csr_transpose(&A, data_of(&h[2]), data_of(&h[3]), data_of(&h[4]), nthreads);
    Py_END_ALLOW_THREADS
    return finish(&c, status);
}

/* ---- coo_row_ptr(indices, sizes, ptr_or_None, nthreads[, probe]) ----
 * checks every index of a (2|3, nnz) int64 index array against sizes; with ptr
 * (int64, batch*n+1) also checks the (batch, row) order and fills ptr.  With
 * probe (ptr needed), the order is asked, not required: it returns True, with
 * ptr filled, when the entries are sorted by (batch, row, col) without repeats
 * (as a coalesced tensor's are), and False otherwise.  The
 * index rows may lie any distance apart (a view of a larger buffer, or an
 * expanded array): the kernel reads row d at d * stride(0). */
PyObject *py_coo_row_ptr(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *oi, *osizes, *optr;
    int64_t sizes[3], sd, R, ld, nnz, bad = -1;
    int status, nthreads, probe = 0, coalesced = 0;
    call c = {0};
    if (!PyArg_ParseTuple(args, "OOOi|p", &oi, &osizes, &optr, &nthreads, &probe)) return NULL;
    if (probe && optr == Py_None) {
        PyErr_SetString(PyExc_ValueError, "a probe needs row_ptr");
        return NULL;
    }
    if (take_coo(&c, oi, osizes, sizes, &sd, &R, &ld, &nnz)) return finish(&c, -1);
    int64_t *ptr = NULL;
    if (optr != Py_None) {
        if (take_row_ptr(&c, optr, R)) return finish(&c, -1);
        ptr = data_of(&c.t[1]);
    }
    const int64_t *idx = data_of(&c.t[0]);
    Py_BEGIN_ALLOW_THREADS
    status = tsgu_coo_row_ptr(idx, ld, sd, nnz, sizes, ptr, nthreads, probe ? &coalesced : NULL, &bad);
    Py_END_ALLOW_THREADS
    if (status == TSGU_EIDX_RANGE) status = raise_coo_range(idx, ld, sd, sizes, bad);
    PyObject *done = finish(&c, status);
    if (!done || !probe) return done;
    Py_DECREF(done);
    return PyBool_FromLong(coalesced);
}
