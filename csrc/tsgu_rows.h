/* tsgu_rows.h: the row walk shared by the kernels, a template fragment (no
 * include guard): a kernel's template body includes it once per variant, with
 * idx_t and TSGU_FN defined. */

/* The entries [*start, *end) of row i of item k, with the row's two pointers
 * checked (0 <= ptr[q] <= ptr[q+1], end <= nnz) before any entry is read through
 * them.  Returns 1 when they are valid, 0 when not (TSGU_EPTR_ORDER). */
TSGU_ALWAYS_INLINE int TSGU_FN(row_entries)(const tsgu_csr *A, int64_t k, int64_t i, int64_t *start,
                                            int64_t *end)
{
    const idx_t *Ap = A->ptr;
    int64_t q = k * A->ptr_stride + i, off = k * A->entry_stride;
    *start = (int64_t)Ap[q] + off;
    *end = (int64_t)Ap[q + 1] + off;
    return Ap[q] >= 0 && Ap[q] <= Ap[q + 1] && *end <= A->nnz;
}
