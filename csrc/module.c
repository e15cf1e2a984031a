/* module.c: torchsparsegradutils._C, the only C file that knows about Python.
 *
 * Tensors arrive through DLPack, zero-copy, so the module never links libtorch
 * and one build serves any PyTorch 2.x: borrowed through the tensor type's DLPack
 * C exchange table where PyTorch publishes one (recent releases; no capsule, no
 * allocation), else as DLPack capsules from a registered exporter or
 * tensor.__dlpack__().
 * Each function: takes its tensors, re-checks device, dtype, shape and strides,
 * builds the kernel views, releases the GIL around the kernel, maps its status
 * to an exception, and gives every tensor back on one cleanup path.
 * Outputs are allocated by the caller (torch.empty) and written in place. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdlib.h>
#include <string.h>
#include "tsgu.h"
#ifdef TSGU_CUDA
#include "cuda/tsgu_cuda.h"
#endif

/* ---- DLPack ABI, declared from the published specification (dlpack.h) ---- */
typedef struct {
    int32_t device_type; /* kDLCPU = 1 */
    int32_t device_id;
} DLDevice;
typedef struct {
    uint8_t code;        /* kDLInt = 0, kDLUInt = 1, kDLFloat = 2, ... */
    uint8_t bits;
    uint16_t lanes;
} DLDataType;
typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides;    /* in elements; NULL means compact row-major */
    uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;
enum { kDLCPU = 1, kDLCUDA = 2, kDLInt = 0, kDLFloat = 2, kDLBfloat = 4 };
/* the C exchange table a tensor type may publish as its __dlpack_c_exchange_api__
 * capsule (DLPack 1.3); only dltensor_from_py_object_no_sync is used here: it fills
 * a DLTensor that borrows obj's sizes, strides and data (valid while obj lives and
 * is not resized), with no capsule, allocation or Python call */
typedef struct {
    uint32_t major;
    uint32_t minor;
} DLPackVersion;
typedef void (*dlpack_unused_fn)(void);
typedef struct DLPackExchangeAPIHeader {
    DLPackVersion version;
    struct DLPackExchangeAPIHeader *prev_api;
} DLPackExchangeAPIHeader;
typedef struct {
    DLPackExchangeAPIHeader header;
    dlpack_unused_fn managed_tensor_allocator;
    dlpack_unused_fn managed_tensor_from_py_object_no_sync;
    dlpack_unused_fn managed_tensor_to_py_object_no_sync;
    int (*dltensor_from_py_object_no_sync)(void *py_object, DLTensor *out); /* 0, or -1 and an exception */
    dlpack_unused_fn current_work_stream;
} DLPackExchangeAPI;

/* ---- the tensors of one call, held from intake to the single exit ---- */
typedef struct {
    const char *name;     /* argument name, for messages */
    PyObject *capsule;    /* NULL when borrowed */
    DLManagedTensor *mt;  /* the capsule's, or &borrowed */
    DLManagedTensor borrowed; /* dl_tensor from the exchange table; no deleter */
} held;

#define MAX_HELD 12

/* obj -> DLPack capsule: the registered exporter, or NULL for obj.__dlpack__() */
static PyObject *exporter = NULL;
/* instances of exchange_type are borrowed through exchange (see use_exchange_api) */
static PyTypeObject *exchange_type = NULL;
static const DLPackExchangeAPI *exchange = NULL;

typedef struct {
    held t[MAX_HELD];
    int count;            /* how many of t[] to give back */
    int cuda;             /* 0: every tensor on the CPU; 1: all on one CUDA device */
    int32_t device_id;    /* that device, once a tensor was taken */
} call;

/* h->mt <- obj's DLTensor: borrowed through the exchange table when obj is a tensor
 * of its type (obj, held by the caller's arguments for the whole call, keeps it
 * valid), else from a DLPack capsule that h owns; -1 with an exception */
static int intake(held *h, PyObject *obj)
{
    if (exchange && PyObject_TypeCheck(obj, exchange_type)) {
        if (exchange->dltensor_from_py_object_no_sync(obj, &h->borrowed.dl_tensor) != 0) return -1;
        h->mt = &h->borrowed;
        return 0;
    }
    h->capsule = exporter ? PyObject_CallFunctionObjArgs(exporter, obj, NULL)
                          : PyObject_CallMethod(obj, "__dlpack__", NULL);
    if (!h->capsule) return -1;
    h->mt = PyCapsule_GetPointer(h->capsule, "dltensor");
    if (!h->mt) return -1;
    if (PyCapsule_SetName(h->capsule, "used_dltensor") != 0) {
        h->mt = NULL;
        return -1;
    }
    return 0;
}

/* take obj's DLTensor into the next slot of c; on failure set an
 * exception and return -1 (what was taken is given back by finish) */
static int take(call *c, PyObject *obj, const char *name)
{
    if (c->count == MAX_HELD) {
        PyErr_SetString(PyExc_RuntimeError, "internal error: too many tensors in one call");
        return -1;
    }
    held *h = &c->t[c->count++];
    h->name = name;
    if (intake(h, obj)) return -1;
    DLDevice d = h->mt->dl_tensor.device;
    if (d.device_type != (c->cuda ? kDLCUDA : kDLCPU)) {
        PyErr_Format(PyExc_ValueError, "%s must be a %s tensor", name, c->cuda ? "CUDA" : "CPU");
        return -1;
    }
    if (c->count > 1 && d.device_id != c->device_id) {
        PyErr_Format(PyExc_ValueError, "%s must be on the device of %s", name, c->t[0].name);
        return -1;
    }
    c->device_id = d.device_id;
    return 0;
}

/* take objs[0..count) named names[0..count) */
static int take_all(call *c, PyObject *const *objs, const char *const *names, int count)
{
    for (int i = 0; i < count; i++)
        if (take(c, objs[i], names[i])) return -1;
    return 0;
}

static int raise_status(int status);

/* the single exit of every entry point: give every tensor back, then return
 * None, or NULL with an exception (status < 0: already set; > 0: a kernel's) */
static PyObject *finish(call *c, int status)
{
    for (int i = 0; i < c->count; i++) {
        held *h = &c->t[i];
        if (h->mt && h->mt->deleter) h->mt->deleter(h->mt);
        Py_XDECREF(h->capsule);
    }
    c->count = 0;
    if (status < 0 || raise_status(status)) return NULL;
    Py_RETURN_NONE;
}

static const DLTensor *dl(const held *h) { return &h->mt->dl_tensor; }
static void *data_of(const held *h) { return (char *)dl(h)->data + dl(h)->byte_offset; }

static int64_t numel(const DLTensor *t)
{
    int64_t s = 1;
    for (int d = 0; d < t->ndim; d++) s *= t->shape[d];
    return s;
}

static int64_t stride_of(const DLTensor *t, int d)
{
    if (t->strides) return t->strides[d];
    int64_t s = 1;
    for (int e = t->ndim - 1; e > d; e--) s *= t->shape[e];
    return s;
}

static int is_contiguous(const DLTensor *t)
{
    if (numel(t) == 0) return 1; /* an empty tensor may carry any strides */
    int64_t s = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] != 1 && stride_of(t, d) != s) return 0;
        s *= t->shape[d];
    }
    return 1;
}

/* index type of h (int32/int64), or -1 with a TypeError */
static int index_type(const held *h)
{
    DLDataType t = dl(h)->dtype;
    if (t.code == kDLInt && t.lanes == 1 && (t.bits == 32 || t.bits == 64))
        return t.bits == 32 ? TSGU_I32 : TSGU_I64;
    PyErr_Format(PyExc_TypeError, "%s must hold int32 or int64 indices", h->name);
    return -1;
}

/* value type of h, or -1 with a TypeError: float32/float64, and also
 * float16/bfloat16 with half_ok (the kernels of sparse_mm take them) */
static int real_type(const held *h, int half_ok)
{
    DLDataType t = dl(h)->dtype;
    if (t.code == kDLFloat && t.lanes == 1 && (t.bits == 32 || t.bits == 64))
        return t.bits == 32 ? TSGU_F32 : TSGU_F64;
    if (half_ok && (t.code == kDLFloat || t.code == kDLBfloat) && t.lanes == 1 && t.bits == 16)
        return t.code == kDLFloat ? TSGU_F16 : TSGU_BF16;
    PyErr_Format(PyExc_TypeError, half_ok ? "%s must be float16, bfloat16, float32 or float64"
                                          : "%s must be float32 or float64", h->name);
    return -1;
}

static int need_contiguous(const held *h)
{
    if (is_contiguous(dl(h))) return 0;
    PyErr_Format(PyExc_ValueError, "%s must be contiguous", h->name);
    return -1;
}

/* *R = batch * n, the rows of a batch (batch, n >= 0); -1 with a ValueError when
 * R + 1 row pointers cannot be counted in int64 */
static int rows_overflow(int64_t batch, int64_t n, int64_t *R)
{
    if (n > 0 && batch > (INT64_MAX - 1) / n) {
        PyErr_SetString(PyExc_ValueError, "matrix sizes too large: batch * rows + 1 overflows int64");
        return -1;
    }
    *R = batch * n;
    return 0;
}

/* status code -> exception; returns -1 when one was set */
static int raise_status(int status)
{
    switch (status) {
    case TSGU_OK: return 0;
    case TSGU_EPTR_ENDS:
        PyErr_SetString(PyExc_ValueError, "malformed sparse matrix: row pointers (crow_indices) "
                                          "must start at 0 and end at the number of stored entries");
        break;
    case TSGU_EPTR_ORDER:
        PyErr_SetString(PyExc_ValueError,
                        "malformed sparse matrix: row pointers (crow_indices) must be non-decreasing");
        break;
    case TSGU_ECOL_RANGE:
        PyErr_SetString(PyExc_ValueError, "malformed sparse matrix: a column index is negative or "
                                          "not less than the number of columns");
        break;
    case TSGU_ECOL_ORDER:
        PyErr_SetString(PyExc_ValueError, "malformed sparse matrix: column indices must be sorted "
                                          "and unique within each row");
        break;
    case TSGU_EIDX_RANGE:
        PyErr_SetString(PyExc_ValueError, "malformed sparse matrix: an index is negative or not less "
                                          "than the size of its dimension");
        break;
    case TSGU_EIDX_ORDER:
        PyErr_SetString(PyExc_ValueError, "malformed sparse matrix: the COO tensor is marked coalesced "
                                          "but its indices are not sorted by row");
        break;
    case TSGU_ENOMEM: PyErr_NoMemory(); break;
    case TSGU_ETRI_SIDE:
        PyErr_SetString(PyExc_ValueError, "A is not triangular on the requested side: it stores an entry "
                                          "below the diagonal with upper=True, or above it with upper=False");
        break;
    case TSGU_EDIAG_ZERO:
        PyErr_SetString(PyExc_ValueError, "A is singular: a diagonal entry is zero or not stored "
                                          "(pass unitriangular=True if the diagonal is implicit ones)");
        break;
    case TSGU_EDIAG_UNIT:
        PyErr_SetString(PyExc_ValueError, "unitriangular=True, but A stores diagonal entries: "
                                          "the unit diagonal must be implicit (A strictly triangular)");
        break;
    case TSGU_EGROUP:
        PyErr_SetString(PyExc_ValueError, "malformed grouping: a relation index is negative or not less "
                                          "than the number of relations, segment offsets do not run "
                                          "from 0 to the number of rows, or a row order is not a "
                                          "permutation of the rows");
        break;
    default:
        PyErr_Format(PyExc_RuntimeError, "internal error in a sparse kernel (status %d)", status);
    }
    return -1;
}

/* A CSR view from (ptr, col[, val]) with batch items of n x m:
 *   ptr 1D of batch*n+1 (global layout) with col 1D, or
 *   ptr 2D (batch, n+1) (batched layout) with col 2D (batch, nnz per item);
 * 16-bit values only with half_ok. */
static int make_csr(const held *ptr, const held *col, const held *val, int64_t batch, int64_t n,
                    int64_t m, tsgu_csr *A, int half_ok)
{
    const DLTensor *P = dl(ptr), *J = dl(col);
    int it = index_type(ptr);
    if (it < 0) return -1;
    if (index_type(col) != it) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_TypeError, "%s and %s must have the same dtype", ptr->name, col->name);
        return -1;
    }
    if (batch < 0 || n < 0 || m < 0) {
        PyErr_SetString(PyExc_ValueError, "matrix sizes must be non-negative");
        return -1;
    }
    int64_t R;
    if (rows_overflow(batch, n, &R)) return -1;
    if (need_contiguous(ptr) || need_contiguous(col)) return -1;
    memset(A, 0, sizeof *A);
    A->batch = batch;
    A->nrows = n;
    A->ncols = m;
    A->itype = it;
    A->ptr = data_of(ptr);
    A->col = data_of(col);
    A->nnz = numel(J);
    if (P->ndim == 1 && J->ndim == 1 && P->shape[0] == R + 1) {
        A->ptr_stride = n;
    } else if (P->ndim == 2 && J->ndim == 2 && P->shape[0] == batch && P->shape[1] == n + 1 &&
               J->shape[0] == batch) {
        A->ptr_stride = n + 1;
        A->entry_stride = J->shape[1];
    } else {
        PyErr_Format(PyExc_ValueError,
                     "%s must have shape (%lld,) or (%lld, %lld), with %s 1D or (%lld, nnz) to match",
                     ptr->name, (long long)(batch * n + 1), (long long)batch, (long long)(n + 1),
                     col->name, (long long)batch);
        return -1;
    }
    if (val) {
        int rt = real_type(val, half_ok);
        if (rt < 0 || need_contiguous(val)) return -1;
        if (numel(dl(val)) != A->nnz) {
            PyErr_Format(PyExc_ValueError, "%s must have one value per entry (%lld), got %lld",
                         val->name, (long long)A->nnz, (long long)numel(dl(val)));
            return -1;
        }
        A->rtype = rt;
        A->val = data_of(val);
    }
    /* the ends of a device structure are checked on the device (cuda_csr_check) */
    return dl(ptr)->device.device_type == kDLCPU ? raise_status(tsgu_csr_check_ends(A)) : 0;
}

/* A dense view of shape (batch, rows, cols) or, for batch == 1, (rows, cols),
 * with unit stride along cols, of value type rt (one the caller accepted). */
static int make_dense(const held *h, int64_t batch, int64_t rows, int64_t cols, int rt,
                      tsgu_dense *D)
{
    const DLTensor *t = dl(h);
    int r = real_type(h, 1);
    if (r < 0) return -1;
    if (r != rt) {
        PyErr_Format(PyExc_TypeError, "%s must have the dtype of the sparse values", h->name);
        return -1;
    }
    int ok = (t->ndim == 3 && t->shape[0] == batch && t->shape[1] == rows && t->shape[2] == cols) ||
             (t->ndim == 2 && batch == 1 && t->shape[0] == rows && t->shape[1] == cols);
    if (!ok) {
        PyErr_Format(PyExc_ValueError, "%s must have shape (%lld, %lld, %lld)", h->name,
                     (long long)batch, (long long)rows, (long long)cols);
        return -1;
    }
    int d0 = t->ndim - 2;
    D->data = data_of(h);
    D->batch = batch;
    D->rows = rows;
    D->cols = cols;
    D->bstride = t->ndim == 3 ? stride_of(t, 0) : 0;
    D->rstride = stride_of(t, d0);
    D->rtype = rt;
    if (numel(t) > 0 && ((cols > 1 && stride_of(t, d0 + 1) != 1) || D->bstride < 0 || D->rstride < 0)) {
        PyErr_Format(PyExc_ValueError, "%s must have unit stride in its last dimension", h->name);
        return -1;
    }
    return 0;
}

/* width p of an output-like (.., p) tensor, or -1 when it has fewer than 2 dims */
static int64_t last_dim(const held *h)
{
    return dl(h)->ndim >= 2 ? dl(h)->shape[dl(h)->ndim - 1] : -1;
}

/* the sizes of a COO tensor, a tuple of 2 or 3 non-negative ints, into sizes[0..*sd);
 * *R = batch * rows, the rows of its block diagonal; -1 with an exception */
static int coo_sizes(PyObject *osizes, int64_t *sizes, int64_t *sd, int64_t *R)
{
    if (!PyTuple_Check(osizes) || PyTuple_Size(osizes) < 2 || PyTuple_Size(osizes) > 3) {
        PyErr_SetString(PyExc_ValueError, "sizes must be a tuple of 2 or 3 ints");
        return -1;
    }
    *sd = PyTuple_Size(osizes);
    for (int64_t d = 0; d < *sd; d++) {
        sizes[d] = PyLong_AsLongLong(PyTuple_GetItem(osizes, d));
        if (sizes[d] == -1 && PyErr_Occurred()) return -1;
        if (sizes[d] < 0) {
            PyErr_SetString(PyExc_ValueError, "sizes must be non-negative");
            return -1;
        }
    }
    return rows_overflow(*sd == 3 ? sizes[0] : 1, sizes[*sd - 2], R);
}

/* a COO index array: int64 of shape (sd, nnz), row d at data + d * *ld; *ld = -1 when
 * its rows are not unit-stride (which the kernels need); -1 with an exception */
static int coo_indices(const held *h, int64_t sd, int64_t *ld, int64_t *nnz)
{
    const DLTensor *I = dl(h);
    if (index_type(h) != TSGU_I64 || I->ndim != 2 || I->shape[0] != sd) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_ValueError, "indices must be int64 of shape (%lld, nnz)", (long long)sd);
        return -1;
    }
    *nnz = I->shape[1];
    *ld = stride_of(I, 0);
    if ((*nnz > 1 && stride_of(I, 1) != 1) || *ld < 0) *ld = -1;
    return 0;
}

/* ---- spmm(ptr, col, val, batch, n, m, B, C, nthreads) ----
 * C[k] = A[k] @ B[k]; A is batch x n x m, B (batch, m, p), C (batch, n, p).
 * ---- spmm_t(ptr, col, val, batch, n, m, G, out, nthreads) ----
 * out[k] = A[k]^T @ G[k]; G (batch, n, p), out (batch, m, p). */
static PyObject *spmm_either(PyObject *args, int transposed)
{
    PyObject *o[5];
    long long batch, n, m;
    int nthreads, status;
    call c = {0};
    tsgu_csr A;
    tsgu_dense X, Y;
    if (!PyArg_ParseTuple(args, "OOOLLLOOi", &o[0], &o[1], &o[2], &batch, &n, &m, &o[3], &o[4],
                          &nthreads))
        return NULL;
    const char *names[5] = {"crow_indices", "col_indices", "values", transposed ? "grad" : "B", "out"};
    const held *h = c.t;
    if (take_all(&c, o, names, 5) || make_csr(&h[0], &h[1], &h[2], batch, n, m, &A, 1) ||
        make_dense(&h[3], batch, transposed ? n : m, last_dim(&h[4]), A.rtype, &X) ||
        make_dense(&h[4], batch, transposed ? m : n, last_dim(&h[4]), A.rtype, &Y) ||
        need_contiguous(&h[4]))
        return finish(&c, -1);
    Py_BEGIN_ALLOW_THREADS
    status = transposed ? tsgu_spmm_t(&A, &X, &Y, nthreads) : tsgu_spmm(&A, &X, &Y, nthreads);
    Py_END_ALLOW_THREADS
    return finish(&c, status);
}

static PyObject *py_spmm(PyObject *self, PyObject *args)
{
    (void)self;
    return spmm_either(args, 0);
}

static PyObject *py_spmm_t(PyObject *self, PyObject *args)
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
static PyObject *py_spmm_coo(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *o[4], *osizes;
    int64_t sizes[3], sd, R, ld, nnz;
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
        status = tsgu_coo_row_ptr(idx, ld, sd, nnz, sizes, ptr, nthreads, &sorted);
        if (status == TSGU_OK && sorted) status = tsgu_spmm(&A, &X, &Y, nthreads);
        Py_END_ALLOW_THREADS
        free(ptr);
    }
    PyObject *done = finish(&c, status);
    if (!done) return NULL;
    Py_DECREF(done);
    return PyBool_FromLong(sorted);
}

/* ---- sddmm(ptr, col, batch, n, m, G, B, out, nthreads) ----
 * out[e] = dot(G[k][i,:], B[k][j,:]) at every stored entry (k, i, j). */
static PyObject *py_sddmm(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *o[5];
    long long batch, n, m;
    int nthreads, status;
    call c = {0};
    tsgu_csr A;
    tsgu_dense G, B;
    if (!PyArg_ParseTuple(args, "OOLLLOOOi", &o[0], &o[1], &batch, &n, &m, &o[2], &o[3], &o[4],
                          &nthreads))
        return NULL;
    const char *names[5] = {"crow_indices", "col_indices", "grad", "B", "out"};
    const held *h = c.t;
    /* out is checked as the value array of the pattern: one float per entry */
    if (take_all(&c, o, names, 5) || make_csr(&h[0], &h[1], &h[4], batch, n, m, &A, 1) ||
        make_dense(&h[2], batch, n, last_dim(&h[2]), A.rtype, &G) ||
        make_dense(&h[3], batch, m, last_dim(&h[2]), A.rtype, &B))
        return finish(&c, -1);
    Py_BEGIN_ALLOW_THREADS
    status = tsgu_sddmm(&A, &G, &B, (void *)A.val, nthreads);
    Py_END_ALLOW_THREADS
    return finish(&c, status);
}

/* an index array of `want` entries of A's index type, contiguous; -1 with an exception if not */
static int index_array(const held *h, const tsgu_csr *A, int64_t want, const char *like)
{
    if (index_type(h) == (int)A->itype && !need_contiguous(h) && numel(dl(h)) == want) return 0;
    if (!PyErr_Occurred())
        PyErr_Format(PyExc_ValueError, "%s must hold %lld indices of the dtype of %s", h->name,
                     (long long)want, like);
    return -1;
}

/* ---- csr_transpose(ptr, col, batch, n, m, tptr, trow, tperm, nthreads) ----
 * the pattern of every item's transpose, in the global layout (batch*m+1 pointers) */
static PyObject *py_csr_transpose(PyObject *self, PyObject *args)
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

/* ---- csr_check(ptr, col, batch, n, m, nthreads) ----
 * raises ValueError unless (ptr, col) is a well-formed CSR structure */
static PyObject *py_csr_check(PyObject *self, PyObject *args)
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

/* take a COO index array oi and its sizes (coo_sizes, coo_indices) into c, its
 * rows unit-stride as the row-pointer kernels read them; -1 with an exception */
static int take_coo(call *c, PyObject *oi, PyObject *osizes, int64_t *sizes, int64_t *sd, int64_t *R,
                    int64_t *ld, int64_t *nnz)
{
    if (coo_sizes(osizes, sizes, sd, R) || take(c, oi, "indices") ||
        coo_indices(&c->t[c->count - 1], *sd, ld, nnz))
        return -1;
    if (*ld < 0) {
        PyErr_SetString(PyExc_ValueError, "indices must have unit-stride rows");
        return -1;
    }
    return 0;
}

/* a row_ptr array (int64, R+1, contiguous) into c; -1 with an exception if not */
static int take_row_ptr(call *c, PyObject *optr, int64_t R)
{
    if (take(c, optr, "row_ptr")) return -1;
    const held *hp = &c->t[c->count - 1];
    if (index_type(hp) == TSGU_I64 && !need_contiguous(hp) && numel(dl(hp)) == R + 1) return 0;
    if (!PyErr_Occurred())
        PyErr_Format(PyExc_ValueError, "row_ptr must be int64 with %lld entries", (long long)(R + 1));
    return -1;
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
    int64_t sizes[3], sd, R, ld, nnz;
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
    status = tsgu_coo_row_ptr(idx, ld, sd, nnz, sizes, ptr, nthreads, probe ? &coalesced : NULL);
    Py_END_ALLOW_THREADS
    PyObject *done = finish(&c, status);
    if (!done || !probe) return done;
    Py_DECREF(done);
    return PyBool_FromLong(coalesced);
}

/* ---- trisolve(ptr, col, val, batch, n, X, upper, unit, trans, nthreads) ----
 * in place: X[k] = A[k]^{-1} X[k] (or A[k]^{-T} X[k] with trans); A is batch x n x n
 * triangular, X (batch, n, p) contiguous, holding the right-hand side on entry. */
static PyObject *py_trisolve(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *o[4];
    long long batch, n;
    int upper, unit, trans, nthreads, status;
    call c = {0};
    tsgu_csr A;
    tsgu_dense X;
    if (!PyArg_ParseTuple(args, "OOOLLOpppi", &o[0], &o[1], &o[2], &batch, &n, &o[3], &upper, &unit,
                          &trans, &nthreads))
        return NULL;
    const char *names[4] = {"crow_indices", "col_indices", "values", "X"};
    const held *h = c.t;
    if (take_all(&c, o, names, 4) || make_csr(&h[0], &h[1], &h[2], batch, n, n, &A, 0) ||
        make_dense(&h[3], batch, n, last_dim(&h[3]), A.rtype, &X) || need_contiguous(&h[3]))
        return finish(&c, -1);
    Py_BEGIN_ALLOW_THREADS
    status = tsgu_trisolve(&A, &X, upper, unit, trans, nthreads);
    Py_END_ALLOW_THREADS
    return finish(&c, status);
}

/* ---- Krylov solvers: the tensors of cg and minres ----
 * ptr, col, val: A n x n; B, X (n, k) contiguous of A's dtype; res float64 (2, k)
 * contiguous: rel in res[0], true_rel in res[1].  o[] holds them in that order. */
static int krylov_views(call *c, PyObject *const *o, int64_t n, tsgu_csr *A, tsgu_dense *B, tsgu_dense *X,
                        double **res)
{
    const char *names[6] = {"crow_indices", "col_indices", "values", "B", "X", "res"};
    const held *h = c->t;
    if (take_all(c, o, names, 6) || make_csr(&h[0], &h[1], &h[2], 1, n, n, A, 0) ||
        make_dense(&h[3], 1, n, last_dim(&h[3]), A->rtype, B) || need_contiguous(&h[3]) ||
        make_dense(&h[4], 1, n, B->cols, A->rtype, X) || need_contiguous(&h[4]))
        return -1;
    if (real_type(&h[5], 0) != TSGU_F64 || need_contiguous(&h[5]) || numel(dl(&h[5])) != 2 * B->cols) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "res must be float64 with two entries per column of B");
        return -1;
    }
    *res = data_of(&h[5]);
    return 0;
}

/* the single exit of cg and minres: (iterations, matvecs, recursive_stop, stopped_before,
 * breakdown) after finish() */
static PyObject *krylov_finish(call *c, int status, const tsgu_krylov_info *info)
{
    PyObject *none = finish(c, status);
    if (!none) return NULL;
    Py_DECREF(none);
    return Py_BuildValue("LLiii", (long long)info->iterations, (long long)info->matvecs, info->recursive_stop,
                         info->stopped_before, info->breakdown);
}

/* ---- cg(ptr, col, val, n, B, X, res, has_x0, tol, stop, tiny, mean, max_iter, min_iter, nthreads) ----
 * conjugate gradients for A X = B (cg.c); X holds the initial guess when has_x0 and
 * the solution on return. */
static PyObject *py_cg(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *o[6];
    long long n, max_iter, min_iter;
    int has_x0, mean, nthreads, status;
    tsgu_krylov_opts opts = {0};
    tsgu_krylov_info info = {0};
    call c = {0};
    tsgu_csr A;
    tsgu_dense B, X;
    double *res;
    if (!PyArg_ParseTuple(args, "OOOLOOOpdddpLLi", &o[0], &o[1], &o[2], &n, &o[3], &o[4], &o[5], &has_x0,
                          &opts.tol, &opts.stop, &opts.tiny, &mean, &max_iter, &min_iter, &nthreads))
        return NULL;
    opts.mean = mean;
    opts.max_iter = max_iter;
    opts.min_iter = min_iter;
    if (krylov_views(&c, o, n, &A, &B, &X, &res)) return finish(&c, -1);
    Py_BEGIN_ALLOW_THREADS
    status = tsgu_cg(&A, &B, &X, has_x0, &opts, res, res + B.cols, &info, nthreads);
    Py_END_ALLOW_THREADS
    return krylov_finish(&c, status, &info);
}

/* ---- minres(ptr, col, val, n, B, X, res, tol, eps, scale, shift, max_iter, nthreads) ----
 * MINRES for (scale A + shift I) X = B (minres.c) */
static PyObject *py_minres(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *o[6];
    long long n, max_iter;
    int nthreads, status;
    tsgu_krylov_opts opts = {0};
    tsgu_krylov_info info = {0};
    call c = {0};
    tsgu_csr A;
    tsgu_dense B, X;
    double *res;
    if (!PyArg_ParseTuple(args, "OOOLOOOddddLi", &o[0], &o[1], &o[2], &n, &o[3], &o[4], &o[5], &opts.tol,
                          &opts.eps, &opts.scale, &opts.shift, &max_iter, &nthreads))
        return NULL;
    opts.max_iter = max_iter;
    if (krylov_views(&c, o, n, &A, &B, &X, &res)) return finish(&c, -1);
    Py_BEGIN_ALLOW_THREADS
    status = tsgu_minres(&A, &B, &X, &opts, res, res + B.cols, &info, nthreads);
    Py_END_ALLOW_THREADS
    return krylov_finish(&c, status, &info);
}

/* ---- grouped products and log-sum-exp (gather_mm, segment_mm, sparse_logsumexp) ---- */

/* the grouping (off int64 (R+1,), perm int64 (n,) or NULL) of n rows */
static int make_groups(const held *off, const held *perm, int64_t n, tsgu_groups *g)
{
    if (index_type(off) != TSGU_I64 || need_contiguous(off) || numel(dl(off)) < 1 ||
        (perm && (index_type(perm) != TSGU_I64 || need_contiguous(perm) || numel(dl(perm)) != n))) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_ValueError, "%s must be int64 of R+1 offsets and %s int64 of %lld rows",
                         off->name, perm ? perm->name : "perm", (long long)n);
        return -1;
    }
    g->ngroups = numel(dl(off)) - 1;
    g->off = data_of(off);
    g->perm = perm ? data_of(perm) : NULL;
    return 0;
}

/* ---- group_rows(idx, R, off, perm) ----
 * off (R+1,), perm (n,): the rows grouped by idx[i] in [0, R), a stable counting sort */
static PyObject *py_group_rows(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *o[3];
    long long R;
    int status, it;
    call c = {0};
    tsgu_groups g;
    if (!PyArg_ParseTuple(args, "OLOO", &o[0], &R, &o[1], &o[2])) return NULL;
    const char *names[3] = {"idx_b", "off", "perm"};
    const held *h = c.t;
    if (take_all(&c, o, names, 3) || (it = index_type(&h[0])) < 0 || need_contiguous(&h[0]))
        return finish(&c, -1);
    if (R < 0 || numel(dl(&h[1])) != R + 1) {
        PyErr_SetString(PyExc_ValueError, "off must hold R+1 offsets, R >= 0");
        return finish(&c, -1);
    }
    int64_t n = numel(dl(&h[0]));
    if (make_groups(&h[1], &h[2], n, &g)) return finish(&c, -1);
    Py_BEGIN_ALLOW_THREADS
    status = tsgu_group_rows(data_of(&h[0]), it, n, R, (int64_t *)g.off, (int64_t *)g.perm);
    Py_END_ALLOW_THREADS
    return finish(&c, status);
}

/* ---- grouped_mm(off, perm, A, M, C, nthreads) / grouped_mm_tn(off, perm, A, G, out, nthreads) ----
 * C[i,:] = A[i,:] @ M[r] for the rows i of group r: A (n, K), M (R, K, P), C (n, P);
 * out[r] = sum over the rows i of group r of A[i,:]^T G[i,:]: G (n, P), out (R, K, P).
 * perm may be None (group r is the rows off[r]..off[r+1]-1). */
static PyObject *grouped_either(PyObject *args, int tn)
{
    PyObject *o[5];
    int nthreads, status, rt;
    call c = {0};
    tsgu_groups g;
    tsgu_dense A, X, Y;
    if (!PyArg_ParseTuple(args, "OOOOOi", &o[0], &o[1], &o[2], &o[3], &o[4], &nthreads)) return NULL;
    int has_perm = o[1] != Py_None;
    PyObject *objs[5] = {o[0], o[2], o[3], o[4], o[1]};     /* perm last: it may be absent */
    const char *names[5] = {"off", "a", tn ? "grad" : "b", "out", "perm"};
    const held *h = c.t;
    if (take_all(&c, objs, names, 4 + has_perm) || (rt = real_type(&h[1], 0)) < 0) return finish(&c, -1);
    if (dl(&h[1])->ndim != 2) {
        PyErr_SetString(PyExc_ValueError, "a must be 2D");
        return finish(&c, -1);
    }
    int64_t n = dl(&h[1])->shape[0], K = dl(&h[1])->shape[1], P = last_dim(&h[3]);
    if (make_groups(&h[0], has_perm ? &h[4] : NULL, n, &g) || make_dense(&h[1], 1, n, K, rt, &A) ||
        (tn ? make_dense(&h[2], 1, n, P, rt, &X) || make_dense(&h[3], g.ngroups, K, P, rt, &Y)
            : make_dense(&h[2], g.ngroups, K, P, rt, &X) || make_dense(&h[3], 1, n, P, rt, &Y)))
        return finish(&c, -1);
    Py_BEGIN_ALLOW_THREADS
    status = tn ? tsgu_grouped_mm_tn(&g, &A, &X, &Y, nthreads) : tsgu_grouped_mm(&g, &A, &X, &Y, nthreads);
    Py_END_ALLOW_THREADS
    return finish(&c, status);
}

static PyObject *py_grouped_mm(PyObject *self, PyObject *args)
{
    (void)self;
    return grouped_either(args, 0);
}

static PyObject *py_grouped_mm_tn(PyObject *self, PyObject *args)
{
    (void)self;
    return grouped_either(args, 1);
}

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

static PyObject *py_lse_rows(PyObject *self, PyObject *args)
{
    (void)self;
    return lse_either(args, 0);
}

static PyObject *py_lse_cols(PyObject *self, PyObject *args)
{
    (void)self;
    return lse_either(args, 1);
}

/* ---- lse_grad(ptr, col, val, batch, n, m, row_lse, row_grad, col_lse, col_grad, out, nthreads) ----
 * out (1, nnz) = d(sum of row_grad * row lse + col_grad * col lse)/d values; row_lse and
 * row_grad (batch, n) contiguous, or both None; col_lse and col_grad (batch, m), or None. */
static PyObject *py_lse_grad(PyObject *self, PyObject *args)
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

/* ---- set_exporter(fn): fn(tensor) -> "dltensor" capsule, used by every later call ---- */
static PyObject *py_set_exporter(PyObject *self, PyObject *fn)
{
    (void)self;
    if (!PyCallable_Check(fn)) {
        PyErr_SetString(PyExc_TypeError, "the exporter must be callable");
        return NULL;
    }
    PyObject *old = exporter;
    Py_INCREF(fn);
    exporter = fn;
    Py_XDECREF(old);
    Py_RETURN_NONE;
}

#ifdef TSGU_CUDA
/* ---- the CUDA kernels (csrc/cuda/): the same intake, on one CUDA device; every
 * launch goes on `stream`, PyTorch's current stream as an integer handle ---- */

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

/* *P = the long-row plan o: None, or (long_row, long_rows, piece_off, piece_long,
 * work) with int64 arrays and a work array of npieces x p sums (float64 for
 * float64 values, else float32); tsgu_cuda.h says what they hold */
static int take_plan(call *c, PyObject *o, int64_t p, int rt, tsgu_cuda_plan *P)
{
    memset(P, 0, sizeof *P);
    if (o == Py_None) return 0;
    PyObject *arr[4];
    long long long_row;
    if (!PyArg_ParseTuple(o, "LOOOO", &long_row, &arr[0], &arr[1], &arr[2], &arr[3])) return -1;
    const char *names[4] = {"long_rows", "piece_off", "piece_long", "work"};
    int first = c->count;
    if (take_all(c, arr, names, 4)) return -1;
    const held *h = &c->t[first];
    for (int i = 0; i < 3; i++)
        if (index_type(&h[i]) != TSGU_I64 || need_contiguous(&h[i]) || dl(&h[i])->ndim != 1) {
            if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "%s must be 1D int64", h[i].name);
            return -1;
        }
    P->long_row = long_row;
    P->nlong = numel(dl(&h[0]));
    P->npieces = numel(dl(&h[2]));
    DLDataType w = dl(&h[3])->dtype;
    if (long_row < 1 || numel(dl(&h[1])) != P->nlong + 1 || w.code != kDLFloat ||
        w.bits != (rt == TSGU_F64 ? 64 : 32) || need_contiguous(&h[3]) || numel(dl(&h[3])) != P->npieces * p) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "inconsistent long-row plan");
        return -1;
    }
    P->long_rows = data_of(&h[0]);
    P->piece_off = data_of(&h[1]);
    P->piece_long = data_of(&h[2]);
    P->work = data_of(&h[3]);
    return 0;
}

/* ---- cuda_csr_check(ptr, col, batch, n, m, item_nnz, flag, stream) ----
 * raises the ValueError of the first rule (tsgu_cuda.h) that A breaks; waits for the device */
static PyObject *py_cuda_csr_check(PyObject *self, PyObject *args)
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
 * raises a ValueError for an index out of range, or for entries not sorted by
 * row when flagged coalesced; else returns the order bits TSGU_COO_ROWS |
 * TSGU_COO_UNIQUE that the entries break (0: coalesced order); waits for the device */
static PyObject *py_cuda_coo_check(PyObject *self, PyObject *args)
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
    PyObject *done = finish_cuda(&c, status, "coo_check");
    if (!done) return NULL;
    Py_DECREF(done);
    return PyLong_FromLong(bits & (TSGU_COO_ROWS | TSGU_COO_UNIQUE));
}

/* ---- cuda_coo_row_ptr(indices, sizes, row_ptr, stream) ----
 * row pointers of checked indices sorted by (batch, row) */
static PyObject *py_cuda_coo_row_ptr(PyObject *self, PyObject *args)
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
static PyObject *py_cuda_spmm(PyObject *self, PyObject *args)
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
    if (take_plan(&c, oplan, C.cols, A.rtype, &P)) return finish(&c, -1);
    status = tsgu_cuda_use_device(c.device_id);
    if (status == TSGU_OK) status = tsgu_cuda_spmm(&A, perm, &B, &C, &P, (void *)(uintptr_t)stream);
    return finish_cuda(&c, status, "spmm");
}

/* ---- cuda_sddmm(ptr, col, rows, batch, n, m, G, B, out, stream) ----
 * out[e] = dot(G[k][i,:], B[k][j,:]) at every stored entry (k, i, j), rows[e] = k*n + i */
static PyObject *py_cuda_sddmm(PyObject *self, PyObject *args)
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
#endif

/* ---- use_exchange_api(tensor_type or None) -> bool ----
 * borrow the DLTensor of every later instance of tensor_type through its
 * __dlpack_c_exchange_api__ table (DLPack 1.3 or a later 1.x, with the non-owning export),
 * instead of exporting a capsule; True if it does.  None, or a type without such
 * a table, goes back to capsules for every tensor. */
static PyObject *py_use_exchange_api(PyObject *self, PyObject *type)
{
    (void)self;
    const DLPackExchangeAPI *api = NULL;
    if (type != Py_None) {
        if (!PyType_Check(type)) {
            PyErr_SetString(PyExc_TypeError, "use_exchange_api takes a type or None");
            return NULL;
        }
        PyObject *cap = PyObject_GetAttrString(type, "__dlpack_c_exchange_api__");
        if (!cap) {
            if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return NULL;
            PyErr_Clear();
        } else {
            api = PyCapsule_IsValid(cap, "dlpack_exchange_api") ? PyCapsule_GetPointer(cap, "dlpack_exchange_api")
                                                                 : NULL;
            Py_DECREF(cap); /* the table lives as long as the process (DLPack's rule) */
            if (api && (api->header.version.major != 1 || api->header.version.minor < 3 ||
                        !api->dltensor_from_py_object_no_sync))
                api = NULL;      /* the table's layout is DLPack 1.3's */
        }
    }
    PyTypeObject *old = exchange_type;
    exchange_type = api ? (PyTypeObject *)type : NULL;
    Py_XINCREF(exchange_type);
    exchange = api;
    Py_XDECREF(old);
    return PyBool_FromLong(api != NULL);
}

/* ---- simd() -> str: which variant of the kernels runs here ("avx2+fma" or "portable") ---- */
static PyObject *py_simd(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
#if TSGU_X86_CLONES
    if (tsgu_use_avx2()) return PyUnicode_FromString("avx2+fma");
#endif
    return PyUnicode_FromString("portable");
}

static PyMethodDef methods[] = {
    {"set_exporter", py_set_exporter, METH_O, "set_exporter(fn): fn(tensor) -> DLPack capsule"},
    {"simd", py_simd, METH_NOARGS, "simd() -> 'avx2+fma' or 'portable': the kernels' variant (TSGU_PORTABLE=1)"},
    {"use_exchange_api", py_use_exchange_api, METH_O,
     "use_exchange_api(tensor_type or None) -> bool: borrow tensors through the DLPack C exchange table"},
    {"spmm", py_spmm, METH_VARARGS, "spmm(crow, col, values, batch, n, m, B, out, nthreads)"},
    {"spmm_t", py_spmm_t, METH_VARARGS, "spmm_t(crow, col, values, batch, n, m, grad, out, nthreads)"},
    {"spmm_coo", py_spmm_coo, METH_VARARGS,
     "spmm_coo(indices, values, sizes, B, out, rows_per_entry, nthreads) -> done"},
    {"sddmm", py_sddmm, METH_VARARGS, "sddmm(crow, col, batch, n, m, G, B, out, nthreads)"},
    {"csr_check", py_csr_check, METH_VARARGS, "csr_check(crow, col, batch, n, m, nthreads): raises if malformed"},
    {"csr_transpose", py_csr_transpose, METH_VARARGS,
     "csr_transpose(crow, col, batch, n, m, tptr, trow, tperm, nthreads)"},
    {"coo_row_ptr", py_coo_row_ptr, METH_VARARGS,
     "coo_row_ptr(indices, sizes, row_ptr_or_None, nthreads[, probe]) -> None, or coalesced with probe"},
    {"trisolve", py_trisolve, METH_VARARGS,
     "trisolve(crow, col, values, batch, n, X, upper, unit, trans, nthreads): X <- A^{-1} X in place"},
    {"cg", py_cg, METH_VARARGS,
     "cg(crow, col, values, n, B, X, res, has_x0, tol, stop, tiny, mean, max_iter, min_iter, nthreads)"},
    {"minres", py_minres, METH_VARARGS,
     "minres(crow, col, values, n, B, X, res, tol, eps, scale, shift, max_iter, nthreads)"},
    {"group_rows", py_group_rows, METH_VARARGS, "group_rows(idx, R, off, perm): counting sort by relation"},
    {"grouped_mm", py_grouped_mm, METH_VARARGS, "grouped_mm(off, perm, a, b, out, nthreads)"},
    {"grouped_mm_tn", py_grouped_mm_tn, METH_VARARGS, "grouped_mm_tn(off, perm, a, grad, out, nthreads)"},
    {"lse_rows", py_lse_rows, METH_VARARGS,
     "lse_rows(crow, col, values, batch, n, m, include_zeros, out, item_out, nthreads)"},
    {"lse_cols", py_lse_cols, METH_VARARGS,
     "lse_cols(crow, col, values, batch, n, m, include_zeros, out, nthreads)"},
    {"lse_grad", py_lse_grad, METH_VARARGS,
     "lse_grad(crow, col, values, batch, n, m, row_lse, row_grad, col_lse, col_grad, out, nthreads)"},
#ifdef TSGU_CUDA
    {"cuda_csr_check", py_cuda_csr_check, METH_VARARGS,
     "cuda_csr_check(crow, col, batch, n, m, item_nnz, flag, stream): raises for a malformed structure"},
    {"cuda_coo_check", py_cuda_coo_check, METH_VARARGS,
     "cuda_coo_check(indices, sizes, coalesced, flag, stream) -> order bits (0: coalesced order)"},
    {"cuda_coo_row_ptr", py_cuda_coo_row_ptr, METH_VARARGS, "cuda_coo_row_ptr(indices, sizes, row_ptr, stream)"},
    {"cuda_spmm", py_cuda_spmm, METH_VARARGS,
     "cuda_spmm(crow, col, values, perm, batch, n, m, B, out, plan, stream)"},
    {"cuda_sddmm", py_cuda_sddmm, METH_VARARGS, "cuda_sddmm(crow, col, rows, batch, n, m, G, B, out, stream)"},
#endif
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C",
                                    "C kernels of torchsparsegradutils (private: use the Python API)",
                                    -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__C(void)
{
    PyObject *m = PyModule_Create(&module);
#ifdef TSGU_CUDA
    const long cuda = 1;
#else
    const long cuda = 0;
#endif
    if (m && PyModule_AddIntConstant(m, "cuda", cuda)) Py_CLEAR(m); /* built with the CUDA kernels? */
    return m;
}
