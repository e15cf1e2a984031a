#ifndef TSGU_IN_TEMPLATE
/* csr_compact.c: check one CSR matrix (batch 1) once, for kernels that then read
 * it many times without checks (the Krylov solvers, cg.c and minres.c):
 *     0 <= ptr[i] <= ptr[i+1] <= nnz,  cols of each row strictly increasing in [0, m)
 * Where the indices are int64 and every size fits int32, the checked structure
 * is copied to int32 on the way (half the index bytes each product reads) into
 * *mem, which the caller frees; otherwise *out is A itself and *mem NULL. */
#include <stdlib.h>
#include "tsgu.h"

#define TSGU_INDEX_ONLY
#define TSGU_TEMPLATE_FILE "csr_compact.c"
#include "tsgu_template.h"
#undef TSGU_INDEX_ONLY

int tsgu_csr_compact(const tsgu_csr *A, tsgu_csr *out, void **mem)
{
    int (*check)(const tsgu_csr *, int32_t *, int32_t *) = TSGU_PICK_INDEX(compact_rows, A->itype);
    int64_t n = A->nrows;
    *out = *A;
    *mem = NULL;
    if (A->itype == TSGU_I64 && A->batch == 1 && n < INT32_MAX && A->ncols < INT32_MAX && A->nnz < INT32_MAX) {
        int32_t *p = malloc(((size_t)n + 1 + (size_t)A->nnz) * sizeof(int32_t));
        if (!p) return TSGU_ENOMEM;
        *mem = p;
        out->ptr = p;
        out->col = p + n + 1;
        out->itype = TSGU_I32;
        out->ptr_stride = n;
        out->entry_stride = 0;
    }
    return check(A, (int32_t *)*mem, *mem ? (int32_t *)*mem + n + 1 : NULL);
}

#else /* template body: idx_t, TSGU_FN (real_t unused) */

#include "tsgu_rows.h"

/* status of the columns [start, end) of one row, the first that breaks the rules
 * naming the error */
TSGU_ISA_ATTR static int TSGU_FN(compact_cols)(const idx_t *Aj, int64_t start, int64_t end, int64_t m)
{
    int64_t prev = -1;
    for (int64_t e = start; e < end; e++) {
        int64_t j = Aj[e];
        if (j <= prev || j >= m) return tsgu_col_error(j, m);
        prev = j;
    }
    return TSGU_OK;
}

/* check every row of A; with ptr32, copy pointers and columns to ptr32 and col32.
 * Columns increasing strictly, the first >= 0 and the last < m, are all in range:
 * that test has no chain from entry to entry, so it vectorizes. */
TSGU_ISA_ATTR static int TSGU_FN(compact_rows)(const tsgu_csr *A, int32_t *ptr32, int32_t *col32)
{
    const idx_t *Aj = A->col;
    int64_t n = A->nrows, m = A->ncols, R = A->batch * n;
    if (ptr32) ptr32[0] = 0;
    for (int64_t r = 0; r < R; r++) {
        int64_t start, end, k = tsgu_item_of(A, r);
        if (!TSGU_FN(row_entries)(A, k, r - k * n, &start, &end)) return TSGU_EPTR_ORDER;
        if (start < end) {
            int bad = Aj[start] < 0 || Aj[end - 1] >= m, status;
            for (int64_t e = start + 1; e < end; e++) bad |= Aj[e] <= Aj[e - 1];
            if (bad && (status = TSGU_FN(compact_cols)(Aj, start, end, m)) != TSGU_OK) return status;
        }
        if (!ptr32) continue;
        for (int64_t e = start; e < end; e++) col32[e] = (int32_t)Aj[e];
        ptr32[r + 1] = (int32_t)end;
    }
    return TSGU_OK;
}

#endif
