/* glue_order.c: the entry point of the reorderings (rcm.c). */
#include "glue.h"

/* ---- rcm(ptr, col, n, symmetric, perm) ----
 * perm (int64, n): the reverse Cuthill-McKee ordering of the n x n pattern (ptr, col) */
static int rcm_check(frame *f)
{
    const arg *a = f->a;
    long long n = a[2].L;
    if (make_csr(a[0].t, a[1].t, NULL, 1, n, n, &f->A, 0)) return -1;
    if (index_type(a[4].t) != TSGU_I64 || need_contiguous(a[4].t) || numel(dl(a[4].t)) != n) {
        if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "perm must be int64 of %lld nodes", n);
        return -1;
    }
    return 0;
}
static int rcm_kernel(frame *f) { return tsgu_rcm(&f->A, f->a[3].i, data_of(f->a[4].t)); }

ENTRY(rcm, "ttLpt", rcm_check, rcm_kernel, NULL, CSR_NAMES, "perm")

PyMethodDef glue_order[] = {
    METHOD(rcm, "rcm(crow, col, n, symmetric, perm): the reverse Cuthill-McKee ordering into perm"),
    {NULL, NULL, 0, NULL}};
