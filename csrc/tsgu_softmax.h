/* tsgu_softmax.h: the softmax, or log-softmax, of one row's stored values, for each
 * of H heads (softmax_rows.c, softmax_coo.c: the same bits from either), a template
 * fragment (no include guard): a kernel's template body includes it once per variant,
 * with real_t, acc_t, TSGU_LOAD, TSGU_STORE, TSGU_NARROW and TSGU_FN defined, after
 * tsgu_exp.h (whose pragmas must cover it).
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
 * a single-head call on column h of the values.  16-bit values are computed in float
 * and rounded once. */

#ifndef TSGU_SOFTMAX_ONCE /* the parts that are the same in every variant */
#define TSGU_SOFTMAX_ONCE
#define TSGU_BLOCK 64 /* entries of a one-head row whose exps are computed together (a multiple of TSGU_LANES) */
#define TSGU_LANES 8  /* lanes of a one-head row's max */
#define TSGU_HEADS 8 /* heads of a several-head row done together */
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
        TSGU_FN(softmax_one_head)(v, y, len, keep, is_log);
        return;
    }
    int64_t h0 = 0;
    for (; h0 + TSGU_HEADS <= H; h0 += TSGU_HEADS)  /* whole groups: their width a constant */
        TSGU_FN(softmax_heads)(v + h0, y + h0, len, H, TSGU_HEADS, keep, is_log);
    if (h0 < H) TSGU_FN(softmax_heads)(v + h0, y + h0, len, H, H - h0, keep, is_log);
}
