/* glue_gat.c: the entry points of graph_attention (gat_forward.c, gat_grad_scores.c,
 * gat_grad_src.c) and graph_attention_v2 (gatv2_forward.c, and gatv2_grad_rows.c,
 * gatv2_grad_src.c, gatv2_grad_att.c run one after another).  A is the (n, m) pattern
 * (ptr, col) of a 2-D CSR, the arguments 0-3; the features x (GATv2: xl), argument 4,
 * are (m, H, F) and give H and F; every array is contiguous, of x's value type (float32
 * or float64).  Dropout is (seed, drop): see tsgu_gat_draw in tsgu_gat.h.  Optional
 * arrays are None for none: GAT's e (nnz, H), a score per entry added to s[j] + d[i]
 * before LeakyReLU; GATv2's et (nnz, H, C), an edge term added inside LeakyReLU, and
 * b (nnz, H), a score added after the sum over features.  The columns are checked by
 * the kernels before any is read through. */
#include "glue.h"

/* h: NULL (None), or of x's value type, contiguous, of shape (a, b), or (a, b, c) for
 * c >= 0; -1 with an exception */
static int att_array(const held *h, const held *x, int64_t a, int64_t b, int64_t c)
{
    if (!h) return 0;
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
    if (got != real_type(x, 0)) {
        PyErr_Format(PyExc_TypeError, "%s must have the dtype of %s", h->name, x->name);
        return -1;
    }
    return need_contiguous(h);
}

/* what both share: A's pattern and the features x (arguments 0-4) into *A (its rtype x's),
 * *H and *F; drop (of 2^24) in range; -1 with an exception */
static int att_operands(const arg *a, long long drop, tsgu_csr *A, int64_t *H, int64_t *F)
{
    const held *x = a[4].t;
    if (make_csr(a[0].t, a[1].t, NULL, 1, a[2].L, a[3].L, A, 0)) return -1;
    if (dl(x)->ndim != 3) {
        PyErr_Format(PyExc_ValueError, "%s must be 3-D (nodes, heads, features)", x->name);
        return -1;
    }
    int rt = real_type(x, 0);
    *H = dl(x)->shape[1];
    *F = dl(x)->shape[2];
    if (rt < 0 || att_array(x, x, a[3].L, *H, *F)) return -1;
    A->rtype = rt;
    if (drop < 0 || drop > (1 << 24)) {
        PyErr_SetString(PyExc_ValueError, "drop must be in [0, 2^24]");
        return -1;
    }
    return 0;
}

/* GAT's operands into f->A, f->u.gat: A and x, then with scores s (m, H), d (n, H), e and
 * (seed, drop, scale, slope) from the arguments 5-11, else (seed, drop, scale) from 5-7 */
static int gat_operands(frame *f, int scores)
{
    const arg *a = f->a, *p = &a[scores ? 8 : 5];
    const held *x = a[4].t;
    int64_t H, F;
    if (att_operands(a, p[1].L, &f->A, &H, &F)) return -1;
    f->u.gat = (tsgu_gat){H, F, data_of(x), NULL, NULL, NULL, p[0].K, p[1].L, p[2].d, scores ? p[3].d : 0};
    if (!scores) return 0;
    if (att_array(a[5].t, x, a[3].L, H, -1) || att_array(a[6].t, x, a[2].L, H, -1) ||
        att_array(a[7].t, x, f->A.nnz, H, -1))
        return -1;
    f->u.gat.s = data_of(a[5].t);
    f->u.gat.d = data_of(a[6].t);
    f->u.gat.e = data_or_null(a[7].t);
    return 0;
}

/* ---- gat_forward(ptr, col, n, m, x, s, d, e, seed, drop, scale, slope, alpha, out, nthreads) ----
 * alpha (nnz, H), out (n, H, F): the attention probabilities and the aggregated rows. */
static int gat_forward_check(frame *f)
{
    const arg *a = f->a;
    const tsgu_gat *g = &f->u.gat;
    return gat_operands(f, 1) || att_array(a[12].t, a[4].t, f->A.nnz, g->heads, -1) ||
           att_array(a[13].t, a[4].t, a[2].L, g->heads, g->feats);
}
static int gat_forward_kernel(frame *f)
{
    const arg *a = f->a;
    return tsgu_gat_forward(&f->A, &f->u.gat, data_of(a[12].t), data_of(a[13].t), a[14].i);
}

/* ---- gat_grad_scores(ptr, col, n, m, x, s, d, e, seed, drop, scale, slope, alpha, G, galpha, dz, gd,
 *                      nthreads) ----
 * G (n, H, F) out's gradient, galpha (nnz, H) alpha's or None; dz (nnz, H) the scores'
 * gradient before LeakyReLU (e's gradient), gd (n, H) d's gradient. */
static int gat_grad_scores_check(frame *f)
{
    const arg *a = f->a;
    const held *x = a[4].t;
    const tsgu_gat *g = &f->u.gat;
    if (gat_operands(f, 1)) return -1;
    int64_t nnz = f->A.nnz, n = a[2].L, H = g->heads;
    return att_array(a[12].t, x, nnz, H, -1) || att_array(a[13].t, x, n, H, g->feats) ||
           att_array(a[14].t, x, nnz, H, -1) || att_array(a[15].t, x, nnz, H, -1) || att_array(a[16].t, x, n, H, -1);
}
static int gat_grad_scores_kernel(frame *f)
{
    const arg *a = f->a;
    return tsgu_gat_grad_scores(&f->A, &f->u.gat, data_of(a[12].t), data_of(a[13].t), data_or_null(a[14].t),
                                data_of(a[15].t), data_of(a[16].t), a[17].i);
}

/* ---- gat_grad_src(ptr, col, n, m, x, seed, drop, scale, alpha, G, dz, gx, gs, nthreads) ----
 * gx (m, H, F) and gs (m, H): the gradients of x and s (x is read for its shape). */
static int gat_grad_src_check(frame *f)
{
    const arg *a = f->a;
    const held *x = a[4].t;
    const tsgu_gat *g = &f->u.gat;
    if (gat_operands(f, 0)) return -1;
    int64_t nnz = f->A.nnz, n = a[2].L, m = a[3].L, H = g->heads, F = g->feats;
    return att_array(a[8].t, x, nnz, H, -1) || att_array(a[9].t, x, n, H, F) || att_array(a[10].t, x, nnz, H, -1) ||
           att_array(a[11].t, x, m, H, F) || att_array(a[12].t, x, m, H, -1);
}
static int gat_grad_src_kernel(frame *f)
{
    const arg *a = f->a;
    return tsgu_gat_grad_src(&f->A, &f->u.gat, data_of(a[8].t), data_of(a[9].t), data_of(a[10].t),
                             data_of(a[11].t), data_of(a[12].t), a[13].i);
}

/* GATv2's operands into f->A, f->u.gatv2: A and xl, xr (n, H, C), att (H, C), et from the
 * arguments 4-7, (seed, drop, scale, slope) from p[0..3] */
static int gatv2_operands(frame *f, const arg *p)
{
    const arg *a = f->a;
    const held *x = a[4].t;
    int64_t H, C;
    if (att_operands(a, p[1].L, &f->A, &H, &C) || att_array(a[5].t, x, a[2].L, H, C) ||
        att_array(a[6].t, x, H, C, -1) || att_array(a[7].t, x, f->A.nnz, H, C))
        return -1;
    f->u.gatv2 = (tsgu_gatv2){H,      C,      data_of(x), data_of(a[5].t), data_of(a[6].t), data_or_null(a[7].t), NULL,
                              p[0].K, p[1].L, p[2].d,     p[3].d};
    return 0;
}

/* ---- gatv2_forward(ptr, col, n, m, xl, xr, att, et, b, seed, drop, scale, slope, alpha, out, nthreads) ----
 * alpha (nnz, H), out (n, H, C): the attention probabilities and the aggregated rows. */
static int gatv2_forward_check(frame *f)
{
    const arg *a = f->a;
    const held *x = a[4].t;
    tsgu_gatv2 *g = &f->u.gatv2;
    if (gatv2_operands(f, &a[9]) || att_array(a[13].t, x, f->A.nnz, g->heads, -1) ||
        att_array(a[14].t, x, a[2].L, g->heads, g->feats) || att_array(a[8].t, x, f->A.nnz, g->heads, -1))
        return -1;
    g->b = data_or_null(a[8].t);
    return 0;
}
static int gatv2_forward_kernel(frame *f)
{
    const arg *a = f->a;
    return tsgu_gatv2_forward(&f->A, &f->u.gatv2, data_of(a[13].t), data_of(a[14].t), a[15].i);
}

/* ---- gatv2_grad(ptr, col, n, m, xl, xr, att, et, seed, drop, scale, slope, alpha, G, galpha,
 *                 dz, gxl, gxr, arows, gatt, get, nthreads) ----
 * G (n, H, C) out's gradient, galpha (nnz, H) alpha's or None; written: dz (nnz, H) the
 * scores' gradient (b's), gxl (m, H, C), gxr (n, H, C), arows (n, H, C) a workspace (each
 * row's share of att's gradient), gatt (H, C), get (nnz, H, C) et's gradient or None. */
static int gatv2_grad_check(frame *f)
{
    const arg *a = f->a;
    const held *x = a[4].t;
    const tsgu_gatv2 *g = &f->u.gatv2;
    if (gatv2_operands(f, &a[8])) return -1;
    int64_t nnz = f->A.nnz, n = a[2].L, m = a[3].L, H = g->heads, C = g->feats;
    if (att_array(a[12].t, x, nnz, H, -1) || att_array(a[13].t, x, n, H, C) || att_array(a[15].t, x, nnz, H, -1) ||
        att_array(a[16].t, x, m, H, C) || att_array(a[17].t, x, n, H, C) || att_array(a[18].t, x, n, H, C) ||
        att_array(a[19].t, x, H, C, -1) || att_array(a[14].t, x, nnz, H, -1) || att_array(a[20].t, x, nnz, H, C))
        return -1;
    if (!a[20].t != !a[7].t) {
        PyErr_SetString(PyExc_ValueError, "grad_et must be given with et, and only with it");
        return -1;
    }
    return 0;
}
static int gatv2_grad_kernel(frame *f)
{
    const arg *a = f->a;
    const tsgu_gatv2 *g = &f->u.gatv2;
    const void *alpha = data_of(a[12].t), *G = data_of(a[13].t);
    void *dz = data_of(a[15].t), *arows = data_of(a[18].t);
    int status = tsgu_gatv2_grad_rows(&f->A, g, alpha, G, data_or_null(a[14].t), dz, data_of(a[17].t), arows,
                                      data_or_null(a[20].t), a[21].i);
    if (status == TSGU_OK) status = tsgu_gatv2_grad_src(&f->A, g, alpha, G, dz, data_of(a[16].t), a[21].i);
    if (status == TSGU_OK)
        status = tsgu_gatv2_grad_att(a[2].L, g->heads * g->feats, f->A.rtype, arows, data_of(a[19].t), a[21].i);
    return status;
}

ENTRY(gat_forward, "ttLLtttnKLddtti", gat_forward_check, gat_forward_kernel, NULL, CSR_NAMES, "x", "s", "d", "e",
      "alpha", "out")
ENTRY(gat_grad_scores, "ttLLtttnKLddttntti", gat_grad_scores_check, gat_grad_scores_kernel, NULL, CSR_NAMES, "x", "s",
      "d", "e", "alpha", "grad", "grad_alpha", "dz", "grad_d")
ENTRY(gat_grad_src, "ttLLtKLdttttti", gat_grad_src_check, gat_grad_src_kernel, NULL, CSR_NAMES, "x", "alpha", "grad",
      "dz", "grad_x", "grad_s")
ENTRY(gatv2_forward, "ttLLtttnnKLddtti", gatv2_forward_check, gatv2_forward_kernel, NULL, CSR_NAMES, "xl", "xr",
      "att", "et", "b", "alpha", "out")
ENTRY(gatv2_grad, "ttLLtttnKLddttntttttni", gatv2_grad_check, gatv2_grad_kernel, NULL, CSR_NAMES, "xl", "xr", "att",
      "et", "alpha", "grad", "grad_alpha", "dz", "grad_xl", "grad_xr", "arows", "grad_att", "grad_et")

PyMethodDef glue_gat[] = {
    METHOD(gat_forward, "gat_forward(crow, col, n, m, x, s, d, e, seed, drop, scale, slope, alpha, out, nthreads)"),
    METHOD(gat_grad_scores, "gat_grad_scores(crow, col, n, m, x, s, d, e, seed, drop, scale, slope, alpha, grad, "
                            "grad_alpha, dz, grad_d, nthreads)"),
    METHOD(gat_grad_src, "gat_grad_src(crow, col, n, m, x, seed, drop, scale, alpha, grad, dz, grad_x, grad_s, "
                         "nthreads)"),
    METHOD(gatv2_forward, "gatv2_forward(crow, col, n, m, xl, xr, att, et, b, seed, drop, scale, slope, alpha, out, "
                          "nthreads)"),
    METHOD(gatv2_grad, "gatv2_grad(crow, col, n, m, xl, xr, att, et, seed, drop, scale, slope, alpha, grad, "
                       "grad_alpha, dz, grad_xl, grad_xr, arows, grad_att, grad_et, nthreads)"),
    {NULL, NULL, 0, NULL}};
