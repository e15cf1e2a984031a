#ifndef TSGU_IN_TEMPLATE
/* csr_check.c: the O(nnz) half of CSR validation (the O(batch) half is
 * csr_check_ends.c), on its own, for a structure that no kernel is about to
 * walk (one handed on to PyTorch): for every row i of every item k
 *     0 <= ptr[k][i] <= ptr[k][i+1] <= nnz of the item,
 *     0 <= col[e] < ncols, strictly increasing over the row's entries e.
 * The rows are walked exactly as the kernels walk them (tsgu_rows.h), so a
 * structure this accepts is one every kernel accepts. */
#include "tsgu.h"
#include "tsgu_parallel.h"

#define TSGU_INDEX_ONLY 1
#define TSGU_TEMPLATE_FILE "csr_check.c"
#include "tsgu_template.h"

int tsgu_csr_check(const tsgu_csr *A, int nthreads)
{
    return tsgu_parallel_rows(A, 1, nthreads, TSGU_PICK_INDEX(check_rows, A->itype), (void *)A);
}

#else /* template body: idx_t and TSGU_FN (real_t unused) */

#include "tsgu_rows.h"

static int TSGU_FN(check_rows)(void *ctx, int64_t r0, int64_t r1)
{
    const tsgu_csr *A = ctx;
    const idx_t *Aj = A->col;
    int64_t n = A->nrows, m = A->ncols;
    for (int64_t r = r0; r < r1; r++) {
        int64_t k = tsgu_item_of(A, r), i = r - k * n, start, end;
        if (!TSGU_FN(row_entries)(A, k, i, &start, &end)) return TSGU_EPTR_ORDER;
        int64_t prev = -1;
        for (int64_t e = start; e < end; e++) {
            int64_t j = Aj[e];
            if (j <= prev || j >= m) return tsgu_col_error(j, m);
            prev = j;
        }
    }
    return TSGU_OK;
}

#endif
