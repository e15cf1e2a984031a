/* glue_cuda.c: the entry points of the CUDA kernels (csrc/cuda/), in builds with them:
 * the same intake, on one CUDA device; every launch goes on `stream`, PyTorch's
 * current stream as an integer handle. */
#ifdef TSGU_CUDA
#include "glue.h"
#include <string.h>
#include "cuda/tsgu_cuda.h"

/* finish() of a call that ran on the device: a failed CUDA call becomes a
 * RuntimeError naming it */
static PyObject *finish_cuda(call *c, int status, const char *what)
{
    if (status >= TSGU_ECUDA) {
        int e = status - TSGU_ECUDA;
        PyErr_Format(PyExc_RuntimeError, "CUDA error in %s: %s (%s)", what, tsgu_cuda_error_name(e),
                     tsgu_cuda_error_string(e));
        status = -1;
    }
    return finish(c, status);
}

/* h is a check's flag: one int32 on the device, zero */
static int flag_array(const held *h)
{
    DLDataType t = dl(h)->dtype;
    if (t.code == kDLInt && t.bits == 32 && t.lanes == 1 && numel(dl(h)) == 1) return 0;
    PyErr_Format(PyExc_ValueError, "%s must be one int32", h->name);
    return -1;
}

/* *P = the plan o (tsgu_cuda.h) of a product of R rows and p columns: None, or
 * (long_row, long_rows, piece_off, piece_long, work, order) with int64 arrays,
 * a work array of npieces x p sums (float64 for float64 values, else float32)
 * and order None or R rows */
static int take_plan(call *c, PyObject *o, int64_t R, int64_t p, int rt, tsgu_cuda_plan *P)
{
    memset(P, 0, sizeof *P);
    if (o == Py_None) return 0;
    PyObject *arr[5];
    long long long_row;
    if (!PyArg_ParseTuple(o, "LOOOOO", &long_row, &arr[0], &arr[1], &arr[2], &arr[3], &arr[4])) return -1;
    const char *names[5] = {"long_rows", "piece_off", "piece_long", "work", "order"};
    int first = c->count, ordered = arr[4] != Py_None;
    if (take_all(c, arr, names, 4 + ordered)) return -1;
    const held *h = &c->t[first];
    for (int i = 0; i < 4 + ordered; i++)
        if (i != 3 && (index_type(&h[i]) != TSGU_I64 || need_contiguous(&h[i]) || dl(&h[i])->ndim != 1)) {
            if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "%s must be 1D int64", h[i].name);
            return -1;
        }
    P->long_row = long_row;
    P->nlong = numel(dl(&h[0]));
    P->npieces = numel(dl(&h[2]));
    DLDataType w = dl(&h[3])->dtype;
    if (long_row < 1 || numel(dl(&h[1])) != P->nlong + 1 || w.code != kDLFloat ||
        w.bits != (rt == TSGU_F64 ? 64 : 32) || need_contiguous(&h[3]) || numel(dl(&h[3])) != P->npieces * p ||
        (ordered && numel(dl(&h[4])) != R)) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "inconsistent product plan");
        return -1;
    }
    P->long_rows = data_of(&h[0]);
    P->piece_off = data_of(&h[1]);
    P->piece_long = data_of(&h[2]);
    P->work = data_of(&h[3]);
    P->order = ordered ? data_of(&h[4]) : NULL;
    return 0;
}

/* ---- cuda_csr_check(ptr, col, batch, n, m, item_nnz, flag, stream) ----
 * raises the ValueError of the first rule (tsgu_cuda.h) that A breaks; waits for the device */
PyObject *py_cuda_csr_check(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *o[3];
    long long batch, n, m, item_nnz;
    unsigned long long stream;
    int status, bits = 0;
    call c = {.cuda = 1};
    tsgu_csr A;
    if (!PyArg_ParseTuple(args, "OOLLLLOK", &o[0], &o[1], &batch, &n, &m, &item_nnz, &o[2], &stream))
        return NULL;
    const char *names[3] = {"crow_indices", "col_indices", "flag"};
    const held *h = c.t;
    if (take_all(&c, o, names, 3) || make_csr(&h[0], &h[1], NULL, batch, n, m, &A, 0) || flag_array(&h[2]))
        return finish(&c, -1);
    void *s = (void *)(uintptr_t)stream;
    Py_BEGIN_ALLOW_THREADS
    status = tsgu_cuda_use_device(c.device_id);
    if (status == TSGU_OK) status = tsgu_cuda_csr_check(&A, item_nnz, data_of(&h[2]), s);
    if (status == TSGU_OK) status = tsgu_cuda_read_flag(data_of(&h[2]), &bits, s);
    Py_END_ALLOW_THREADS
    return finish_cuda(&c, status == TSGU_OK ? tsgu_cuda_first_status(bits) : status, "csr_check");
}

/* ---- cuda_coo_check(indices, sizes, coalesced, flag, stream) -> int ----
 * raises a ValueError for an index out of range, or for entries not strictly
 * increasing in (row, col) when flagged coalesced (as coo_row_ptr.c); else
 * returns the order bits TSGU_COO_ROWS | TSGU_COO_UNIQUE that the entries break
 * (0: coalesced order); waits for the device */
PyObject *py_cuda_coo_check(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *oi, *osizes, *oflag;
    int64_t sizes[3], sd, R, ld, nnz;
    unsigned long long stream;
    int status, coalesced, bits = 0;
    call c = {.cuda = 1};
    if (!PyArg_ParseTuple(args, "OOpOK", &oi, &osizes, &coalesced, &oflag, &stream)) return NULL;
    if (take_coo(&c, oi, osizes, sizes, &sd, &R, &ld, &nnz) || take(&c, oflag, "flag") || flag_array(&c.t[1]))
        return finish(&c, -1);
    const int64_t *idx = data_of(&c.t[0]);
    int *flag = data_of(&c.t[1]);
    void *s = (void *)(uintptr_t)stream;
    Py_BEGIN_ALLOW_THREADS
    status = tsgu_cuda_use_device(c.device_id);
    if (status == TSGU_OK) status = tsgu_cuda_coo_check(idx, ld, sd, nnz, sizes, flag, s);
    if (status == TSGU_OK) status = tsgu_cuda_read_flag(flag, &bits, s);
    Py_END_ALLOW_THREADS
    if (status == TSGU_OK && (bits & TSGU_COO_RANGE)) status = TSGU_EIDX_RANGE;
    if (status == TSGU_OK && coalesced && (bits & TSGU_COO_ROWS)) status = TSGU_EIDX_ORDER;
    if (status == TSGU_OK && coalesced && (bits & TSGU_COO_UNIQUE)) status = TSGU_ECOL_ORDER;
    PyObject *done = finish_cuda(&c, status, "coo_check");
    if (!done) return NULL;
    Py_DECREF(done);
    return PyLong_FromLong(bits & (TSGU_COO_ROWS | TSGU_COO_UNIQUE));
}

/* ---- cuda_coo_row_ptr(indices, sizes, row_ptr, stream) ----
 * row pointers of checked indices sorted by (batch, row) */
PyObject *py_cuda_coo_row_ptr(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *oi, *osizes, *optr;
    int64_t sizes[3], sd, R, ld, nnz;
    unsigned long long stream;
    int status;
    call c = {.cuda = 1};
    if (!PyArg_ParseTuple(args, "OOOK", &oi, &osizes, &optr, &stream)) return NULL;
    if (take_coo(&c, oi, osizes, sizes, &sd, &R, &ld, &nnz) || take_row_ptr(&c, optr, R)) return finish(&c, -1);
    status = tsgu_cuda_use_device(c.device_id);
    if (status == TSGU_OK)
        status = tsgu_cuda_coo_row_ptr(data_of(&c.t[0]), ld, sd, nnz, sizes, data_of(&c.t[1]),
                                       (void *)(uintptr_t)stream);
    return finish_cuda(&c, status, "coo_row_ptr");
}

/* ---- cuda_spmm(ptr, col, values, perm_or_None, batch, n, m, B, out, plan, stream) ----
 * out[k] = A[k] @ B[k], the value of entry e being values[perm[e]] with perm */
PyObject *py_cuda_spmm(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *o[6], *operm, *oplan;
    long long batch, n, m;
    unsigned long long stream;
    int status;
    call c = {.cuda = 1};
    tsgu_csr A;
    tsgu_dense B, C;
    tsgu_cuda_plan P;
    if (!PyArg_ParseTuple(args, "OOOOLLLOOOK", &o[0], &o[1], &o[2], &operm, &batch, &n, &m, &o[3], &o[4],
                          &oplan, &stream))
        return NULL;
    const char *names[5] = {"crow_indices", "col_indices", "values", "B", "out"};
    const held *h = c.t;
    if (take_all(&c, o, names, 5) || make_csr(&h[0], &h[1], &h[2], batch, n, m, &A, 1) ||
        make_dense(&h[3], batch, m, last_dim(&h[4]), A.rtype, &B) ||
        make_dense(&h[4], batch, n, last_dim(&h[4]), A.rtype, &C) || need_contiguous(&h[4]))
        return finish(&c, -1);
    const void *perm = NULL;
    if (operm != Py_None) {
        if (take(&c, operm, "perm") || index_array(&c.t[5], &A, A.nnz, names[0])) return finish(&c, -1);
        perm = data_of(&c.t[5]);
    }
    if (take_plan(&c, oplan, A.batch * A.nrows, C.cols, A.rtype, &P)) return finish(&c, -1);
    status = tsgu_cuda_use_device(c.device_id);
    if (status == TSGU_OK) status = tsgu_cuda_spmm(&A, perm, &B, &C, &P, (void *)(uintptr_t)stream);
    return finish_cuda(&c, status, "spmm");
}

/* ---- cuda_sddmm(ptr, col, rows, batch, n, m, G, B, out, stream) ----
 * out[e] = dot(G[k][i,:], B[k][j,:]) at every stored entry (k, i, j), rows[e] = k*n + i */
PyObject *py_cuda_sddmm(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *o[6];
    long long batch, n, m;
    unsigned long long stream;
    int status;
    call c = {.cuda = 1};
    tsgu_csr A;
    tsgu_dense G, B;
    if (!PyArg_ParseTuple(args, "OOOLLLOOOK", &o[0], &o[1], &o[5], &batch, &n, &m, &o[2], &o[3], &o[4], &stream))
        return NULL;
    const char *names[6] = {"crow_indices", "col_indices", "grad", "B", "out", "rows"};
    const held *h = c.t;
    /* out is checked as the value array of the pattern: one value per entry */
    if (take_all(&c, o, names, 6) || make_csr(&h[0], &h[1], &h[4], batch, n, m, &A, 1) ||
        make_dense(&h[2], batch, n, last_dim(&h[2]), A.rtype, &G) ||
        make_dense(&h[3], batch, m, last_dim(&h[2]), A.rtype, &B) || index_array(&h[5], &A, A.nnz, names[0]))
        return finish(&c, -1);
    status = tsgu_cuda_use_device(c.device_id);
    if (status == TSGU_OK) status = tsgu_cuda_sddmm(&A, data_of(&h[5]), &G, &B, (void *)A.val, (void *)(uintptr_t)stream);
    return finish_cuda(&c, status, "sddmm");
}

/* ---- cuda_entry_rows(ptr, col, batch, n, m, rows, stream) ----
 * rows[e] = the global row of entry e (the columns' dtype) */
PyObject *py_cuda_entry_rows(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *o[3];
    long long batch, n, m;
    unsigned long long stream;
    int status;
    call c = {.cuda = 1};
    tsgu_csr A;
    if (!PyArg_ParseTuple(args, "OOLLLOK", &o[0], &o[1], &batch, &n, &m, &o[2], &stream)) return NULL;
    const char *names[3] = {"crow_indices", "col_indices", "rows"};
    const held *h = c.t;
    if (take_all(&c, o, names, 3) || make_csr(&h[0], &h[1], NULL, batch, n, m, &A, 0) ||
        index_array(&h[2], &A, A.nnz, names[1]))
        return finish(&c, -1);
    status = tsgu_cuda_use_device(c.device_id);
    if (status == TSGU_OK) status = tsgu_cuda_entry_rows(&A, data_of(&h[2]), (void *)(uintptr_t)stream);
    return finish_cuda(&c, status, "entry_rows");
}

/* 0 if a transpose pattern of nnz entries and K rows fits int32, else -1 with a ValueError */
static int pattern_fits(int64_t nnz, int64_t K)
{
    if (nnz >= 0 && K >= 0 && nnz < INT32_MAX && K < INT32_MAX) return 0;
    PyErr_SetString(PyExc_ValueError, "cuda_transpose takes fewer than 2^31 - 1 entries and rows");
    return -1;
}

/* ---- cuda_transpose_bytes(nnz, K) -> int ----
 * the workspace of cuda_transpose for nnz entries and K = batch*m rows of A^T */
PyObject *py_cuda_transpose_bytes(PyObject *self, PyObject *args)
{
    (void)self;
    long long nnz, K;
    size_t bytes = 0;
    if (!PyArg_ParseTuple(args, "LL", &nnz, &K) || pattern_fits(nnz, K)) return NULL;
    int status = tsgu_cuda_transpose_bytes(nnz, K, &bytes);
    if (status != TSGU_OK) {
        call c = {.cuda = 1};
        return finish_cuda(&c, status, "transpose_bytes");
    }
    return PyLong_FromSize_t(bytes);
}

/* h is an int32 array of `want` elements, contiguous */
static int int32_array(const held *h, int64_t want)
{
    if (index_type(h) == TSGU_I32 && !need_contiguous(h) && numel(dl(h)) == want) return 0;
    if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "%s must hold %lld int32", h->name, (long long)want);
    return -1;
}

/* ---- cuda_transpose(ptr, col, batch, n, m, tptr, trow, tperm, work, stream) ----
 * A's transpose pattern (transpose.cu), int32; work: uint8, cuda_transpose_bytes long */
PyObject *py_cuda_transpose(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *o[6];
    long long batch, n, m;
    unsigned long long stream;
    int status;
    size_t need = 0;
    call c = {.cuda = 1};
    tsgu_csr A;
    if (!PyArg_ParseTuple(args, "OOLLLOOOOK", &o[0], &o[1], &batch, &n, &m, &o[2], &o[3], &o[4], &o[5], &stream))
        return NULL;
    const char *names[6] = {"crow_indices", "col_indices", "tptr", "trow", "tperm", "work"};
    const held *h = c.t;
    if (take_all(&c, o, names, 6) || make_csr(&h[0], &h[1], NULL, batch, n, m, &A, 0))
        return finish(&c, -1);
    int64_t K = A.batch * A.ncols;
    DLDataType w = dl(&h[5])->dtype;
    if (pattern_fits(A.nnz, K)) return finish(&c, -1);
    status = tsgu_cuda_transpose_bytes(A.nnz, K, &need);
    if (status != TSGU_OK) return finish_cuda(&c, status, "transpose_bytes");
    if (int32_array(&h[2], K + 1) || int32_array(&h[3], A.nnz) || int32_array(&h[4], A.nnz)) return finish(&c, -1);
    if (w.code != kDLUInt || w.bits != 8 || need_contiguous(&h[5]) || (size_t)numel(dl(&h[5])) < need) {
        if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "work must be uint8 of %zu bytes", need);
        return finish(&c, -1);
    }
    status = tsgu_cuda_use_device(c.device_id);
    if (status == TSGU_OK)
        status = tsgu_cuda_transpose(&A, data_of(&h[2]), data_of(&h[3]), data_of(&h[4]), data_of(&h[5]),
                                     (size_t)numel(dl(&h[5])), (void *)(uintptr_t)stream);
    return finish_cuda(&c, status, "transpose");
}
#endif
