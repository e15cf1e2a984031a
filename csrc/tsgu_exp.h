/* tsgu_exp.h: exp written so that compilers vectorize loops over it (libm's exp
 * is a call per element), for the log-sum-exp kernels.
 *
 *     exp(x) = 2^k * p(r),   k = round(x / ln 2),   r = x - k ln 2 in [-ln2/2, ln2/2]
 * with ln 2 split in two (Cody-Waite) so r is exact to working precision, and p
 * the Taylor polynomial of exp to degree 12 (double: truncation < 2e-16
 * relative) or 7 (float: < 6e-9).  k is rounded by adding 1.5 * 2^52 (2^23),
 * which also leaves k in the low bits; 2^k is built as 2 * 2^(k-1) so that k up
 * to the overflow threshold stays representable.  Below the underflow threshold
 * the result is 0 (the exact value would be subnormal); above the overflow
 * threshold +inf; NaN stays NaN.  Within a few ulp of libm's exp. */
#ifndef TSGU_EXP_H
#define TSGU_EXP_H

#include <math.h>
#include <stdint.h>
#include <string.h>
#include "tsgu_inline.h"

/* The selects below (clamps, overflow, NaN) vectorize only when floating-point
 * comparisons may be assumed not to trap (the kernels never read the FP
 * exception flags), and the polynomial is a chain of FMAs where the instruction
 * set has them.  This applies to the rest of the including file. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math", "fp-contract=fast")
#endif

TSGU_ALWAYS_INLINE double tsgu_exp_f64(double x)
{
    const double shifter = 0x1.8p52, log2e = 0x1.71547652b82fep0;
    const double ln2_hi = 0x1.62e42fee00000p-1, ln2_lo = 0x1.a39ef35793c76p-33;
    double xc = x < -708.0 ? -708.0 : x > 709.782712893384 ? 709.782712893384 : x; /* keeps k - 1 in range */
    double kd = xc * log2e + shifter, k = kd - shifter;
    double r = (xc - k * ln2_hi) - k * ln2_lo;
    double p = 1.0 / 479001600;                                /* 1/12!, then Horner down to 1 */
    p = p * r + 1.0 / 39916800;
    p = p * r + 1.0 / 3628800;
    p = p * r + 1.0 / 362880;
    p = p * r + 1.0 / 40320;
    p = p * r + 1.0 / 5040;
    p = p * r + 1.0 / 720;
    p = p * r + 1.0 / 120;
    p = p * r + 1.0 / 24;
    p = p * r + 1.0 / 6;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    uint64_t bits;
    memcpy(&bits, &kd, sizeof bits);                           /* low bits: k + 2^51 */
    bits = (bits - 0x4338000000000000ull + 1022) << 52;        /* 2^(k-1) */
    double scale;
    memcpy(&scale, &bits, sizeof scale);
    double y = p * scale * 2.0;
    y = x < -708.0 ? 0.0 : y;
    y = x > 709.782712893384 ? (double)INFINITY : y;
    return x != x ? x : y;
}

TSGU_ALWAYS_INLINE float tsgu_exp_f32(float x)
{
    const float shifter = 0x1.8p23f, log2e = 0x1.715476p0f;
    const float ln2_hi = 0x1.62e4p-1f, ln2_lo = 0x1.7f7d1cp-20f;
    float xc = x < -87.0f ? -87.0f : x > 88.7228391f ? 88.7228391f : x;
    float kd = xc * log2e + shifter, k = kd - shifter;
    float r = (xc - k * ln2_hi) - k * ln2_lo;
    float p = 1.0f / 5040;                                     /* 1/7!, then Horner down to 1 */
    p = p * r + 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    uint32_t bits;
    memcpy(&bits, &kd, sizeof bits);                           /* low bits: k + 2^22 */
    bits = (bits - 0x4b400000u + 126) << 23;                   /* 2^(k-1) */
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    float y = p * scale * 2.0f;
    y = x < -87.0f ? 0.0f : y;
    y = x > 88.7228391f ? INFINITY : y;
    return x != x ? x : y;
}

/* exp of a float or a double, by its type */
#define TSGU_EXP(x) _Generic((x), float: tsgu_exp_f32, default: tsgu_exp_f64)(x)

#endif
