#ifndef TSGU_IN_TEMPLATE
/* csr_transpose.c: the pattern of A^T, item by item, by a stable counting sort
 * on the column index, O(nnz + T*b*m) for T threads:
 *     tptr (b*m+1, global layout): entries of row j of item k of A^T
 *     trow[t]:  the row i of A that entry t of A^T came from
 *     tperm[t]: its position e in A's entry arrays, so A^T's value is val[tperm[t]]
 * Threads take contiguous row chunks of A.  Pass 1 counts each chunk's entries
 * per column; the offsets then give chunk t's entries of a column the slots
 * after chunk t-1's; pass 2 places them.  The order equals the serial sort's
 * (rows of A^T list their entries by increasing i), whatever the thread count. */
#include <stdlib.h>
#include "tsgu.h"
#include "tsgu_parallel.h"

typedef struct {
    const tsgu_csr *A;
    void *tptr, *trow, *tperm;
    int64_t *cnt;           /* T x (b*m): chunk t's count per column, then its next slot */
    const int64_t *bounds;  /* chunk t covers global rows [bounds[t], bounds[t+1]) */
    int64_t T;
} transpose_ctx;

#define TSGU_INDEX_ONLY 1
#define TSGU_TEMPLATE_FILE "csr_transpose.c"
#include "tsgu_template.h"

int tsgu_csr_transpose(const tsgu_csr *A, void *tptr, void *trow, void *tperm, int nthreads)
{
    int64_t bounds[TSGU_MAX_THREADS + 1], R = A->batch * A->ncols;
    /* one count array per chunk: spend that memory only where it pays */
    int64_t nt = nthreads < 1 ? 1 : nthreads;
    if (nt > 1 && nt * R > A->nnz / 2) nt = R ? A->nnz / 2 / R : 1;
    if (nt < 1) nt = 1;
    int64_t T = tsgu_split_rows(A, 1, (int)nt, bounds);
    int64_t *cnt = calloc((size_t)(T * R + 1), sizeof *cnt);
    if (!cnt) return TSGU_ENOMEM;
    transpose_ctx x = {A, tptr, trow, tperm, cnt, bounds, T};
    int status = tsgu_parallel_tasks(T, TSGU_PICK_INDEX(transpose_count, A->itype), &x);
    if (status == TSGU_OK) {
        TSGU_PICK_INDEX(transpose_offsets, A->itype)(&x);
        status = tsgu_parallel_tasks(T, TSGU_PICK_INDEX(transpose_place, A->itype), &x);
    }
    free(cnt);
    return status;
}

#else /* template body: idx_t and TSGU_FN (real_t unused) */

#include "tsgu_rows.h"

/* walk chunk t's rows, checking the structure; count (place = 0) or place entries */
static int TSGU_FN(transpose_walk)(const transpose_ctx *x, int64_t t, int place)
{
    const tsgu_csr *A = x->A;
    const idx_t *Aj = A->col;
    idx_t *Ti = x->trow, *Tq = x->tperm;
    int64_t n = A->nrows, m = A->ncols;
    int64_t *c = x->cnt + t * A->batch * m, r0 = x->bounds[t], r1 = x->bounds[t + 1];
    for (int64_t r = r0; r < r1; r++) {
        int64_t k = tsgu_item_of(A, r), i = r - k * n, start, end;
        if (!TSGU_FN(row_entries)(A, k, i, &start, &end)) return TSGU_EPTR_ORDER;
        int64_t prev = -1;
        for (int64_t e = start; e < end; e++) {
            int64_t j = Aj[e];
            if (j <= prev || j >= m) return tsgu_col_error(j, m);
            prev = j;
            if (!place) {
                c[k * m + j]++;
            } else {
                int64_t s = c[k * m + j]++;   /* next free slot of row j of A^T for this chunk */
                Ti[s] = (idx_t)i;
                Tq[s] = (idx_t)e;
            }
        }
    }
    return TSGU_OK;
}

static int TSGU_FN(transpose_count)(void *x, int64_t t)
{
    return TSGU_FN(transpose_walk)(x, t, 0);
}

static int TSGU_FN(transpose_place)(void *x, int64_t t)
{
    return TSGU_FN(transpose_walk)(x, t, 1);
}

/* counts -> slots: column key's entries start at tptr[key], chunk by chunk */
static void TSGU_FN(transpose_offsets)(const transpose_ctx *x)
{
    idx_t *Tp = x->tptr;
    int64_t *cnt = x->cnt, R = x->A->batch * x->A->ncols, T = x->T, pos = 0;
    for (int64_t key = 0; key < R; key++) {
        Tp[key] = (idx_t)pos;
        for (int64_t t = 0; t < T; t++) {
            int64_t c = cnt[t * R + key];
            cnt[t * R + key] = pos;
            pos += c;
        }
    }
    Tp[R] = (idx_t)pos;
}

#endif
