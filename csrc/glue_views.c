/* glue_views.c: the checks every entry point runs on its tensors (dtype, shape,
 * strides, layout), and the kernel views (tsgu.h) built from them. */
#include "glue.h"
#include <string.h>

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
int index_type(const held *h)
{
    DLDataType t = dl(h)->dtype;
    if (t.code == kDLInt && t.lanes == 1 && (t.bits == 32 || t.bits == 64))
        return t.bits == 32 ? TSGU_I32 : TSGU_I64;
    PyErr_Format(PyExc_TypeError, "%s must hold int32 or int64 indices", h->name);
    return -1;
}

/* value type of h, or -1 with a TypeError: float32/float64, and also
 * float16/bfloat16 with half_ok (the kernels of sparse_mm take them) */
int real_type(const held *h, int half_ok)
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

int need_contiguous(const held *h)
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

/* A CSR view from (ptr, col[, val]) with batch items of n x m:
 *   ptr 1D of batch*n+1 (global layout) with col 1D, or
 *   ptr 2D (batch, n+1) (batched layout) with col 2D (batch, nnz per item);
 * 16-bit values only with half_ok. */
int make_csr(const held *ptr, const held *col, const held *val, int64_t batch, int64_t n, int64_t m,
             tsgu_csr *A, int half_ok)
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
        const DLTensor *V = dl(val);
        int same = V->ndim == J->ndim;
        for (int d = 0; same && d < J->ndim; d++) same = V->shape[d] == J->shape[d];
        if (!same) {
            PyErr_Format(PyExc_ValueError, "%s must have the shape of %s (one value per stored entry, %lld)",
                         val->name, col->name, (long long)A->nnz);
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
int make_dense(const held *h, int64_t batch, int64_t rows, int64_t cols, int rt, tsgu_dense *D)
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


/* the sizes of a COO tensor, a tuple of 2 or 3 non-negative ints, into sizes[0..*sd);
 * *R = batch * rows, the rows of its block diagonal; -1 with an exception */
int coo_sizes(PyObject *osizes, int64_t *sizes, int64_t *sd, int64_t *R)
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
int coo_indices(const held *h, int64_t sd, int64_t *ld, int64_t *nnz)
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

/* an index array of `want` entries of A's index type, contiguous; -1 with an exception if not */
int index_array(const held *h, const tsgu_csr *A, int64_t want, const char *like)
{
    if (index_type(h) == (int)A->itype && !need_contiguous(h) && numel(dl(h)) == want) return 0;
    if (!PyErr_Occurred())
        PyErr_Format(PyExc_ValueError, "%s must hold %lld indices of the dtype of %s", h->name,
                     (long long)want, like);
    return -1;
}

/* take a COO index array oi and its sizes (coo_sizes, coo_indices) into c, its
 * rows unit-stride as the row-pointer kernels read them; -1 with an exception */
int take_coo(call *c, PyObject *oi, PyObject *osizes, int64_t *sizes, int64_t *sd, int64_t *R, int64_t *ld,
             int64_t *nnz)
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
int take_row_ptr(call *c, PyObject *optr, int64_t R)
{
    if (take(c, optr, "row_ptr")) return -1;
    const held *hp = &c->t[c->count - 1];
    if (index_type(hp) == TSGU_I64 && !need_contiguous(hp) && numel(dl(hp)) == R + 1) return 0;
    if (!PyErr_Occurred())
        PyErr_Format(PyExc_ValueError, "row_ptr must be int64 with %lld entries", (long long)(R + 1));
    return -1;
}
