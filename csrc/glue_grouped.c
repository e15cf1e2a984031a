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
PyObject *py_group_rows(PyObject *self, PyObject *args)
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

PyObject *py_grouped_mm(PyObject *self, PyObject *args)
{
    (void)self;
    return grouped_either(args, 0);
}

PyObject *py_grouped_mm_tn(PyObject *self, PyObject *args)
{
    (void)self;
    return grouped_either(args, 1);
}
