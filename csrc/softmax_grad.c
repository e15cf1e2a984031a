#ifndef TSGU_IN_TEMPLATE
/* softmax_grad.c: the gradient w.r.t. the values of softmax_rows.c, from its
 * output y and the output's gradient g, row by row, for each of H heads
 *     softmax:      gv_eh = y_eh (g_eh - sum_{f in row r} g_fh y_fh)
 *     log-softmax:  gv_eh = g_eh - exp(y_eh) sum_{f in row r} g_fh
 * for every entry e of global row r and head h; y, g and gv are (nnz, H), at
 * e*H + h.  Only the row pointers are read (checked as they are read); a row's
 * sum runs in four fixed lanes by the entry's place in the row (one head: in
 * registers, the output vectorized along the row; several: vectorized along the
 * heads, with the same sums), by one thread, so the bits do not depend on the
 * thread count.  16-bit arrays are
 * computed in float and rounded once. */
#include "tsgu.h"
#include "tsgu_parallel.h"
#include "tsgu_exp.h" /* last: its pragmas apply to the rest of the file */

typedef struct {
    const tsgu_csr *A;
    int64_t heads;     /* H */
    const void *y, *g; /* the output and its gradient, (nnz, H) */
    int is_log;        /* 1: of log-softmax */
    void *out;         /* gv, (nnz, H) */
} softmax_grad_ctx;

#define TSGU_HEADS 8 /* heads of a row done together */

#define TSGU_HALF_TOO 1
#define TSGU_TEMPLATE_FILE "softmax_grad.c"
#include "tsgu_template.h"

int tsgu_softmax_grad(const tsgu_csr *A, int64_t heads, const void *y, const void *g, int is_log, void *out,
                      int nthreads)
{
    softmax_grad_ctx x = {A, heads, y, g, is_log, out};
    return tsgu_parallel_rows(A, 4 * heads, nthreads, TSGU_PICK_HALF(softmax_grad_range, A->rtype, A->itype), &x);
}

#else /* template body: real_t, acc_t, idx_t, TSGU_LOAD, TSGU_STORE, TSGU_FN */

#include "tsgu_rows.h"
#include "tsgu_softmax_grad.h"

/* hb <= TSGU_HEADS heads of H of one row of len entries, starting at y, g and out */
TSGU_ISA_ATTR TSGU_ALWAYS_INLINE void TSGU_FN(softmax_grad_heads)(const real_t *y, const real_t *g, real_t *out,
                                                                  int64_t len, int64_t H, int64_t hb, int is_log)
{
    double s[4][TSGU_HEADS] = {{0}};
    acc_t sum[TSGU_HEADS];
    if (is_log)   /* is_log a constant in each loop: taken out of them */
        for (int64_t e = 0; e < len; e++)
            for (int64_t h = 0; h < hb; h++)
                s[e & 3][h] += TSGU_FN(softmax_grad_term)(TSGU_LOAD(y[e * H + h]), TSGU_LOAD(g[e * H + h]), 1);
    else
        for (int64_t e = 0; e < len; e++)
            for (int64_t h = 0; h < hb; h++)
                s[e & 3][h] += TSGU_FN(softmax_grad_term)(TSGU_LOAD(y[e * H + h]), TSGU_LOAD(g[e * H + h]), 0);
    for (int64_t h = 0; h < hb; h++) sum[h] = (acc_t)((s[0][h] + s[1][h]) + (s[2][h] + s[3][h]));
    if (is_log)
        for (int64_t e = 0; e < len; e++)
            for (int64_t h = 0; h < hb; h++) {
                const acc_t ye = TSGU_LOAD(y[e * H + h]);
                out[e * H + h] = TSGU_STORE(TSGU_FN(softmax_grad_of)(ye, TSGU_EXP(ye), TSGU_LOAD(g[e * H + h]), sum[h], 1));
            }
    else
        for (int64_t e = 0; e < len; e++)
            for (int64_t h = 0; h < hb; h++)
                out[e * H + h] = TSGU_STORE(TSGU_FN(softmax_grad_of)(TSGU_LOAD(y[e * H + h]), 0, TSGU_LOAD(g[e * H + h]),
                                                                    sum[h], 0));
}

/* one head: the same lanes, kept in registers, the output vectorized along the row */
TSGU_ISA_ATTR TSGU_ALWAYS_INLINE void TSGU_FN(softmax_grad_row)(const real_t *y, const real_t *g, real_t *out,
                                                                int64_t len, int is_log)
{
    double s[4] = {0, 0, 0, 0};
    int64_t e = 0;
    for (; e + 4 <= len; e += 4)
        for (int l = 0; l < 4; l++) s[l] += TSGU_FN(softmax_grad_term)(TSGU_LOAD(y[e + l]), TSGU_LOAD(g[e + l]), is_log);
    for (int l = 0; l < 3; l++)
        if (e + l < len) s[l] += TSGU_FN(softmax_grad_term)(TSGU_LOAD(y[e + l]), TSGU_LOAD(g[e + l]), is_log);
    const acc_t sum = (acc_t)((s[0] + s[1]) + (s[2] + s[3]));
    if (is_log)
        for (e = 0; e < len; e++) {                                                 /* vectorized */
            const acc_t ye = TSGU_LOAD(y[e]);
            out[e] = TSGU_STORE(TSGU_FN(softmax_grad_of)(ye, TSGU_EXP(ye), TSGU_LOAD(g[e]), sum, 1));
        }
    else
        for (e = 0; e < len; e++) out[e] = TSGU_STORE(TSGU_FN(softmax_grad_of)(TSGU_LOAD(y[e]), 0, TSGU_LOAD(g[e]), sum, 0));
}

TSGU_ISA_ATTR static int TSGU_FN(softmax_grad_range)(void *vctx, int64_t r0, int64_t r1)
{
    const softmax_grad_ctx *x = vctx;
    const tsgu_csr *A = x->A;
    const real_t *y = x->y, *g = x->g;
    real_t *out = x->out;
    const int64_t n = A->nrows, H = x->heads;
    for (int64_t r = r0; r < r1; r++) {
        int64_t k = tsgu_item_of(A, r), i = r - k * n, start, end;
        if (!TSGU_FN(row_entries)(A, k, i, &start, &end)) return TSGU_EPTR_ORDER;
        if (H == 1) {
            TSGU_FN(softmax_grad_row)(y + start, g + start, out + start, end - start, x->is_log);
            continue;
        }
        int64_t h0 = 0, q = start * H, len = end - start;
        for (; h0 + TSGU_HEADS <= H; h0 += TSGU_HEADS)  /* whole groups: their width a constant */
            TSGU_FN(softmax_grad_heads)(y + q + h0, g + q + h0, out + q + h0, len, H, TSGU_HEADS, x->is_log);
        if (h0 < H)
            TSGU_FN(softmax_grad_heads)(y + q + h0, g + q + h0, out + q + h0, len, H, H - h0, x->is_log);
    }
    return TSGU_OK;
}

#endif
