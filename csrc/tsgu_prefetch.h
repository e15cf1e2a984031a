/* tsgu_prefetch.h: cache lines, and prefetch hints for memory read (or
 * updated) soon; the hints are no-ops where the compiler has none. */
#ifndef TSGU_PREFETCH_H
#define TSGU_PREFETCH_H

#include <stdint.h>

#define TSGU_LINE 64 /* bytes per cache line */

#if defined(__GNUC__) || defined(__clang__)
#define TSGU_PREFETCH(addr) __builtin_prefetch((addr), 0, 1)
#define TSGU_PREFETCH_W(addr) __builtin_prefetch((addr), 1, 1) /* memory updated soon */
#else
#define TSGU_PREFETCH(addr) ((void)0)
#define TSGU_PREFETCH_W(addr) ((void)0)
#endif

/* how many entries ahead to prefetch a gathered row of w values of `size` bytes:
 * about TSGU_PREFETCH_LINES cache lines in flight, between 8 and 64 entries */
#define TSGU_PREFETCH_LINES 64
static inline int64_t tsgu_prefetch_ahead(int64_t w, int64_t size)
{
    int64_t lines = (w * size + TSGU_LINE - 1) / TSGU_LINE, ahead = TSGU_PREFETCH_LINES / (lines > 0 ? lines : 1);
    return ahead < 8 ? 8 : ahead > 64 ? 64 : ahead;
}

#endif
