/* tsgu_half.h: the two 16-bit floating-point formats, stored as uint16_t, to
 * and from float, with bit operations only (C11, no compiler extensions).
 *   bfloat16: the high half of a float32 (8 exponent bits, 7 mantissa bits)
 *   float16:  IEEE 754 binary16 (5 exponent bits of bias 15, 10 mantissa bits)
 * Widening is exact.  Narrowing rounds to nearest, ties to even: overflow goes
 * to infinity, underflow through the subnormals to zero, NaN stays NaN (quiet,
 * its sign and top payload bits kept).  Every case is computed and the answer
 * picked with bit masks, not branches (GCC turns even ?: chains into branches
 * here), so that a loop over an array of them vectorizes. */
#ifndef TSGU_HALF_H
#define TSGU_HALF_H

#include <stdint.h>
#include <string.h>

static inline uint32_t tsgu_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float tsgu_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* all ones when c, else zero */
static inline uint32_t tsgu_mask(int c)
{
    return 0u - (uint32_t)c;
}

/* a where mask is set, b elsewhere */
static inline uint32_t tsgu_pick(uint32_t mask, uint32_t a, uint32_t b)
{
    return (a & mask) | (b & ~mask);
}

static inline float tsgu_bf16_to_f32(uint16_t h)
{
    return tsgu_bits_f32((uint32_t)h << 16);
}

static inline uint16_t tsgu_f32_to_bf16(float f)
{
    uint32_t u = tsgu_f32_bits(f);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16; /* a carry may reach infinity: right */
    return (uint16_t)tsgu_pick(tsgu_mask((u & 0x7fffffffu) > 0x7f800000u), (u >> 16) | 0x40u, rounded);
}

static inline float tsgu_f16_to_f32(uint16_t h)
{
    uint32_t em = h & 0x7fffu, sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t normal = (em << 13) + (112u << 23);  /* exponent bias 15 -> 127 */
    uint32_t special = normal + (112u << 23);     /* infinity or NaN: exponent all ones */
    /* subnormal or zero: em * 2^-24, as 2^-14 * (1 + em/2^10) - 2^-14 (exact) */
    float sub = tsgu_bits_f32((em << 13) + (113u << 23)) - 0x1p-14f;
    uint32_t mag = tsgu_pick(tsgu_mask(em >= 0x7c00u), special,
                             tsgu_pick(tsgu_mask(em < 0x0400u), tsgu_f32_bits(sub), normal));
    return tsgu_bits_f32(mag | sign);
}

static inline uint16_t tsgu_f32_to_f16(float f)
{
    uint32_t u = tsgu_f32_bits(f), a = u & 0x7fffffffu, sign = (u >> 16) & 0x8000u;
    /* 2^-14 <= |f| < 2^16: exponent bias 127 -> 15, then the 13 dropped bits
     * rounded to nearest even; a carry into the exponent is right (65520 -> inf) */
    uint32_t normal = (a - (112u << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13;
    /* |f| < 2^-14: adding 0.5 leaves units of 2^-24 (a float16 subnormal's) in
     * the mantissa, rounded to nearest even by the float addition itself */
    uint32_t sub = tsgu_f32_bits(tsgu_bits_f32(a) + 0.5f) - tsgu_f32_bits(0.5f);
    uint32_t mag = tsgu_pick(tsgu_mask(a > 0x7f800000u), 0x7e00u | ((a >> 13) & 0x3ffu),  /* NaN */
                             tsgu_pick(tsgu_mask(a >= (143u << 23)), 0x7c00u,   /* >= 2^16, infinity */
                                       tsgu_pick(tsgu_mask(a < (113u << 23)), sub, normal)));
    return (uint16_t)(mag | sign);
}

#endif
