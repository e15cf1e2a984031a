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
static int spmm_arg_check(frame *f)
{
    const arg *a = f->a;
    long long batch = a[3].L, n = a[4].L, m = a[5].L;
    return make_csr(a[0].t, a[1].t, a[2].t, batch, n, m, &f->A, 1) ||
           make_dense(a[6].t, batch, m, last_dim(a[7].t), f->A.rtype, &f->X) ||
           make_dense(a[7].t, batch, n, last_dim(a[7].t), f->A.rtype, &f->Y) || need_contiguous(a[7].t) ||
           (a[8].t && arg_array(a[8].t, batch, n, f->Y.cols));
}
static int spmm_arg_kernel(frame *f)
{
    const arg *a = f->a;
    return tsgu_spmm_arg(&f->A, &f->X, &f->Y, data_or_null(a[8].t), a[9].i, a[10].i);
}

/* ---- spmm_t_arg(ptr, col, val, batch, n, m, arg, G, out, nthreads) ----
 * out[k][j,t] = sum of A.val[e] * G[k][i,t] over the rows i whose arg entry e of column t
 * lies in column j: grad_B of spmm_arg; G (batch, n, p), out (batch, m, p). */
static int spmm_t_arg_check(frame *f)
{
    const arg *a = f->a;
    long long batch = a[3].L, n = a[4].L, m = a[5].L;
    return make_csr(a[0].t, a[1].t, a[2].t, batch, n, m, &f->A, 1) ||
           make_dense(a[7].t, batch, n, last_dim(a[8].t), f->A.rtype, &f->X) ||
           make_dense(a[8].t, batch, m, last_dim(a[8].t), f->A.rtype, &f->Y) || need_contiguous(a[8].t) ||
           arg_array(a[6].t, batch, n, f->Y.cols);
}
static int spmm_t_arg_kernel(frame *f) { return tsgu_spmm_t_arg(&f->A, data_of(f->a[6].t), &f->X, &f->Y, f->a[9].i); }

/* ---- sddmm_arg(ptr, col, batch, n, m, arg, G, B, out, nthreads) ----
 * out[e] = sum of G[k][i,t] * B[k][col[e],t] over the columns t whose arg is e: grad of
 * spmm_arg w.r.t. A's values, shaped like col (out's dtype that of G and B). */
static int sddmm_arg_check(frame *f)
{
    const arg *a = f->a;
    long long batch = a[2].L, n = a[3].L, m = a[4].L;
    /* out is checked as the value array of the pattern: one value per entry */
    return make_csr(a[0].t, a[1].t, a[8].t, batch, n, m, &f->A, 1) ||
           make_dense(a[6].t, batch, n, last_dim(a[6].t), f->A.rtype, &f->X) ||
           make_dense(a[7].t, batch, m, last_dim(a[6].t), f->A.rtype, &f->Y) || arg_array(a[5].t, batch, n, f->X.cols);
}
static int sddmm_arg_kernel(frame *f)
{
    return tsgu_sddmm_arg(&f->A, data_of(f->a[5].t), &f->X, &f->Y, (void *)f->A.val, f->a[9].i);
}

ENTRY(spmm_arg, "tttLLLttnpi", spmm_arg_check, spmm_arg_kernel, NULL, CSR_NAMES, "values", "B", "out", "arg")
ENTRY(spmm_t_arg, "tttLLLttti", spmm_t_arg_check, spmm_t_arg_kernel, NULL, CSR_NAMES, "values", "arg", "grad", "out")
ENTRY(sddmm_arg, "ttLLLtttti", sddmm_arg_check, sddmm_arg_kernel, NULL, CSR_NAMES, "arg", "grad", "B", "out")

PyMethodDef glue_reduce[] = {
    METHOD(spmm_arg, "spmm_arg(crow, col, values, batch, n, m, B, out, arg_or_None, is_min, nthreads)"),
    METHOD(spmm_t_arg, "spmm_t_arg(crow, col, values, batch, n, m, arg, grad, out, nthreads)"),
    METHOD(sddmm_arg, "sddmm_arg(crow, col, batch, n, m, arg, grad, B, out, nthreads)"),
    {NULL, NULL, 0, NULL}};
