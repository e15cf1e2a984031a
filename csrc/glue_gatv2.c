/* glue_gatv2.c: the entry points of graph_attention_v2 (gatv2_forward.c, and
 * gatv2_grad_rows.c, gatv2_grad_src.c, gatv2_grad_att.c run one after another).  A is
 * the (n, m) pattern (ptr, col) of a 2-D CSR; H and C are read from xl (m, H, C); every
 * array is contiguous, of xl's value type (float32 or float64).  Dropout is (seed, drop):
 * see tsgu_gat_draw in tsgu_gat.h.  The optional et (nnz, H, C) is an edge term added
 * inside LeakyReLU, the optional b (nnz, H) a score added after the sum over features;
 * None for none.  The columns are checked by the kernels before any is read through. */
#include "glue.h"

/* h: of value type rt, contiguous, shape (a, b) or, for c >= 0, (a, b, c); -1 with an exception */
static int v2_array(const held *h, int rt, int64_t a, int64_t b, int64_t c)
{
    const DLTensor *t = dl(h);
    int rank = c >= 0 ? 3 : 2;
    if (!(t->ndim == rank && t->shape[0] == a && t->shape[1] == b && (rank == 2 || t->shape[2] == c))) {
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
        PyErr_Format(PyExc_TypeError, "%s must have the dtype of xl", h->name);
        return -1;
    }
    return need_contiguous(h);
}

/* an optional array o (None, or shape (a, b[, c])) taken as `name`; *p its data or NULL */
static int v2_optional(call *c, PyObject *o, const char *name, int rt, int64_t a, int64_t b, int64_t d,
                       const void **p)
{
    *p = NULL;
    if (o == Py_None) return 0;
    if (take(c, o, name) || v2_array(&c->t[c->count - 1], rt, a, b, d)) return -1;
    *p = data_of(&c->t[c->count - 1]);
    return 0;
}

/* A from h[0], h[1] (n x m); xl (m, H, C), xr (n, H, C), att (H, C) from h[2..4], setting
 * A->rtype; et (nnz, H, C) from oet; the dropout (seed, drop of 2^24, scale) and slope;
 * -1 with an exception */
static int v2_operands(call *c, int64_t n, int64_t m, PyObject *oet, unsigned long long seed, long long drop,
                       double scale, double slope, tsgu_csr *A, tsgu_gatv2 *g)
{
    const held *h = c->t;
    if (make_csr(&h[0], &h[1], NULL, 1, n, m, A, 0)) return -1;
    const DLTensor *XL = dl(&h[2]);
    if (XL->ndim != 3) {
        PyErr_SetString(PyExc_ValueError, "xl must be 3-D (nodes, heads, features)");
        return -1;
    }
    int rt = real_type(&h[2], 0);
    int64_t H = XL->shape[1], C = XL->shape[2];
    if (rt < 0 || v2_array(&h[2], rt, m, H, C) || v2_array(&h[3], rt, n, H, C) || v2_array(&h[4], rt, H, C, -1))
        return -1;
    A->rtype = rt;
    if (drop < 0 || drop > (1 << 24)) {
        PyErr_SetString(PyExc_ValueError, "drop must be in [0, 2^24]");
        return -1;
    }
    *g = (tsgu_gatv2){H, C, data_of(&h[2]), data_of(&h[3]), data_of(&h[4]), NULL, NULL, seed, drop, scale, slope};
    return v2_optional(c, oet, "et", rt, A->nnz, H, C, &g->et);
}

/* ---- gatv2_forward(ptr, col, n, m, xl, xr, att, et, b, seed, drop, scale, slope, alpha, out, nthreads) ----
 * alpha (nnz, H), out (n, H, C): the attention probabilities and the aggregated rows. */
PyObject *py_gatv2_forward(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *o[7], *oet, *ob;
    long long n, m, drop;
    unsigned long long seed;
    double scale, slope;
    int nthreads, status;
    call c = {0};
    tsgu_csr A;
    tsgu_gatv2 g;
    if (!PyArg_ParseTuple(args, "OOLLOOOOOKLddOOi", &o[0], &o[1], &n, &m, &o[2], &o[3], &o[4], &oet, &ob, &seed,
                          &drop, &scale, &slope, &o[5], &o[6], &nthreads))
        return NULL;
    const char *names[7] = {"crow_indices", "col_indices", "xl", "xr", "att", "alpha", "out"};
    const held *h = c.t;
    if (take_all(&c, o, names, 7) || v2_operands(&c, n, m, oet, seed, drop, scale, slope, &A, &g) ||
        v2_array(&h[5], A.rtype, A.nnz, g.heads, -1) || v2_array(&h[6], A.rtype, n, g.heads, g.feats) ||
        v2_optional(&c, ob, "b", A.rtype, A.nnz, g.heads, -1, &g.b))
        return finish(&c, -1);
    void *alpha = data_of(&h[5]), *out = data_of(&h[6]);
    Py_BEGIN_ALLOW_THREADS
    status = tsgu_gatv2_forward(&A, &g, alpha, out, nthreads);
    Py_END_ALLOW_THREADS
    return finish(&c, status);
}

/* ---- gatv2_grad(ptr, col, n, m, xl, xr, att, et, seed, drop, scale, slope, alpha, G, galpha,
 *                 dz, gxl, gxr, arows, gatt, get, nthreads) ----
 * G (n, H, C) out's gradient, galpha (nnz, H) alpha's or None; written: dz (nnz, H) the
 * scores' gradient (b's), gxl (m, H, C), gxr (n, H, C), arows (n, H, C) a workspace (each
 * row's share of att's gradient), gatt (H, C), get (nnz, H, C) et's gradient or None. */
PyObject *py_gatv2_grad(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *o[12], *oet, *ogalpha, *oget;
    long long n, m, drop;
    unsigned long long seed;
    double scale, slope;
    int nthreads, status;
    call c = {0};
    tsgu_csr A;
    tsgu_gatv2 g;
    if (!PyArg_ParseTuple(args, "OOLLOOOOKLddOOOOOOOOOi", &o[0], &o[1], &n, &m, &o[2], &o[3], &o[4], &oet, &seed,
                          &drop, &scale, &slope, &o[5], &o[6], &ogalpha, &o[7], &o[8], &o[9], &o[10], &o[11], &oget,
                          &nthreads))
        return NULL;
    const char *names[12] = {"crow_indices", "col_indices", "xl", "xr", "att", "alpha", "grad", "dz", "grad_xl",
                             "grad_xr", "arows", "grad_att"};
    const held *h = c.t;
    const void *galpha, *get;
    if (take_all(&c, o, names, 12) || v2_operands(&c, n, m, oet, seed, drop, scale, slope, &A, &g))
        return finish(&c, -1);
    int rt = A.rtype;
    int64_t H = g.heads, C = g.feats;
    if (v2_array(&h[5], rt, A.nnz, H, -1) || v2_array(&h[6], rt, n, H, C) || v2_array(&h[7], rt, A.nnz, H, -1) ||
        v2_array(&h[8], rt, m, H, C) || v2_array(&h[9], rt, n, H, C) || v2_array(&h[10], rt, n, H, C) ||
        v2_array(&h[11], rt, H, C, -1) || v2_optional(&c, ogalpha, "grad_alpha", rt, A.nnz, H, -1, &galpha) ||
        v2_optional(&c, oget, "grad_et", rt, A.nnz, H, C, &get))
        return finish(&c, -1);
    if ((get == NULL) != (g.et == NULL)) {
        PyErr_SetString(PyExc_ValueError, "grad_et must be given with et, and only with it");
        return finish(&c, -1);
    }
    const void *alpha = data_of(&h[5]), *G = data_of(&h[6]);
    void *dz = data_of(&h[7]), *gxl = data_of(&h[8]), *gxr = data_of(&h[9]), *arows = data_of(&h[10]);
    void *gatt = data_of(&h[11]);
    Py_BEGIN_ALLOW_THREADS
    status = tsgu_gatv2_grad_rows(&A, &g, alpha, G, galpha, dz, gxr, arows, (void *)get, nthreads);
    if (status == TSGU_OK) status = tsgu_gatv2_grad_src(&A, &g, alpha, G, dz, gxl, nthreads);
    if (status == TSGU_OK) status = tsgu_gatv2_grad_att(n, H * C, A.rtype, arows, gatt, nthreads);
    Py_END_ALLOW_THREADS
    return finish(&c, status);
}
