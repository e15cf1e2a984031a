/* tsgu_inline.h: forced inlining, and the constant widths a row loop is
 * specialized for through it (the accumulator then lives in registers). */
#ifndef TSGU_INLINE_H
#define TSGU_INLINE_H

#if defined(__GNUC__) || defined(__clang__)
#define TSGU_ALWAYS_INLINE static inline __attribute__((always_inline))
#else
#define TSGU_ALWAYS_INLINE static inline
#endif

/* return fn(args..., p) with p a compile-time constant for the widths the row
 * loops are specialized for; in a variant compiled with TSGU_FIXED_WIDTHS 0
 * (tsgu_template.h: x86-64's portable fallback) with p as it comes, one body */
#define TSGU_BY_WIDTH(p, fn, ...) TSGU_CAT(TSGU_BY_WIDTH_, TSGU_FIXED_WIDTHS)(p, fn, __VA_ARGS__)
#define TSGU_BY_WIDTH_0(p, fn, ...) return fn(__VA_ARGS__, p);
#define TSGU_BY_WIDTH_1(p, fn, ...)                \
    switch (p) {                                   \
    case 1: return fn(__VA_ARGS__, 1);             \
    case 16: return fn(__VA_ARGS__, 16);           \
    case 32: return fn(__VA_ARGS__, 32);           \
    case 64: return fn(__VA_ARGS__, 64);           \
    default: return fn(__VA_ARGS__, p);            \
    }

#endif
