/* csr_check_ends.c: the O(batch) half of CSR validation.
 *   global layout:  ptr[0] == 0 and ptr[b*n] == nnz
 *   batched layout: ptr[k][0] == 0 and ptr[k][n] == nnz/b for every item k
 * The O(nnz) half (pointers non-decreasing and inside [0, nnz], columns in
 * range and strictly increasing within a row) is checked by every kernel as it
 * walks the rows, before it reads through an index. */
#include "tsgu.h"
#include "tsgu_row_ptr.h"

int tsgu_csr_check_ends(const tsgu_csr *A)
{
    int64_t b = A->batch, n = A->nrows, nnz = A->nnz, per_item = A->entry_stride;
    if (b == 0) return nnz == 0 ? TSGU_OK : TSGU_EPTR_ENDS;
    if (!TSGU_BATCHED_PTR(A))                              /* global layout */
        return tsgu_ptr_at(A, 0) == 0 && tsgu_ptr_at(A, b * n) == nnz ? TSGU_OK : TSGU_EPTR_ENDS;
    if (per_item * b != nnz) return TSGU_EPTR_ENDS;
    for (int64_t k = 0; k < b; k++)                        /* batched layout */
        if (tsgu_ptr_at(A, k * (n + 1)) != 0 || tsgu_ptr_at(A, k * (n + 1) + n) != per_item)
            return TSGU_EPTR_ENDS;
    return TSGU_OK;
}
