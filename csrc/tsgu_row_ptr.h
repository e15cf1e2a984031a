/* tsgu_row_ptr.h: a CSR view's raw row pointers, read without knowing their
 * index type (the template kernels read them as idx_t instead). */
#ifndef TSGU_ROW_PTR_H
#define TSGU_ROW_PTR_H

#include "tsgu.h"

/* batched layout (one pointer array per item)?  entry_stride cannot tell: it is
 * 0 in both layouts when the items hold no entries */
#define TSGU_BATCHED_PTR(A) ((A)->ptr_stride != (A)->nrows)

/* row pointer q of the raw pointer array */
static inline int64_t tsgu_ptr_at(const tsgu_csr *A, int64_t q)
{
    return A->itype == TSGU_I32 ? (int64_t)((const int32_t *)A->ptr)[q]
                                : ((const int64_t *)A->ptr)[q];
}

#endif
