/* tsgu_gat.h: what the graph-attention kernels share (gat_forward.c, gat_grad_scores.c,
 * gat_grad_src.c): their row loops run per head over F features, specialised for the
 * common head widths (GAT's 8 heads of 8 features among them) so that the compiler
 * unrolls and vectorises them; other widths take the generic loop. */
#ifndef TSGU_GAT_H
#define TSGU_GAT_H

/* return fn(args..., F) with F a compile-time constant for the common head widths */
#define TSGU_GAT_BY_WIDTH(F, fn, ...)              \
    switch (F) {                                   \
    case 1: return fn(__VA_ARGS__, 1);             \
    case 2: return fn(__VA_ARGS__, 2);             \
    case 4: return fn(__VA_ARGS__, 4);             \
    case 8: return fn(__VA_ARGS__, 8);             \
    case 16: return fn(__VA_ARGS__, 16);           \
    case 32: return fn(__VA_ARGS__, 32);           \
    case 64: return fn(__VA_ARGS__, 64);           \
    default: return fn(__VA_ARGS__, F);            \
    }

#endif
