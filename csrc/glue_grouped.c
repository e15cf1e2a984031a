/* glue_grouped.c: the entry points of gather_mm and segment_mm (group_rows.c,
 * grouped_mm.c, grouped_mm_tn.c). */
#include "glue.h"

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
static int group_rows_check(frame *f)
{
    const arg *a = f->a;
    long long R = a[1].L;
    if ((f->u.groups.itype = index_type(a[0].t)) < 0 || need_contiguous(a[0].t)) return -1;
    if (R < 0 || numel(dl(a[2].t)) != R + 1) {
        PyErr_SetString(PyExc_ValueError, "off must hold R+1 offsets, R >= 0");
        return -1;
    }
    return make_groups(a[2].t, a[3].t, numel(dl(a[0].t)), &f->u.groups.g);
}
static int group_rows_kernel(frame *f)
{
    const arg *a = f->a;
    const tsgu_groups *g = &f->u.groups.g;
    return tsgu_group_rows(data_of(a[0].t), f->u.groups.itype, numel(dl(a[0].t)), a[1].L, (int64_t *)g->off,
                           (int64_t *)g->perm);
}

/* ---- grouped_mm(off, perm, A, M, C, nthreads) / grouped_mm_tn(off, perm, A, G, out, nthreads) ----
 * C[i,:] = A[i,:] @ M[r] for the rows i of group r: A (n, K), M (R, K, P), C (n, P);
 * out[r] = sum over the rows i of group r of A[i,:]^T G[i,:]: G (n, P), out (R, K, P).
 * perm may be None (group r is the rows off[r]..off[r+1]-1). */
static int grouped_either(frame *f, int tn)
{
    const arg *a = f->a;
    int rt = real_type(a[2].t, 0);
    if (rt < 0) return -1;
    if (dl(a[2].t)->ndim != 2) {
        PyErr_SetString(PyExc_ValueError, "a must be 2D");
        return -1;
    }
    int64_t n = dl(a[2].t)->shape[0], K = dl(a[2].t)->shape[1], P = last_dim(a[4].t);
    tsgu_groups *g = &f->u.groups.g;
    return make_groups(a[0].t, a[1].t, n, g) || make_dense(a[2].t, 1, n, K, rt, &f->Z) ||
           (tn ? make_dense(a[3].t, 1, n, P, rt, &f->X) || make_dense(a[4].t, g->ngroups, K, P, rt, &f->Y)
               : make_dense(a[3].t, g->ngroups, K, P, rt, &f->X) || make_dense(a[4].t, 1, n, P, rt, &f->Y));
}
static int grouped_mm_check(frame *f) { return grouped_either(f, 0); }
static int grouped_mm_tn_check(frame *f) { return grouped_either(f, 1); }
static int grouped_mm_kernel(frame *f) { return tsgu_grouped_mm(&f->u.groups.g, &f->Z, &f->X, &f->Y, f->a[5].i); }
static int grouped_mm_tn_kernel(frame *f)
{
    return tsgu_grouped_mm_tn(&f->u.groups.g, &f->Z, &f->X, &f->Y, f->a[5].i);
}

ENTRY(group_rows, "tLtt", group_rows_check, group_rows_kernel, NULL, "idx_b", "off", "perm")
ENTRY(grouped_mm, "tnttti", grouped_mm_check, grouped_mm_kernel, NULL, "off", "perm", "a", "b", "out")
ENTRY(grouped_mm_tn, "tnttti", grouped_mm_tn_check, grouped_mm_tn_kernel, NULL, "off", "perm", "a", "grad", "out")

PyMethodDef glue_grouped[] = {
    METHOD(group_rows, "group_rows(idx, R, off, perm): counting sort by relation"),
    METHOD(grouped_mm, "grouped_mm(off, perm, a, b, out, nthreads)"),
    METHOD(grouped_mm_tn, "grouped_mm_tn(off, perm, a, grad, out, nthreads)"),
    {NULL, NULL, 0, NULL}};
