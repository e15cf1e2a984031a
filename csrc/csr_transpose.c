#ifndef TSGU_IN_TEMPLATE
/* csr_transpose.c: the pattern of A^T, item by item, by a stable counting sort
 * on the column index, O(nnz + b*m):
 *     tptr (b*m+1, global layout): entries of row j of item k of A^T
 *     trow[t]:  the row i of A that entry t of A^T came from
 *     tperm[t]: its position e in A's entry arrays, so A^T's value is val[tperm[t]]
 * Rows of A^T list their entries by increasing i, so spmm on it sums in a fixed
 * order: grad_B = A^T*G without atomics and independent of the thread count. */
#include "tsgu.h"

#define TSGU_TEMPLATE_FILE "csr_transpose.c"
#include "tsgu_template.h"

int tsgu_csr_transpose(const tsgu_csr *A, void *tptr, void *trow, void *tperm)
{
    return TSGU_PICK(csr_transpose, TSGU_F32, A->itype)(A, tptr, trow, tperm);
}

#else /* template body: idx_t and TSGU_FN (real_t unused: the f64 variants go unused) */

#if defined(__GNUC__)
__attribute__((unused))
#endif
static int TSGU_FN(csr_transpose)(const tsgu_csr *A, void *vtptr, void *vtrow, void *vtperm)
{
    const idx_t *Ap = A->ptr, *Aj = A->col;
    idx_t *Tp = vtptr, *Ti = vtrow, *Tq = vtperm;
    int64_t b = A->batch, n = A->nrows, m = A->ncols, nnz = A->nnz, R = b * m;
    for (int64_t r = 0; r <= R; r++) Tp[r] = 0;
    for (int pass = 0; pass < 2; pass++) {     /* pass 0 counts, pass 1 places */
        for (int64_t k = 0; k < b; k++) {
            for (int64_t i = 0; i < n; i++) {
                int64_t q = k * A->ptr_stride + i, off = k * A->entry_stride;
                int64_t start = (int64_t)Ap[q] + off, end = (int64_t)Ap[q + 1] + off;
                if (Ap[q] < 0 || Ap[q] > Ap[q + 1] || end > nnz) return TSGU_EPTR_ORDER;
                int64_t prev = -1;
                for (int64_t e = start; e < end; e++) {
                    int64_t j = Aj[e];
                    if (j <= prev || j >= m) return j < 0 || j >= m ? TSGU_ECOL_RANGE : TSGU_ECOL_ORDER;
                    prev = j;
                    if (pass == 0) {
                        Tp[k * m + j + 1]++;
                    } else {
                        int64_t t = Tp[k * m + j]++;   /* next free slot of row j of A^T */
                        Ti[t] = (idx_t)i;
                        Tq[t] = (idx_t)e;
                    }
                }
            }
        }
        if (pass == 0)                          /* counts -> starts */
            for (int64_t r = 0; r < R; r++) Tp[r + 1] += Tp[r];
    }
    for (int64_t r = R; r > 0; r--) Tp[r] = Tp[r - 1]; /* ends -> starts */
    Tp[0] = 0;
    return TSGU_OK;
}

#endif
