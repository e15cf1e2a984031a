/* tsgu_softmax_grad.h: the per-entry terms of the softmax gradient over a row
 * (softmax_grad.c) or a column (softmax_cols_grad.c), the same bits from either, a
 * template fragment (no include guard): a kernel's template body includes it once per
 * variant, with acc_t and TSGU_FN defined.  For the entries e of a row or column, one
 * head:
 *     softmax:      gv_e = y_e (g_e - S),          S = sum_f g_f y_f
 *     log-softmax:  gv_e = g_e - exp(y_e) S,       S = sum_f g_f
 * from the output y and its gradient g. */

/* one entry's part of S, in double (the product in acc_t) */
TSGU_ISA_ATTR TSGU_ALWAYS_INLINE double TSGU_FN(softmax_grad_term)(acc_t y, acc_t g, int is_log)
{
    return is_log ? (double)g : (double)(g * y);
}

/* one entry's gradient from y, ey = exp(y) (read for log-softmax only), g and S */
TSGU_ISA_ATTR TSGU_ALWAYS_INLINE acc_t TSGU_FN(softmax_grad_of)(acc_t y, acc_t ey, acc_t g, acc_t sum, int is_log)
{
    return is_log ? g - ey * sum : y * (g - sum);
}
