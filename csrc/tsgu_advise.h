/* tsgu_advise.h: huge pages under an output or workspace about to be written
 * for the first time (advise_output.c), and the bytes a view spans. */
#ifndef TSGU_ADVISE_H
#define TSGU_ADVISE_H

#include "tsgu.h"

void tsgu_advise_output(void *data, int64_t bytes);

/* bytes of one value of type t */
static inline int64_t tsgu_real_size(tsgu_real t) { return t == TSGU_F64 ? 8 : t == TSGU_F32 ? 4 : 2; }

/* bytes from the first to one past the last element of a dense view */
static inline int64_t tsgu_dense_span(const tsgu_dense *D)
{
    if (D->batch <= 0 || D->rows <= 0 || D->cols <= 0) return 0;
    return ((D->batch - 1) * D->bstride + (D->rows - 1) * D->rstride + D->cols) * tsgu_real_size(D->rtype);
}

#endif
