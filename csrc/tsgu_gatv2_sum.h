/* tsgu_gatv2_sum.h: the sum over a head's features that the GATv2 kernels take
 * (gatv2_forward.c's scores, gatv2_grad_rows.c's dot products), a template fragment
 * (no include guard): a kernel's template body includes it once per variant, with
 * real_t, acc_t, TSGU_FN and TSGU_ISA_ATTR defined.
 *
 * sum_c v[c] over c < C in TSGU_GATV2_LANES (tsgu_gat.h) interleaved partial sums: lane
 * k takes c = k mod lanes, in order; the lanes are then added pairwise, the tail after
 * them.  It vectorises (a plain running sum does not: floating-point addition is not
 * reassociated), and its order is fixed: the same bits on every thread. */
TSGU_ISA_ATTR TSGU_ALWAYS_INLINE acc_t TSGU_FN(gatv2_sum)(const acc_t *restrict v, const int64_t C)
{
    acc_t part[TSGU_GATV2_LANES] = {0};
    int64_t c = 0;
    for (; c + TSGU_GATV2_LANES <= C; c += TSGU_GATV2_LANES)
        for (int k = 0; k < TSGU_GATV2_LANES; k++) part[k] += v[c + k];
    for (int w = TSGU_GATV2_LANES / 2; w > 0; w /= 2)
        for (int k = 0; k < w; k++) part[k] += part[k + w];
    acc_t z = part[0];
    for (; c < C; c++) z += v[c];
    return z;
}
