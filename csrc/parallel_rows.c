/* parallel_rows.c: run work on threads.
 *
 * tsgu_parallel_tasks runs fn(ctx, t) for t = 0..T-1, task 0 on the calling
 * thread, and returns the first non-zero status in task order.
 * tsgu_parallel_rows splits global rows into contiguous chunks of about equal
 * cost, cost(r) = entries before row r * work_per_entry + r (* work_per_row with
 * tsgu_parallel_rows_weighted), so a row of 10^5 entries is one thread's whole
 * share rather than a stall for everybody.  Each
 * row belongs to exactly one chunk, so kernels that write whole rows give the
 * same bits for any thread count. */
#include <pthread.h>
#include "tsgu_parallel.h"
#include "tsgu_row_ptr.h"

#define TSGU_MIN_COST_PER_THREAD (1 << 18) /* below this a thread costs more than it saves */

typedef struct {
    tsgu_task_fn fn;
    void *ctx;
    int64_t t;
    int status;
} task;

static void *run_task(void *arg)
{
    task *c = arg;
    c->status = c->fn(c->ctx, c->t);
    return NULL;
}

int tsgu_parallel_tasks(int64_t T, tsgu_task_fn fn, void *ctx)
{
    task c[TSGU_MAX_THREADS];
    pthread_t tid[TSGU_MAX_THREADS];
    int started[TSGU_MAX_THREADS] = {0};
    if (T > TSGU_MAX_THREADS) T = TSGU_MAX_THREADS;
    if (T <= 1) return T == 1 ? fn(ctx, 0) : TSGU_OK;
    for (int64_t t = 0; t < T; t++) c[t] = (task){fn, ctx, t, TSGU_OK};
    for (int64_t t = 1; t < T; t++) started[t] = pthread_create(&tid[t], NULL, run_task, &c[t]) == 0;
    run_task(&c[0]);
    int status = c[0].status;
    for (int64_t t = 1; t < T; t++) {
        if (started[t]) pthread_join(tid[t], NULL);
        else run_task(&c[t]); /* no thread to be had: do its share here */
        if (status == TSGU_OK) status = c[t].status;
    }
    return status;
}

/* start of global row r (0 <= r <= batch*nrows, batch >= 1) in the flat entry
 * arrays; used to balance threads, never to index memory.  The pointer is not
 * checked yet (the kernels do that), so it is clamped into its valid range
 * first: nothing overflows whatever it holds. */
static int64_t row_start(const tsgu_csr *A, int64_t r)
{
    int64_t k = A->nrows ? r / A->nrows : 0, i = r - k * A->nrows;
    int64_t q = k * A->ptr_stride + i;
    if (TSGU_BATCHED_PTR(A) && k == A->batch) { /* one past the last item: its end */
        k--;
        q = k * A->ptr_stride + A->nrows;
    }
    int64_t p = tsgu_ptr_at(A, q), top = TSGU_BATCHED_PTR(A) ? A->entry_stride : A->nnz;
    return (p < 0 ? 0 : p > top ? top : p) + k * A->entry_stride;
}

static int64_t row_cost(const tsgu_csr *A, int64_t r, int64_t w, int64_t wr)
{
    return row_start(A, r) * w + r * wr;
}

/* first row r in [lo, hi] with cost(r) >= target; pointers may be malformed, so
 * callers clamp the result to keep chunks ordered */
static int64_t find_row(const tsgu_csr *A, int64_t lo, int64_t hi, int64_t w, int64_t wr, int64_t target)
{
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (row_cost(A, mid, w, wr) < target) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static int64_t split_rows(const tsgu_csr *A, int64_t work_per_entry, int64_t work_per_row, int nthreads,
                          int64_t *bounds)
{
    int64_t R = A->batch * A->nrows, w = work_per_entry > 0 ? work_per_entry : 1;
    int64_t wr = work_per_row > 0 ? work_per_row : 1;
    int64_t total = R ? row_cost(A, R, w, wr) : 0;
    int64_t T = nthreads < 1 ? 1 : nthreads;
    if (T > TSGU_MAX_THREADS) T = TSGU_MAX_THREADS;
    if (total / TSGU_MIN_COST_PER_THREAD < T) T = total / TSGU_MIN_COST_PER_THREAD;
    if (T > R) T = R;
    if (T < 1) T = 1;
    bounds[0] = 0;
    for (int64_t t = 1; t < T; t++) {
        int64_t r = find_row(A, bounds[t - 1], R, w, wr, total / T * t);
        bounds[t] = r < bounds[t - 1] ? bounds[t - 1] : r;
    }
    bounds[T] = R;
    return T;
}

int64_t tsgu_split_rows(const tsgu_csr *A, int64_t work_per_entry, int nthreads, int64_t *bounds)
{
    return split_rows(A, work_per_entry, 1, nthreads, bounds);
}

typedef struct {
    tsgu_rows_fn fn;
    void *ctx;
    const int64_t *bounds;
} rows_job;

static int rows_task(void *vjob, int64_t t)
{
    const rows_job *j = vjob;
    return j->bounds[t] < j->bounds[t + 1] ? j->fn(j->ctx, j->bounds[t], j->bounds[t + 1]) : TSGU_OK;
}

int tsgu_parallel_rows_weighted(const tsgu_csr *A, int64_t work_per_entry, int64_t work_per_row, int nthreads,
                                tsgu_rows_fn fn, void *ctx)
{
    int64_t bounds[TSGU_MAX_THREADS + 1];
    if (A->batch * A->nrows == 0) return TSGU_OK;
    rows_job job = {fn, ctx, bounds};
    return tsgu_parallel_tasks(split_rows(A, work_per_entry, work_per_row, nthreads, bounds), rows_task, &job);
}

int tsgu_parallel_rows(const tsgu_csr *A, int64_t work_per_entry, int nthreads,
                       tsgu_rows_fn fn, void *ctx)
{
    return tsgu_parallel_rows_weighted(A, work_per_entry, 1, nthreads, fn, ctx);
}
