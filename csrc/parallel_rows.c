/* parallel_rows.c: run a row-range function on threads, each chunk costing about
 * the same.  cost(r) = entries before row r * work_per_entry + r, so a row of
 * 10^5 entries is one thread's whole share rather than a stall for everybody.
 * Chunks are contiguous row ranges and each row belongs to exactly one chunk,
 * so kernels that write whole rows give the same bits for any thread count. */
#include <pthread.h>
#include "tsgu.h"

#define TSGU_MAX_THREADS 256
#define TSGU_MIN_COST_PER_THREAD (1 << 16) /* below this a thread costs more than it saves */

typedef struct {
    tsgu_rows_fn fn;
    void *ctx;
    int64_t r0, r1;
    int status;
} chunk;

static void *run_chunk(void *arg)
{
    chunk *c = arg;
    c->status = c->fn(c->ctx, c->r0, c->r1);
    return NULL;
}

static int64_t row_cost(const tsgu_csr *A, int64_t r, int64_t w)
{
    return tsgu_row_start(A, r) * w + r;
}

/* first row r in [lo, hi] with cost(r) >= target; pointers may be malformed, so
 * callers clamp the result to keep chunks ordered */
static int64_t find_row(const tsgu_csr *A, int64_t lo, int64_t hi, int64_t w, int64_t target)
{
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (row_cost(A, mid, w) < target) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

int tsgu_parallel_rows(const tsgu_csr *A, int64_t work_per_entry, int nthreads,
                       tsgu_rows_fn fn, void *ctx)
{
    int64_t R = A->batch * A->nrows, w = work_per_entry > 0 ? work_per_entry : 1;
    int64_t total = R ? row_cost(A, R, w) : 0;
    int64_t T = nthreads < 1 ? 1 : nthreads;
    if (T > TSGU_MAX_THREADS) T = TSGU_MAX_THREADS;
    if (total / TSGU_MIN_COST_PER_THREAD < T) T = total / TSGU_MIN_COST_PER_THREAD;
    if (T > R) T = R;
    if (T <= 1 || total <= 0) return R ? fn(ctx, 0, R) : TSGU_OK;

    chunk c[TSGU_MAX_THREADS];
    pthread_t tid[TSGU_MAX_THREADS];
    int started[TSGU_MAX_THREADS] = {0};
    int64_t r0 = 0;
    for (int64_t t = 0; t < T; t++) {
        int64_t r1 = t == T - 1 ? R : find_row(A, r0, R, w, total / T * (t + 1));
        if (r1 < r0) r1 = r0;
        c[t] = (chunk){fn, ctx, r0, r1, TSGU_OK};
        r0 = r1;
    }
    for (int64_t t = 1; t < T; t++)
        started[t] = pthread_create(&tid[t], NULL, run_chunk, &c[t]) == 0;
    run_chunk(&c[0]);
    int status = c[0].status;
    for (int64_t t = 1; t < T; t++) {
        if (started[t]) pthread_join(tid[t], NULL);
        else run_chunk(&c[t]); /* no thread to be had: do its share here */
        if (status == TSGU_OK) status = c[t].status;
    }
    return status;
}
