/* coo_row_ptr.c: check a COO index array and compress its rows.
 *     idx: sparse_dims x nnz, rows (row, col) or (batch, row, col), sizes[d] each
 * Every index must lie in [0, sizes[d]).  With ptr given (b*n+1 entries), the
 * entries must be sorted by (batch, row), as a coalesced tensor's are, and
 *     ptr[r] = number of entries in global rows < r,  r = batch*n + row
 * which is the global-layout row pointer array of tsgu_csr. */
#include "tsgu.h"

int tsgu_coo_row_ptr(const int64_t *idx, int64_t sparse_dims, int64_t nnz,
                     const int64_t *sizes, int64_t *ptr)
{
    for (int64_t d = 0; d < sparse_dims; d++) {
        const int64_t *ix = idx + d * nnz;
        for (int64_t e = 0; e < nnz; e++)
            if (ix[e] < 0 || ix[e] >= sizes[d]) return TSGU_EIDX_RANGE;
    }
    if (!ptr) return TSGU_OK;
    const int64_t *bi = sparse_dims == 3 ? idx : NULL;   /* batch index, if any */
    const int64_t *ri = idx + (sparse_dims - 2) * nnz;   /* row index */
    int64_t n = sizes[sparse_dims - 2], R = (sparse_dims == 3 ? sizes[0] : 1) * n;
    for (int64_t r = 0; r <= R; r++) ptr[r] = 0;
    int64_t prev = 0;
    for (int64_t e = 0; e < nnz; e++) {
        int64_t r = (bi ? bi[e] * n : 0) + ri[e];
        if (r < prev) return TSGU_EIDX_ORDER;
        prev = r;
        ptr[r + 1]++;
    }
    for (int64_t r = 0; r < R; r++) ptr[r + 1] += ptr[r];
    return TSGU_OK;
}
