#ifndef TSGU_IN_TEMPLATE
/* spgemm.c: C = A·B, sparse times sparse, item by item (A[k] n x l, B[k] l x m, CSR):
 *     C[k][i,c] = sum over the entries (i, j) of A[k] and (j, c) of B[k] of A[k][i,j] * B[k][j,c]
 * on the structural product pattern (a column c wherever some stored (i, j) meets a
 * stored (j, c): a sum that cancels to zero is still an entry, as in torch.sparse.mm),
 * its columns increasing in each row.  In two steps, so that the caller allocates C
 * once its size is known, and each row is computed once:
 *   tsgu_spgemm computes every row into a workspace and gives nnzC, C's size;
 *   tsgu_spgemm_write copies it out: the row pointers
 *       Cptr[r] = number of entries of C in global rows before r    (r = k*n + i),
 *   Cptr of batch*n+1 int64, the columns (int64 Ccol, or int32 Ccol32 where they fit,
 *   the other NULL) and values Cval (nnzC), and where Crow (and Citem) are not NULL
 *   each entry's row i (and item k): the index rows of a COO tensor;
 *   tsgu_spgemm_done gives the workspace back (after an error too).
 * Gustavson's row-by-row product: row i scales the rows j of B that its entries
 * name and adds them up in a row accumulator (tsgu_accum.h: the sparse accumulator,
 * a sum per column read back in order through its bitmap, or for m past what that
 * takes, a hashed table whose keys are sorted), in the order of A's entries then
 * B's; 16-bit values are summed in float and rounded once.  The rows are cut into
 * chunks of about equal work (spgemm_split.c), one a thread, and each thread appends
 * its rows, in order, to its chunk's buffer: a chunk is a contiguous run of C, so the
 * second step is one copy a chunk, and the bits are the same for any thread count.
 * The workspace (its buffers and pointers) is kept for the next call, so that a
 * training step's product lands in memory already paged in: one workspace, taken
 * and given back atomically (a call that finds it taken allocates its own, freed
 * after), and freed rather than kept past TSGU_SPGEMM_KEEP_BYTES (or on request:
 * tsgu_spgemm_release).
 * Both structures are checked first (csr_check.c). */
#include <stdatomic.h>
#include <string.h>
#include "tsgu.h"
#include "tsgu_accum.h"
#include "tsgu_advise.h"
#include "tsgu_parallel.h"

#define TSGU_SPGEMM_KEEP_BYTES ((size_t)1 << 28)   /* 256 MiB: a product of ~16M entries (f64, int64) */
#define TSGU_SPGEMM_MIN_GROW ((size_t)1 << 12)     /* entries: a chunk's first buffer */

typedef struct {
    void *col, *val;            /* the chunk's columns and values, its rows one after the other */
    size_t col_bytes, val_bytes; /* allocated */
    int64_t used;               /* entries written in this call */
} spgemm_buf;

struct tsgu_spgemm_work {
    int64_t R, n, T, nnzC;
    int64_t *ptr;               /* R + 1 row pointers (ptr_bytes allocated): the counts, then their prefix */
    size_t ptr_bytes;
    size_t col_size, val_size;  /* bytes of a buffered column (4 where m fits int32, else 8) and value */
    int64_t bounds[TSGU_MAX_THREADS + 1];
    spgemm_buf buf[TSGU_MAX_THREADS];
};

/* the workspace kept between calls, or NULL (taken, or none yet) */
static _Atomic(tsgu_spgemm_work *) kept_work = NULL;

typedef struct {
    const tsgu_csr *A, *B;
    tsgu_spgemm_work *w;
} product_ctx;

/* p, of *bytes, grown to at least `want` bytes, contents kept: the block (p where it
 * is large enough), or NULL where it cannot be had (p is then untouched) */
static void *grown(void *p, size_t *bytes, size_t want)
{
    if (want <= *bytes) return p;
    void *q = realloc(p, want);
    if (!q) return NULL;
    tsgu_advise_output(q, (int64_t)want);   /* the part not written yet: huge pages */
    *bytes = want;
    return q;
}

/* room in b for `more` entries after those written; at least double when it grows,
 * so a chunk that grows from nothing copies fewer entries than it ends with */
static int buf_room(spgemm_buf *b, int64_t more, size_t col_size, size_t val_size)
{
    size_t need = (size_t)(b->used + more);
    if (need * col_size <= b->col_bytes && need * val_size <= b->val_bytes) return TSGU_OK;
    size_t entries = 2 * (size_t)b->used > need ? 2 * (size_t)b->used : need;
    if (entries < TSGU_SPGEMM_MIN_GROW) entries = TSGU_SPGEMM_MIN_GROW;
    void *col = grown(b->col, &b->col_bytes, entries * col_size);
    if (col) b->col = col;
    void *val = col ? grown(b->val, &b->val_bytes, entries * val_size) : NULL;
    if (val) b->val = val;
    return val ? TSGU_OK : TSGU_ENOMEM;
}

static void free_work(tsgu_spgemm_work *w)
{
    if (!w) return;
    for (int t = 0; t < TSGU_MAX_THREADS; t++) {
        free(w->buf[t].col);
        free(w->buf[t].val);
    }
    free(w->ptr);
    free(w);
}

static size_t work_bytes(const tsgu_spgemm_work *w)
{
    size_t bytes = w->ptr_bytes;
    for (int t = 0; t < TSGU_MAX_THREADS; t++) bytes += w->buf[t].col_bytes + w->buf[t].val_bytes;
    return bytes;
}

void tsgu_spgemm_done(tsgu_spgemm_work *w)
{
    if (!w) return;
    tsgu_spgemm_work *none = NULL;
    if (work_bytes(w) > TSGU_SPGEMM_KEEP_BYTES || !atomic_compare_exchange_strong(&kept_work, &none, w))
        free_work(w);
}

size_t tsgu_spgemm_release(void)
{
    tsgu_spgemm_work *w = atomic_exchange(&kept_work, NULL);
    size_t bytes = w ? work_bytes(w) : 0;
    free_work(w);
    return bytes;
}

#define TSGU_HALF_TOO 1
#define TSGU_TEMPLATE_FILE "spgemm.c"
#include "tsgu_template.h"

int tsgu_spgemm(const tsgu_csr *A, const tsgu_csr *B, tsgu_spgemm_work **work, int64_t *nnzC, int nthreads)
{
    int status = tsgu_csr_check(A, nthreads);
    if (status == TSGU_OK) status = tsgu_csr_check(B, nthreads);
    if (status != TSGU_OK) return status;
    tsgu_spgemm_work *w = atomic_exchange(&kept_work, NULL);
    if (!w && !(w = calloc(1, sizeof *w))) return TSGU_ENOMEM;
    *work = w;                                   /* the caller's to give back, from here on */
    w->R = A->batch * A->nrows;
    w->n = A->nrows;
    w->col_size = B->ncols <= (int64_t)INT32_MAX + 1 ? sizeof(int32_t) : sizeof(int64_t);
    w->val_size = (size_t)tsgu_real_size(A->rtype);
    int64_t *ptr = grown(w->ptr, &w->ptr_bytes, (size_t)(w->R + 1) * sizeof *w->ptr);
    if (!ptr) return TSGU_ENOMEM;
    w->ptr = ptr;
    w->T = tsgu_split_product_rows(A, B, nthreads, nthreads, w->bounds);
    if (w->T < 0) return TSGU_ENOMEM;
    for (int64_t t = 0; t < w->T; t++) w->buf[t].used = 0;
    product_ctx x = {A, B, w};
    status = tsgu_parallel_tasks(w->T, TSGU_PICK_HALF(product_rows, A->rtype, A->itype), &x);
    if (status != TSGU_OK) return status;
    w->ptr[0] = 0;
    for (int64_t r = 0; r < w->R; r++) w->ptr[r + 1] += w->ptr[r];
    *nnzC = w->nnzC = w->ptr[w->R];
    return TSGU_OK;
}

typedef struct {
    const tsgu_spgemm_work *w;
    int64_t *Ccol, *Crow, *Citem;
    int32_t *Ccol32;
    void *Cval;
} write_ctx;

/* chunk t of C: its columns and values from its buffer, and its rows' (items') indices */
static int write_chunk(void *ctx, int64_t t)
{
    const write_ctx *x = ctx;
    const tsgu_spgemm_work *w = x->w;
    const spgemm_buf *b = &w->buf[t];
    int64_t r0 = w->bounds[t], r1 = w->bounds[t + 1], o = w->ptr[r0], count = b->used;
    if (count == 0) return TSGU_OK;              /* (and b's arrays may be NULL) */
    if (x->Ccol32 && w->col_size == sizeof(int32_t))
        memcpy(x->Ccol32 + o, b->col, (size_t)count * sizeof(int32_t));
    else if (x->Ccol && w->col_size == sizeof(int64_t))
        memcpy(x->Ccol + o, b->col, (size_t)count * sizeof(int64_t));
    else if (x->Ccol)                            /* buffered as int32, wanted as int64 */
        for (int64_t q = 0; q < count; q++) x->Ccol[o + q] = ((const int32_t *)b->col)[q];
    else                                         /* int32 wanted: columns < m <= 2^31 - 1 (the caller's check) */
        for (int64_t q = 0; q < count; q++) x->Ccol32[o + q] = (int32_t)((const int64_t *)b->col)[q];
    memcpy((char *)x->Cval + o * w->val_size, b->val, (size_t)count * w->val_size);
    for (int64_t r = r0; (x->Crow || x->Citem) && r < r1; r++) {
        int64_t k = r / w->n, i = r - k * w->n;
        for (int64_t q = w->ptr[r]; q < w->ptr[r + 1]; q++) {
            if (x->Crow) x->Crow[q] = i;
            if (x->Citem) x->Citem[q] = k;
        }
    }
    return TSGU_OK;
}

int tsgu_spgemm_write(const tsgu_spgemm_work *w, int64_t *Cptr, int64_t *Ccol, int32_t *Ccol32, int64_t *Crow,
                      int64_t *Citem, void *Cval)
{
    if (Ccol) tsgu_advise_output(Ccol, w->nnzC * (int64_t)sizeof *Ccol);  /* fresh outputs: huge pages */
    else tsgu_advise_output(Ccol32, w->nnzC * (int64_t)sizeof *Ccol32);
    if (Crow) tsgu_advise_output(Crow, w->nnzC * (int64_t)sizeof *Crow);
    if (Citem) tsgu_advise_output(Citem, w->nnzC * (int64_t)sizeof *Citem);
    tsgu_advise_output(Cval, w->nnzC * (int64_t)w->val_size);
    memcpy(Cptr, w->ptr, (size_t)(w->R + 1) * sizeof *Cptr);
    write_ctx x = {w, Ccol, Crow, Citem, Ccol32, Cval};
    return tsgu_parallel_tasks(w->T, write_chunk, &x);
}

#else /* template body: real_t, acc_t, idx_t, TSGU_FN, ... (tsgu_template_types.h) */

#define TSGU_SPGEMM_ROWS 1
#include "tsgu_rows.h"

/* row r of C onto the end of chunk buffer b, its count into ptr[r + 1]: with spa
 * (constant), through the sparse accumulator (a sum per column), else through the
 * table acc; the row's columns are read back into the buffer, or for int32 columns
 * into keys (grown to room for the row, *nkeys entries) first */
TSGU_ALWAYS_INLINE int TSGU_FN(product_row)(const product_ctx *x, int64_t r, spgemm_buf *b, tsgu_spa *spa,
                                            tsgu_accum *acc, const int use_spa, int64_t **keys, int64_t *nkeys)
{
    const tsgu_csr *A = x->A, *B = x->B;
    tsgu_spgemm_work *w = x->w;
    const idx_t *Aj = A->col, *Bj = B->col;
    const real_t *Av = A->val, *Bv = B->val;
    int64_t n = A->nrows, k = tsgu_item_of(A, r), i = r - k * n, start, end, bs, be, count = 0;
    TSGU_FN(row_entries)(A, k, i, &start, &end);
    if (!use_spa && start < end) {              /* the table's size: a bound on the row's columns */
        int64_t most = 0;
        for (int64_t e = start; e < end; e++) {
            TSGU_FN(row_entries)(B, k, Aj[e], &bs, &be);
            most += be - bs;
        }
        int status = tsgu_accum_reset(acc, most, B->ncols);
        if (status != TSGU_OK) return status;
    }
    acc_t *sum = use_spa ? spa->sum : acc->sum;
    for (int64_t e = start; e < end; e++) {
        acc_t a = TSGU_LOAD(Av[e]);
        TSGU_FN(prefetch_brow)(A, B, k, e, Bv);
        TSGU_FN(row_entries)(B, k, Aj[e], &bs, &be);
        for (int64_t f = bs; f < be; f++) {
            int64_t c = Bj[f], s = use_spa ? c : tsgu_accum_slot(acc, c);
            acc_t v = a * TSGU_LOAD(Bv[f]);
            if (use_spa ? tsgu_spa_mark(spa, c) : acc->key[s] < 0) {
                count++;
                if (!use_spa) acc->key[s] = c;
                sum[s] = v;
            } else {
                sum[s] += v;
            }
        }
    }
    w->ptr[r + 1] = count;
    if (count == 0) return TSGU_OK;              /* an empty row: nothing marked, nothing to write */
    /* (an error below ends the task: spa, still marked, is not reused) */
    int status = buf_room(b, count, w->col_size, w->val_size);
    if (status == TSGU_OK && w->col_size == sizeof(int32_t) && count > *nkeys) {
        size_t bytes = (size_t)*nkeys * sizeof **keys;
        int64_t *more = grown(*keys, &bytes, (size_t)count * sizeof **keys);
        if (more) {
            *keys = more;
            *nkeys = count;
        }
        status = more ? TSGU_OK : TSGU_ENOMEM;
    }
    if (status != TSGU_OK) return status;
    int64_t *cols = w->col_size == sizeof(int64_t) ? (int64_t *)b->col + b->used : *keys;
    real_t *Cv = (real_t *)b->val + b->used;
    if (use_spa) {
        tsgu_spa_keys(spa, cols);
        for (int64_t q = 0; q < count; q++) Cv[q] = TSGU_STORE(sum[cols[q]]);
    } else {
        tsgu_accum_keys(acc, cols, count);
        for (int64_t q = 0; q < count; q++) Cv[q] = TSGU_STORE(sum[tsgu_accum_slot(acc, cols[q])]);
    }
    if (w->col_size == sizeof(int32_t))          /* columns < m <= 2^31 */
        for (int64_t q = 0; q < count; q++) ((int32_t *)b->col)[b->used + q] = (int32_t)cols[q];
    b->used += count;
    return TSGU_OK;
}

static int TSGU_FN(product_rows)(void *ctx, int64_t t)
{
    const product_ctx *x = ctx;
    spgemm_buf *b = &x->w->buf[t];
    tsgu_spa spa;
    tsgu_accum acc = {.sum_size = sizeof(acc_t)};
    int64_t *keys = NULL, nkeys = 0;
    int init = tsgu_spa_init(&spa, x->B->ncols, sizeof(acc_t));     /* -1: m too large, take the table */
    int status = init == -1 ? TSGU_OK : init;
    for (int64_t r = x->w->bounds[t]; r < x->w->bounds[t + 1] && status == TSGU_OK; r++)
        status = init == TSGU_OK ? TSGU_FN(product_row)(x, r, b, &spa, &acc, 1, &keys, &nkeys)
                                 : TSGU_FN(product_row)(x, r, b, NULL, &acc, 0, &keys, &nkeys);
    free(keys);
    tsgu_spa_free(&spa);
    tsgu_accum_free(&acc);
    return status;
}

#endif
