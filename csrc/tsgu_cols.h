/* tsgu_cols.h: the walk of the kernels in which each thread owns a range of the
 * columns (softmax_cols.c, softmax_cols_grad.c), a template fragment (no include
 * guard): a kernel's template body includes it once per variant, with idx_t, TSGU_FN
 * and TSGU_ISA_ATTR defined, after tsgu_rows.h.
 *
 * Thread t owns the global columns c = k*m + j (column j of item k) in [lo, hi), a
 * range from tsgu_split_cols.  It reads the entries of every item it has columns in,
 * in entry order, and hands those in its own columns to a block function, in blocks
 * of up to TSGU_COLS_BLOCK, in that order: each column's entries reach one thread, in
 * the order of a serial run, whatever the thread count.  The walk gathers without
 * branches (an entry of another thread's column is written and not counted) and
 * prefetches the state of the column TSGU_COLS_AHEAD entries ahead. */

#ifndef TSGU_COLS_ONCE /* the parts that are the same in every variant */
#define TSGU_COLS_ONCE
#define TSGU_COLS_BLOCK 64 /* entries handed on together */
#define TSGU_COLS_AHEAD 32

/* fn(job, e, c, w): the w entries at positions e[q] in the flat arrays, of columns c[q] */
typedef void (*tsgu_cols_fn)(void *job, const int64_t *e, const int64_t *c, int64_t w);
#endif

/* The walk over columns [lo, hi): the rows of the items they fall in, in order, their
 * pointers checked, and with check their columns too (in range, increasing in a row:
 * a kernel's first walk; the later ones read what it checked).  pa, pb: two arrays of
 * the columns' states, sa and sb bytes each, prefetched (pb may be NULL).  Returns a
 * status (the first fault in entry order: the same for every thread that reads it). */
TSGU_ISA_ATTR TSGU_ALWAYS_INLINE int TSGU_FN(cols_walk)(const tsgu_csr *A, int64_t lo, int64_t hi, int check,
                                                        const void *pa, int64_t sa, const void *pb, int64_t sb,
                                                        tsgu_cols_fn fn, void *job)
{
    const idx_t *Aj = A->col;
    int64_t n = A->nrows, m = A->ncols, nnz = A->nnz, w = 0;
    int64_t k0 = m ? lo / m : 0, k1 = m ? (hi + m - 1) / m : A->batch;  /* m = 0: one walk checks all */
    int64_t es[TSGU_COLS_BLOCK], cs[TSGU_COLS_BLOCK];
    for (int64_t k = k0; k < k1; k++) {
        const int64_t base = k * m;
        for (int64_t i = 0; i < n; i++) {
            int64_t start, end, prev = -1;
            if (!TSGU_FN(row_entries)(A, k, i, &start, &end)) return TSGU_EPTR_ORDER;
            for (int64_t e = start; e < end; e++) {
                int64_t j = Aj[e];
                if (check) {
                    if (j <= prev || j >= m) return tsgu_col_error(j, m);
                    prev = j;
                }
                if (e + TSGU_COLS_AHEAD < nnz) {    /* not yet checked: unsigned, clamped into [lo, hi) */
                    uint64_t off = (uint64_t)base + (uint64_t)Aj[e + TSGU_COLS_AHEAD] - (uint64_t)lo;
                    int64_t cn = off < (uint64_t)(hi - lo) ? lo + (int64_t)off : lo;
                    TSGU_PREFETCH_W((const char *)pa + cn * sa);
                    if (pb) TSGU_PREFETCH_W((const char *)pb + cn * sb);
                }
                int64_t c = base + j;
                es[w] = e;
                cs[w] = c;
                w += (uint64_t)(c - lo) < (uint64_t)(hi - lo);   /* own column */
                if (w == TSGU_COLS_BLOCK) {
                    fn(job, es, cs, w);
                    w = 0;
                }
            }
        }
    }
    if (w) fn(job, es, cs, w);
    return TSGU_OK;
}
