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
static int spmm_either(frame *f, int transposed)
{
    const arg *a = f->a;
    long long batch = a[3].L, n = a[4].L, m = a[5].L;
    if (make_csr(a[0].t, a[1].t, a[2].t, batch, n, m, &f->A, 1) ||
        make_dense(a[6].t, batch, transposed ? n : m, last_dim(a[7].t), f->A.rtype, &f->X) ||
        make_dense(a[7].t, batch, transposed ? m : n, last_dim(a[7].t), f->A.rtype, &f->Y) || need_contiguous(a[7].t))
        return -1;
    f->A.row_mean = a[9].i;
    return 0;
}
static int spmm_check(frame *f) { return spmm_either(f, 0); }
static int spmm_t_check(frame *f) { return spmm_either(f, 1); }
static int spmm_kernel(frame *f) { return tsgu_spmm(&f->A, &f->X, &f->Y, f->a[8].i); }
static int spmm_t_kernel(frame *f) { return tsgu_spmm_t(&f->A, &f->X, &f->Y, f->a[8].i); }

/* ---- spmm_coo(indices, values, sizes, B, C, rows_per_entry, nthreads) -> bool ----
 * spmm of a COO A given by its indices ((2|3, nnz) int64) and values (nnz,), in one
 * call: its row pointers are built in a workspace, every index checked on the way
 * (coo_row_ptr.c), then spmm runs on them.  False, with C unwritten, where this does
 * not apply and the caller takes A's view instead: entries not strictly increasing in
 * (row, col) (not sorted and unique, whatever A's coalesced flag says: the view
 * coalesces them, or raises the error of a tensor flagged coalesced that is not),
 * index rows not unit-stride, or A hypersparse (more than rows_per_entry * (nnz + 1)
 * rows in its block diagonal). */
static PyObject *py_spmm_coo(PyObject *self, PyObject *args)
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
static int sddmm_check(frame *f)
{
    const arg *a = f->a;
    long long batch = a[2].L, n = a[3].L, m = a[4].L;
    /* out is checked as the value array of the pattern: one float per entry */
    if (make_csr(a[0].t, a[1].t, a[7].t, batch, n, m, &f->A, 1) ||
        make_dense(a[5].t, batch, n, last_dim(a[5].t), f->A.rtype, &f->X) ||
        make_dense(a[6].t, batch, m, last_dim(a[5].t), f->A.rtype, &f->Y))
        return -1;
    f->A.row_mean = a[9].i;
    return 0;
}
static int sddmm_kernel(frame *f) { return tsgu_sddmm(&f->A, &f->X, &f->Y, (void *)f->A.val, f->a[8].i); }

/* ---- csr_check(ptr, col, batch, n, m, nthreads) ----
 * raises ValueError unless (ptr, col) is a well-formed CSR structure */
static int csr_check_check(frame *f)
{
    const arg *a = f->a;
    return make_csr(a[0].t, a[1].t, NULL, a[2].L, a[3].L, a[4].L, &f->A, 0);
}
static int csr_check_kernel(frame *f) { return tsgu_csr_check(&f->A, f->a[5].i); }

/* ---- csr_transpose(ptr, col, batch, n, m, tptr, trow, tperm, nthreads) ----
 * the pattern of every item's transpose, in the global layout (batch*m+1 pointers) */
static int csr_transpose_check(frame *f)
{
    const arg *a = f->a;
    const char *like = a[0].t->name;
    return make_csr(a[0].t, a[1].t, NULL, a[2].L, a[3].L, a[4].L, &f->A, 0) ||
           index_array(a[5].t, &f->A, a[2].L * a[4].L + 1, like) || index_array(a[6].t, &f->A, f->A.nnz, like) ||
           index_array(a[7].t, &f->A, f->A.nnz, like);
}
static int csr_transpose_kernel(frame *f)
{
    const arg *a = f->a;
    return tsgu_csr_transpose(&f->A, data_of(a[5].t), data_of(a[6].t), data_of(a[7].t), a[8].i);
}

/* ---- coo_row_ptr(indices, sizes, ptr_or_None, nthreads[, probe]) ----
 * checks every index of a (2|3, nnz) int64 index array against sizes; with ptr
 * (int64, batch*n+1) also checks the (batch, row) order and fills ptr.  With
 * probe (ptr needed), the order is asked, not required: it returns True, with
 * ptr filled, when the entries are sorted by (batch, row, col) without repeats
 * (as a coalesced tensor's are), and False otherwise.  The
 * index rows may lie any distance apart (a view of a larger buffer, or an
 * expanded array): the kernel reads row d at d * stride(0). */
static PyObject *py_coo_row_ptr(PyObject *self, PyObject *args)
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

ENTRY(spmm, "tttLLLtti|p", spmm_check, spmm_kernel, NULL, CSR_NAMES, "values", "B", "out")
ENTRY(spmm_t, "tttLLLtti|p", spmm_t_check, spmm_t_kernel, NULL, CSR_NAMES, "values", "grad", "out")
ENTRY(sddmm, "ttLLLttti|p", sddmm_check, sddmm_kernel, NULL, CSR_NAMES, "grad", "B", "out")
ENTRY(csr_check, "ttLLLi", csr_check_check, csr_check_kernel, NULL, CSR_NAMES)
ENTRY(csr_transpose, "ttLLLttti", csr_transpose_check, csr_transpose_kernel, NULL, CSR_NAMES, "tptr", "trow", "tperm")

PyMethodDef glue_mm[] = {
    METHOD(spmm, "spmm(crow, col, values, batch, n, m, B, out, nthreads[, mean])"),
    METHOD(spmm_t, "spmm_t(crow, col, values, batch, n, m, grad, out, nthreads[, mean])"),
    {"spmm_coo", py_spmm_coo, METH_VARARGS,
     "spmm_coo(indices, values, sizes, B, out, rows_per_entry, nthreads) -> done"},
    METHOD(sddmm, "sddmm(crow, col, batch, n, m, G, B, out, nthreads[, mean])"),
    METHOD(csr_check, "csr_check(crow, col, batch, n, m, nthreads): raises if malformed"),
    METHOD(csr_transpose, "csr_transpose(crow, col, batch, n, m, tptr, trow, tperm, nthreads)"),
    {"coo_row_ptr", py_coo_row_ptr, METH_VARARGS,
     "coo_row_ptr(indices, sizes, row_ptr_or_None, nthreads[, probe]) -> None, or coalesced with probe"},
    {NULL, NULL, 0, NULL}};
