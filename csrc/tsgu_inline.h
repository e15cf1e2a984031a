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
 * loops are specialized for */
#define TSGU_BY_WIDTH(p, fn, ...)                  \
    switch (p) {                                   \
    case 1: return fn(__VA_ARGS__, 1);             \
    case 16: return fn(__VA_ARGS__, 16);           \
    case 32: return fn(__VA_ARGS__, 32);           \
    case 64: return fn(__VA_ARGS__, 64);           \
    default: return fn(__VA_ARGS__, p);            \
    }

#endif
