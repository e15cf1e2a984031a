/* tsgu_softmax.h: the softmax, or log-softmax, of one row's stored values, for each
 * of H heads (softmax_rows.c, softmax_coo.c: the same bits from either), a template
 * fragment (no include guard): a kernel's template body includes it once per variant,
 * with real_t, acc_t, TSGU_LOAD, TSGU_STORE, TSGU_NARROW and TSGU_FN defined, after
 * tsgu_exp.h (whose pragmas must cover it).  With TSGU_SOFTMAX_TERMS_ONLY defined, only
 * the per-entry terms softmax_of and softmax_c (softmax_cols.c: a column's results
 * from its max and sum).
 *     y_eh = exp(v_eh - M_h) / S_h        (log: y_eh = (v_eh - M_h) - log S_h)
 *     M_h = max_{f in the row} v_fh,  S_h = sum_{f in the row} exp(v_fh - M_h)
 * for the row's entries e and head h; the values are (len, H), v_eh at e*H + h.
 * Per head: one pass for the max, one for the shifted sum of exps (tsgu_exp.h's
 * vectorized exp, summed in four fixed lanes by the entry's place in the row), one
 * writing y (keep, for softmax in float or double: the exps, kept in y by the second
 * pass, times the reciprocal of their sum).  v - M is taken before log S is
 * subtracted: M + log S rounded to float would lose v's low bits at large magnitudes.
 * As in torch.softmax, M is not clamped: a row holding +inf (inf - inf) or only -inf
 * (-inf + inf) is NaN throughout, and a -inf beside finite values gives 0 (log: -inf).
 * One head is vectorized along the row (its max in eight lanes: the max is exact in
 * any order, NaNs skipped either way; a NaN then makes S, so the whole row, NaN),
 * several along the heads, with the same sums, so that head h of H gives the bits of
 * a single-head call on column h of the values.  A one-head row of up to 16 entries is
 * one block of a fixed width (softmax_short), and a walk over rows (softmax_rows_add)
 * takes those of up to 8 two at a time: per row the cost is then a chain of dependent
 * steps, which two rows run side by side.  16-bit values are computed in float and
 * rounded once. */

#ifndef TSGU_SOFTMAX_ONCE /* the parts that are the same in every variant */
#define TSGU_SOFTMAX_ONCE
#define TSGU_BLOCK 64 /* entries of a one-head row whose exps are computed together (a multiple of TSGU_LANES) */
#define TSGU_LANES 8  /* lanes of a one-head row's max */
#define TSGU_HEADS 8 /* heads of a several-head row done together */
#define TSGU_SHORT 16 /* longest one-head row taken as one block of this fixed width (2 * TSGU_LANES) */
#endif

/* One entry's result from its head's max M and c, 1/S (keep: x is the exp kept
 * in y) or log S (x is the value): exp * (1/S), (v - M) - log S (log) or
 * exp((v - M) - log S). */
TSGU_ISA_ATTR TSGU_ALWAYS_INLINE acc_t TSGU_FN(softmax_of)(acc_t x, acc_t shift, acc_t c, int keep, int is_log)
{
    if (keep) return x * c;
    acc_t d = (acc_t)((acc_t)(x - shift) - c);
    return is_log ? d : TSGU_EXP(d);
}

/* c of a head from its exps' sum S */
TSGU_ISA_ATTR TSGU_ALWAYS_INLINE acc_t TSGU_FN(softmax_c)(double sum, int keep)
{
    return (acc_t)(keep ? 1.0 / sum : log(sum));
}

#ifndef TSGU_SOFTMAX_TERMS_ONLY
/* one head: the row's entries in blocks, vectorized along the row; a block's exps
 * are taken over whole vectors, padded with -inf (whose exp, 0, adds nothing to
 * a sum: the bits are those of the unpadded sum) */
TSGU_ISA_ATTR static void TSGU_FN(softmax_one_head)(const real_t *v, real_t *y, int64_t len, int keep,
                                                    int is_log)
{
    acc_t lane[TSGU_LANES], d[TSGU_BLOCK];  /* the max in independent lanes: no chain of compares */
    for (int q = 0; q < TSGU_LANES; q++) lane[q] = -INFINITY;
    int64_t e = 0;
    for (; e + TSGU_LANES <= len; e += TSGU_LANES)
        for (int q = 0; q < TSGU_LANES; q++) {                /* vectorized */
            acc_t a = TSGU_LOAD(v[e + q]);
            lane[q] = a > lane[q] ? a : lane[q];
        }
    for (; e < len; e++) {
        acc_t a = TSGU_LOAD(v[e]);
        lane[0] = a > lane[0] ? a : lane[0];
    }
    acc_t vmax = lane[0];
    for (int q = 1; q < TSGU_LANES; q++) vmax = lane[q] > vmax ? lane[q] : vmax;
    const acc_t shift = vmax;
    double s[4] = {0, 0, 0, 0};
    for (int64_t e0 = 0; e0 < len; e0 += TSGU_BLOCK) {
        int64_t w = len - e0 < TSGU_BLOCK ? len - e0 : TSGU_BLOCK, wp = (w + TSGU_LANES - 1) & -TSGU_LANES;
        for (int64_t q = 0; q < w; q++) d[q] = TSGU_LOAD(v[e0 + q]);
        for (int64_t q = w; q < wp; q++) d[q] = -INFINITY;
        for (int64_t q = 0; q < wp; q++) d[q] = TSGU_EXP((acc_t)(d[q] - shift)); /* vectorized */
        for (int64_t q = 0; q < wp; q += 4)       /* lane l sums the entries l mod 4, kept in registers */
            for (int l = 0; l < 4; l++) s[l] += d[q + l];
        if (keep)
            for (int64_t q = 0; q < w; q++) y[e0 + q] = (real_t)d[q];  /* (keep: real_t is acc_t) */
    }
    const acc_t c = TSGU_FN(softmax_c)((s[0] + s[1]) + (s[2] + s[3]), keep);
    const real_t *x = keep ? y : v;
    for (e = 0; e < len; e++)                                                     /* vectorized */
        y[e] = TSGU_STORE(TSGU_FN(softmax_of)(TSGU_LOAD(x[e]), shift, c, keep, is_log));
}

/* one head, R rows (1 or 2) of len[r] <= W entries each (W = TSGU_LANES or TSGU_SHORT):
 * softmax_one_head's steps over one block of fixed width W per row, padded with -inf:
 * loops of a constant count, a row's length only in the masks of its loads (masked
 * moves where the instruction set has them), so that no call, copy or loop exit that
 * mispredicts is paid per row, and two rows' chains of dependent steps (max, exp,
 * sum, divide) run side by side.  The sums are softmax_one_head's, in its order (the
 * padding past its block adds exps of 0), and so is the max, but for which of +0 and
 * -0 a tie keeps (the max of the lanes is taken over the padded block). */
TSGU_ISA_ATTR TSGU_ALWAYS_INLINE void TSGU_FN(softmax_short)(const real_t *const *v, real_t *const *y,
                                                             const int64_t *len, const int R, const int W, int keep,
                                                             int is_log)
{
    acc_t a[2][TSGU_SHORT], d[2][TSGU_SHORT], lane[2][TSGU_LANES], shift[2], c[2];
    double s[2][4] = {{0}};
    /* each step for every row in turn: the rows' chains interleaved */
    for (int r = 0; r < R; r++)
        for (int q = 0; q < W; q++) a[r][q] = q < len[r] ? TSGU_LOAD(v[r][q]) : -INFINITY;
    for (int r = 0; r < R; r++)
        for (int q = 0; q < TSGU_LANES; q++) lane[r][q] = -INFINITY;
    for (int r = 0; r < R; r++)
        for (int g = 0; g < W; g += TSGU_LANES)
            for (int q = 0; q < TSGU_LANES; q++) lane[r][q] = a[r][g + q] > lane[r][q] ? a[r][g + q] : lane[r][q];
    for (int r = 0; r < R; r++) shift[r] = lane[r][0];
    for (int q = 1; q < TSGU_LANES; q++)
        for (int r = 0; r < R; r++) shift[r] = lane[r][q] > shift[r] ? lane[r][q] : shift[r];
    for (int r = 0; r < R; r++)
        for (int q = 0; q < W; q++) d[r][q] = TSGU_EXP((acc_t)(a[r][q] - shift[r]));
    for (int r = 0; r < R; r++)
        for (int q = 0; q < W; q += 4)
            for (int l = 0; l < 4; l++) s[r][l] += d[r][q + l];
    for (int r = 0; r < R; r++) c[r] = TSGU_FN(softmax_c)((s[r][0] + s[r][1]) + (s[r][2] + s[r][3]), keep);
    for (int r = 0; r < R; r++)
        for (int q = 0; q < W; q++)
            d[r][q] = TSGU_FN(softmax_of)(keep ? d[r][q] : a[r][q], shift[r], c[r], keep, is_log);
    for (int r = 0; r < R; r++)
        for (int64_t q = 0, n = len[r] < W ? len[r] : W; q < n; q++) y[r][q] = TSGU_STORE(d[r][q]);  /* (n: len[r]) */
}

/* hb <= TSGU_HEADS heads of H, starting at v and y: vectorized along the heads */
TSGU_ISA_ATTR TSGU_ALWAYS_INLINE void TSGU_FN(softmax_heads)(const real_t *v, real_t *y, int64_t len, int64_t H,
                                                             int64_t hb, int keep, int is_log)
{
    acc_t shift[TSGU_HEADS];    /* the max */
    double s[4][TSGU_HEADS] = {{0}};
    for (int64_t h = 0; h < hb; h++) shift[h] = -INFINITY;
    for (int64_t e = 0; e < len; e++)
        for (int64_t h = 0; h < hb; h++) {
            acc_t a = TSGU_LOAD(v[e * H + h]);
            shift[h] = a > shift[h] ? a : shift[h];
        }
    for (int64_t e = 0; e < len; e++) {
        double *se = s[e & 3];
        for (int64_t h = 0; h < hb; h++) {
            acc_t d = TSGU_EXP((acc_t)(TSGU_LOAD(v[e * H + h]) - shift[h])); /* vectorized */
            if (keep) y[e * H + h] = (real_t)d;                                  /* (keep: real_t is acc_t) */
            se[h] += d;
        }
    }
    acc_t c[TSGU_HEADS];
    for (int64_t h = 0; h < hb; h++)
        c[h] = TSGU_FN(softmax_c)((s[0][h] + s[1][h]) + (s[2][h] + s[3][h]), keep);
    const real_t *x = keep ? y : v;
    for (int64_t e = 0; e < len; e++)
        for (int64_t h = 0; h < hb; h++)                                         /* vectorized */
            y[e * H + h] = TSGU_STORE(TSGU_FN(softmax_of)(TSGU_LOAD(x[e * H + h]), shift[h], c[h], keep, is_log));
}

/* y = the softmax (log-softmax with is_log) of the len x H values v of one row;
 * keep: softmax of a full-width type (the exps go straight into y, scaled by 1/sum after) */
TSGU_ISA_ATTR TSGU_ALWAYS_INLINE void TSGU_FN(softmax_row)(const real_t *v, real_t *y, int64_t len, int64_t H,
                                                           int keep, int is_log)
{
    if (H == 1) {
        if (len <= TSGU_LANES) TSGU_FN(softmax_short)(&v, &y, &len, 1, TSGU_LANES, keep, is_log);
        else if (len <= TSGU_SHORT) TSGU_FN(softmax_short)(&v, &y, &len, 1, TSGU_SHORT, keep, is_log);
        else TSGU_FN(softmax_one_head)(v, y, len, keep, is_log);
        return;
    }
    int64_t h0 = 0;
    for (; h0 + TSGU_HEADS <= H; h0 += TSGU_HEADS)  /* whole groups: their width a constant */
        TSGU_FN(softmax_heads)(v + h0, y + h0, len, H, TSGU_HEADS, keep, is_log);
    if (h0 < H) TSGU_FN(softmax_heads)(v + h0, y + h0, len, H, H - h0, keep, is_log);
}

/* A walk over rows of one head that takes the rows of at most TSGU_LANES entries in
 * pairs (softmax_short; wider pairs would not fit the vector registers):
 * softmax_rows_add gives it a row, either taken at once or held until a second such
 * row comes; softmax_rows_end takes the one held.  The rows are independent: the
 * order in which they are taken changes no bit. */
typedef struct {
    const real_t *v[2];
    real_t *y[2];
    int64_t len[2];
    int held;              /* 1: row 0 waits for a partner */
    int keep, is_log;
} TSGU_FN(softmax_walk);

TSGU_ISA_ATTR TSGU_ALWAYS_INLINE void TSGU_FN(softmax_rows_add)(TSGU_FN(softmax_walk) *w, const real_t *v, real_t *y,
                                                                int64_t len)
{
    if (len > TSGU_LANES) {
        TSGU_FN(softmax_row)(v, y, len, 1, w->keep, w->is_log);
        return;
    }
    w->v[w->held] = v;
    w->y[w->held] = y;
    w->len[w->held] = len;
    if (w->held) TSGU_FN(softmax_short)(w->v, w->y, w->len, 2, TSGU_LANES, w->keep, w->is_log);
    w->held = !w->held;
}

TSGU_ISA_ATTR TSGU_ALWAYS_INLINE void TSGU_FN(softmax_rows_end)(TSGU_FN(softmax_walk) *w)
{
    if (w->held) TSGU_FN(softmax_short)(w->v, w->y, w->len, 1, TSGU_LANES, w->keep, w->is_log);
    w->held = 0;
}
#endif
