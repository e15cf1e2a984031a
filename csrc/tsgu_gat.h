/* tsgu_gat.h: what the graph-attention kernels share (gat_forward.c, gat_grad_scores.c,
 * gat_grad_src.c): the dropout draw, and their row loops run per head over F features,
 * specialised for the common head widths (GAT's 8 heads of 8 features among them) so
 * that the compiler unrolls and vectorises them; other widths take the generic loop. */
#ifndef TSGU_GAT_H
#define TSGU_GAT_H

#include <stdint.h>
#include "tsgu.h"
#include "tsgu_inline.h"

/* The dropout draw of element q = e*H + h: 24 uniform bits from a counter-based hash
 * (SplitMix64's finaliser) of seed + (q+1) * golden ratio, so the forward and the
 * backward draw the same mask without storing it, in any order and on any thread.
 * _backends.torch_ops.gat_dropped computes the same bits. */
static inline int64_t tsgu_gat_draw(uint64_t seed, int64_t q)
{
    uint64_t z = seed + ((uint64_t)q + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (int64_t)((z ^ (z >> 31)) >> 40);
}

/* is element q of g's attention dropped? */
static inline int tsgu_gat_dropped(const tsgu_gat *g, int64_t q)
{
    return g->drop > 0 && tsgu_gat_draw(g->seed, q) < g->drop;
}

/* GATv2's sums over a head's features (gatv2_forward.c's scores, gatv2_grad_rows.c's
 * dot products) are taken in this many interleaved partial sums, added pairwise: a fixed
 * order that vectorises */
#define TSGU_GATV2_LANES 8

/* return fn(args..., F) with F a compile-time constant for the common head widths: those
 * of TSGU_BY_WIDTH (tsgu_inline.h) and 2, 4, 8; F as it comes where TSGU_FIXED_WIDTHS is 0 */
#define TSGU_GAT_BY_WIDTH(F, fn, ...) TSGU_CAT(TSGU_GAT_BY_WIDTH_, TSGU_FIXED_WIDTHS)(F, fn, __VA_ARGS__)
#define TSGU_GAT_BY_WIDTH_0(F, fn, ...) return fn(__VA_ARGS__, F);
#define TSGU_GAT_BY_WIDTH_1(F, fn, ...)            \
    switch (F) {                                   \
    case 2: return fn(__VA_ARGS__, 2);             \
    case 4: return fn(__VA_ARGS__, 4);             \
    case 8: return fn(__VA_ARGS__, 8);             \
    default: TSGU_BY_WIDTH_1(F, fn, __VA_ARGS__)   \
    }

#endif
