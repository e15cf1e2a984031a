/* glue_spgemm.c: the entry points of sparse_mm's sparse @ sparse kernels
 * (spgemm_count.c, spgemm.c, spgemm_grad_a.c, spgemm_grad_b.c).  Every batch item
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

/* ---- spgemm_count(Aptr, Acol, Bptr, Bcol, batch, n, l, m, Cptr, nthreads) ----
 * Cptr (batch*n+1, int64): the row pointers of the pattern of A @ B. */
static int spgemm_count_check(frame *f)
{
    const arg *a = f->a;
    long long batch = a[4].L, n = a[5].L, l = a[6].L, m = a[7].L;
    return make_csr(a[0].t, a[1].t, NULL, batch, n, l, &f->A, 1) ||
           make_csr(a[2].t, a[3].t, NULL, batch, l, m, &f->B, 1) || same_index(&f->A, &f->B, "B") ||
           int64_array(a[8].t, batch * n + 1);
}
static int spgemm_count_kernel(frame *f) { return tsgu_spgemm_count(&f->A, &f->B, data_of(f->a[8].t), f->a[9].i); }

/* ---- spgemm(Aptr, Acol, Aval, Bptr, Bcol, Bval, batch, n, l, m, Cptr, Cidx, Cval, nthreads) ----
 * the columns and values Cval of A @ B on the pattern Cptr (spgemm_count's): Cidx is the
 * columns (nnz,) int64 or (for m < 2^31) int32, or a COO index array (2 or 3, nnz) int64
 * whose last row gets the columns and the rows before it each entry's row (and batch item). */
static int spgemm_check(frame *f)
{
    const arg *a = f->a;
    long long batch = a[6].L, n = a[7].L, l = a[8].L, m = a[9].L;
    if (make_csr(a[0].t, a[1].t, a[2].t, batch, n, l, &f->A, 1) ||
        make_csr(a[3].t, a[4].t, a[5].t, batch, l, m, &f->B, 1) || same_index(&f->A, &f->B, "B") ||
        int64_array(a[10].t, batch * n + 1))
        return -1;
    const DLTensor *I = dl(a[11].t), *V = dl(a[12].t);
    int rows = I->ndim == 2 ? (int)I->shape[0] : 1;
    int col32 = I->ndim == 1 && I->dtype.bits == 32 && m < INT32_MAX;
    if (!(I->ndim == 1 || (I->ndim == 2 && (rows == 2 || rows == 3))) || I->dtype.code != kDLInt ||
        (I->dtype.bits != 64 && !col32) || I->dtype.lanes != 1) {
        PyErr_SetString(PyExc_ValueError, "out indices must be int64 of shape (nnz,), (2, nnz) or (3, nnz), "
                                          "or int32 of shape (nnz,) where the columns fit");
        return -1;
    }
    int64_t nnz = I->shape[I->ndim - 1];
    if (need_contiguous(a[11].t) || need_contiguous(a[12].t)) return -1;
    if (real_type(a[12].t, 1) != (int)f->A.rtype || f->B.rtype != f->A.rtype || V->ndim != 1 || V->shape[0] != nnz) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "A, B and out values must have one dtype, and out one value per index");
        return -1;
    }
    int64_t *idx = col32 ? NULL : data_of(a[11].t);   /* rows of a (rows, nnz) array: (item,) row, column */
    f->u.spgemm.col = col32 ? NULL : idx + (rows - 1) * nnz;
    f->u.spgemm.row = rows > 1 ? idx + (rows - 2) * nnz : NULL;
    f->u.spgemm.item = rows > 2 ? idx : NULL;
    f->u.spgemm.col_32 = col32 ? data_of(a[11].t) : NULL;
    f->u.spgemm.nnz = nnz;
    return 0;
}
static int spgemm_kernel(frame *f)
{
    const arg *a = f->a;
    const struct spgemm_out *s = &f->u.spgemm;
    return tsgu_spgemm(&f->A, &f->B, data_of(a[10].t), s->col, s->col_32, s->row, s->item, data_of(a[12].t), s->nnz,
                       a[13].i);
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

#define A_NAMES "A's crow_indices", "A's col_indices", "A's values"
#define B_NAMES "B's crow_indices", "B's col_indices", "B's values"
ENTRY(spgemm_count, "ttttLLLLti", spgemm_count_check, spgemm_count_kernel, NULL, "A's crow_indices",
      "A's col_indices", "B's crow_indices", "B's col_indices", "out")
ENTRY(spgemm, "ttttttLLLLttti", spgemm_check, spgemm_kernel, NULL, A_NAMES, B_NAMES, "out crow_indices",
      "out indices", "out values")
ENTRY(spgemm_grad, "ttttttLLLLtnnnni", spgemm_grad_check, spgemm_grad_kernel, NULL, A_NAMES, B_NAMES, "grad",
      "grad's col_indices", "grad's values", "grad_A", "grad_B")

PyMethodDef glue_spgemm[] = {
    METHOD(spgemm_count, "spgemm_count(Aptr, Acol, Bptr, Bcol, batch, n, l, m, out_crow, nthreads)"),
    METHOD(spgemm, "spgemm(Aptr, Acol, Aval, Bptr, Bcol, Bval, batch, n, l, m, out_crow, out_col, out_values, "
                   "nthreads)"),
    METHOD(spgemm_grad, "spgemm_grad(Aptr, Acol, Aval, Bptr, Bcol, Bval, batch, n, l, m, G, Gcol, Gval, grad_A, "
                        "grad_B, nthreads)"),
    {NULL, NULL, 0, NULL}};
