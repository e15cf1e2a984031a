/* glue_gat.c: the entry points of graph_attention (gat_forward.c, gat_grad_scores.c,
 * gat_grad_src.c).  A is the (n, m) pattern (ptr, col) of a 2-D CSR; H and F are
 * read from x (m, H, F); every array is contiguous, of x's value type (float32 or
 * float64).  Dropout is (seed, drop): see tsgu_gat_draw in tsgu_gat.h.  The optional e
 * (nnz, H), or None, is a score per entry added to s[j] + d[i] before LeakyReLU. */
#include "glue.h"

/* h: of value type rt, contiguous, shape (a, b), or (a, b, c) for c >= 0; -1 with an exception */
static int gat_array(const held *h, int rt, int64_t a, int64_t b, int64_t c)
{
    const DLTensor *t = dl(h);
    int rank = c >= 0 ? 3 : 2, ok = t->ndim == rank && t->shape[0] == a && t->shape[1] == b &&
                                    (rank == 2 || t->shape[2] == c);
    if (!ok) {
        if (rank == 3)
            PyErr_Format(PyExc_ValueError, "%s must have shape (%lld, %lld, %lld)", h->name, (long long)a,
                         (long long)b, (long long)c);
        else
            PyErr_Format(PyExc_ValueError, "%s must have shape (%lld, %lld)", h->name, (long long)a, (long long)b);
        return -1;
    }
    int got = real_type(h, 0);
    if (got < 0) return -1;
    if (got != rt) {
        PyErr_Format(PyExc_TypeError, "%s must have the dtype of x", h->name);
        return -1;
    }
    return need_contiguous(h);
}

/* the optional per-entry scores oe (None or (nnz, H)) into g->e; -1 with an exception */
static int gat_edge(call *c, PyObject *oe, const tsgu_csr *A, tsgu_gat *g)
{
    if (oe == Py_None) return 0;
    if (take(c, oe, "e") || gat_array(&c->t[c->count - 1], A->rtype, A->nnz, g->heads, -1)) return -1;
    g->e = data_of(&c->t[c->count - 1]);
    return 0;
}

/* the operands every entry point shares: A's pattern from h[0], h[1] (n x m), x (m, H, F)
 * from h[2] setting A->rtype, H and F; then s, d from h[3], h[4] unless NULL, and the
 * dropout (seed, drop of 2^24, scale); -1 with an exception */
static int gat_operands(const held *h, int64_t n, int64_t m, const held *s, const held *d,
                        unsigned long long seed, long long drop, double scale, double slope, tsgu_csr *A,
                        tsgu_gat *g)
{
    if (make_csr(&h[0], &h[1], NULL, 1, n, m, A, 0)) return -1;
    const DLTensor *X = dl(&h[2]);
    if (X->ndim != 3) {
        PyErr_SetString(PyExc_ValueError, "x must be 3-D (nodes, heads, features)");
        return -1;
    }
    int rt = real_type(&h[2], 0);
    if (rt < 0 || gat_array(&h[2], rt, m, X->shape[1], X->shape[2])) return -1;
    A->rtype = rt;
    if (drop < 0 || drop > (1 << 24)) {
        PyErr_SetString(PyExc_ValueError, "drop must be in [0, 2^24]");
        return -1;
    }
    *g = (tsgu_gat){X->shape[1], X->shape[2], data_of(&h[2]), NULL, NULL, NULL, seed, drop, scale, slope};
    if (s && (gat_array(s, rt, m, g->heads, -1) || gat_array(d, rt, n, g->heads, -1))) return -1;
    if (s) g->s = data_of(s), g->d = data_of(d);
    return 0;
}

/* ---- gat_forward(ptr, col, n, m, x, s, d, e, seed, drop, scale, slope, alpha, out, nthreads) ----
 * alpha (nnz, H), out (n, H, F): the attention probabilities and the aggregated rows. */
PyObject *py_gat_forward(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *o[7], *oe;
    long long n, m, drop;
    unsigned long long seed;
    double scale, slope;
    int nthreads, status;
    call c = {0};
    tsgu_csr A;
    tsgu_gat g;
    if (!PyArg_ParseTuple(args, "OOLLOOOOKLddOOi", &o[0], &o[1], &n, &m, &o[2], &o[3], &o[4], &oe, &seed, &drop,
                          &scale, &slope, &o[5], &o[6], &nthreads))
        return NULL;
    const char *names[7] = {"crow_indices", "col_indices", "x", "s", "d", "alpha", "out"};
    const held *h = c.t;
    if (take_all(&c, o, names, 7) || gat_operands(h, n, m, &h[3], &h[4], seed, drop, scale, slope, &A, &g) ||
        gat_array(&h[5], A.rtype, A.nnz, g.heads, -1) || gat_array(&h[6], A.rtype, n, g.heads, g.feats) ||
        gat_edge(&c, oe, &A, &g))
        return finish(&c, -1);
    void *alpha = data_of(&h[5]), *out = data_of(&h[6]);
    Py_BEGIN_ALLOW_THREADS
    status = tsgu_gat_forward(&A, &g, alpha, out, nthreads);
    Py_END_ALLOW_THREADS
    return finish(&c, status);
}

/* ---- gat_grad_scores(ptr, col, n, m, x, s, d, e, seed, drop, scale, slope, alpha, G, galpha, dz, gd,
 *                      nthreads) ----
 * G (n, H, F) out's gradient, galpha (nnz, H) alpha's or None; dz (nnz, H) the scores'
 * gradient before LeakyReLU (e's gradient), gd (n, H) d's gradient. */
PyObject *py_gat_grad_scores(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *o[9], *ogalpha, *oe;
    long long n, m, drop;
    unsigned long long seed;
    double scale, slope;
    int nthreads, status;
    call c = {0};
    tsgu_csr A;
    tsgu_gat g;
    if (!PyArg_ParseTuple(args, "OOLLOOOOKLddOOOOOi", &o[0], &o[1], &n, &m, &o[2], &o[3], &o[4], &oe, &seed, &drop,
                          &scale, &slope, &o[5], &o[6], &ogalpha, &o[7], &o[8], &nthreads))
        return NULL;
    const char *names[9] = {"crow_indices", "col_indices", "x", "s", "d", "alpha", "grad", "dz", "grad_d"};
    const held *h = c.t;
    if (take_all(&c, o, names, 9) || gat_operands(h, n, m, &h[3], &h[4], seed, drop, scale, slope, &A, &g) ||
        gat_array(&h[5], A.rtype, A.nnz, g.heads, -1) || gat_array(&h[6], A.rtype, n, g.heads, g.feats) ||
        gat_array(&h[7], A.rtype, A.nnz, g.heads, -1) || gat_array(&h[8], A.rtype, n, g.heads, -1) ||
        gat_edge(&c, oe, &A, &g))
        return finish(&c, -1);
    const void *galpha = NULL;
    if (ogalpha != Py_None) {
        if (take(&c, ogalpha, "grad_alpha") || gat_array(&c.t[c.count - 1], A.rtype, A.nnz, g.heads, -1))
            return finish(&c, -1);
        galpha = data_of(&c.t[c.count - 1]);
    }
    const void *alpha = data_of(&h[5]), *G = data_of(&h[6]);
    void *dz = data_of(&h[7]), *gd = data_of(&h[8]);
    Py_BEGIN_ALLOW_THREADS
    status = tsgu_gat_grad_scores(&A, &g, alpha, G, galpha, dz, gd, nthreads);
    Py_END_ALLOW_THREADS
    return finish(&c, status);
}

/* ---- gat_grad_src(ptr, col, n, m, x, seed, drop, scale, alpha, G, dz, gx, gs, nthreads) ----
 * gx (m, H, F) and gs (m, H): the gradients of x and s (x is read for its shape). */
PyObject *py_gat_grad_src(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *o[8];
    long long n, m, drop;
    unsigned long long seed;
    double scale;
    int nthreads, status;
    call c = {0};
    tsgu_csr A;
    tsgu_gat g;
    if (!PyArg_ParseTuple(args, "OOLLOKLdOOOOOi", &o[0], &o[1], &n, &m, &o[2], &seed, &drop, &scale, &o[3], &o[4],
                          &o[5], &o[6], &o[7], &nthreads))
        return NULL;
    const char *names[8] = {"crow_indices", "col_indices", "x", "alpha", "grad", "dz", "grad_x", "grad_s"};
    const held *h = c.t;
    if (take_all(&c, o, names, 8) || gat_operands(h, n, m, NULL, NULL, seed, drop, scale, 0, &A, &g) ||
        gat_array(&h[3], A.rtype, A.nnz, g.heads, -1) || gat_array(&h[4], A.rtype, n, g.heads, g.feats) ||
        gat_array(&h[5], A.rtype, A.nnz, g.heads, -1) || gat_array(&h[6], A.rtype, m, g.heads, g.feats) ||
        gat_array(&h[7], A.rtype, m, g.heads, -1))
        return finish(&c, -1);
    const void *alpha = data_of(&h[3]), *G = data_of(&h[4]), *dz = data_of(&h[5]);
    void *gx = data_of(&h[6]), *gs = data_of(&h[7]);
    Py_BEGIN_ALLOW_THREADS
    status = tsgu_gat_grad_src(&A, &g, alpha, G, dz, gx, gs, nthreads);
    Py_END_ALLOW_THREADS
    return finish(&c, status);
}
