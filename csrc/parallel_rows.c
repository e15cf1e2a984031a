/* parallel_rows.c: run work on threads.
 *
 * tsgu_parallel_tasks runs fn(ctx, t) for t = 0..T-1 and returns the first
 * non-zero status in task order.  The threads are those of the OpenMP runtime
 * already in the process (PyTorch's: GOMP_parallel, found by name), where it is
 * visible: after a PyTorch op its threads spin for a while by default, and on a
 * machine with few cores a thread of our own competed with them for the cores
 * (17% slower mean-reduce forward + backward on 2 cores), where they now take the
 * work at once.  Else, in a process forked after the module loaded (GNU OpenMP's
 * threads are not the child's: a team there never starts), or with TSGU_OPENMP=0
 * in the environment (read once), threads of our own, task 0 on the calling one.
 * Either way, task t computes the same thing, whichever thread runs it.
 * tsgu_parallel_rows splits global rows into contiguous chunks of about equal
 * cost, cost(r) = entries before row r * work_per_entry + r (* work_per_row with
 * tsgu_parallel_rows_weighted), so a row of 10^5 entries is one thread's whole
 * share rather than a stall for everybody.  Each
 * row belongs to exactly one chunk, so kernels that write whole rows give the
 * same bits for any thread count. */
#define _GNU_SOURCE /* RTLD_DEFAULT, RTLD_NOLOAD, dladdr */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
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

/* the OpenMP runtime already in the process (PyTorch's), where its entry points are visible */
typedef void (*gomp_parallel_fn)(void (*body)(void *), void *data, unsigned nthreads, unsigned flags);
static gomp_parallel_fn gomp_parallel = NULL;
static int (*omp_thread_num)(void) = NULL, (*omp_team_size)(void) = NULL;
static pthread_once_t looked_up = PTHREAD_ONCE_INIT;
static volatile int forked = 0;   /* 1 in a child forked after tsgu_parallel_init */

static void in_child(void) { forked = 1; }

void tsgu_parallel_init(void) { (void)pthread_atfork(NULL, NULL, in_child); }

/* GOMP_parallel, and the thread number and team size from the same library (a process
 * may hold two OpenMP runtimes: the team's numbers must be its own) */
static void look_up_openmp(void)
{
    const char *use = getenv("TSGU_OPENMP");
    Dl_info where;
    if (use && strcmp(use, "0") == 0) return;
    void *parallel = dlsym(RTLD_DEFAULT, "GOMP_parallel");
    if (!parallel || !dladdr(parallel, &where) || !where.dli_fname) return;
    void *lib = dlopen(where.dli_fname, RTLD_LAZY | RTLD_NOLOAD);  /* already loaded: no new library */
    if (!lib) return;
    *(void **)&omp_thread_num = dlsym(lib, "omp_get_thread_num");
    *(void **)&omp_team_size = dlsym(lib, "omp_get_num_threads");
    if (omp_thread_num && omp_team_size && dlsym(lib, "GOMP_parallel") == parallel)
        *(void **)&gomp_parallel = parallel;
    /* lib stays open: its functions are called from now on */
}

typedef struct {
    task *c;
    int64_t T;
} team_work;

/* a team thread's share of the tasks: those of its number, modulo the team's size */
static void team_body(void *arg)
{
    const team_work *w = arg;
    int64_t size = omp_team_size();
    for (int64_t t = omp_thread_num(); t < w->T; t += size > 0 ? size : 1) run_task(&w->c[t]);
}

int tsgu_parallel_openmp(void)
{
    pthread_once(&looked_up, look_up_openmp);
    return gomp_parallel && !forked;
}

int tsgu_parallel_tasks(int64_t T, tsgu_task_fn fn, void *ctx)
{
    task c[TSGU_MAX_THREADS];
    pthread_t tid[TSGU_MAX_THREADS];
    int started[TSGU_MAX_THREADS] = {0};
    if (T > TSGU_MAX_THREADS) T = TSGU_MAX_THREADS;
    if (T <= 1) return T == 1 ? fn(ctx, 0) : TSGU_OK;
    for (int64_t t = 0; t < T; t++) c[t] = (task){fn, ctx, t, TSGU_OK};
    if (tsgu_parallel_openmp()) {
        team_work w = {c, T};
        gomp_parallel(team_body, &w, (unsigned)T, 0);
    } else {
        for (int64_t t = 1; t < T; t++) started[t] = pthread_create(&tid[t], NULL, run_task, &c[t]) == 0;
        run_task(&c[0]);
        for (int64_t t = 1; t < T; t++) {
            if (started[t]) pthread_join(tid[t], NULL);
            else run_task(&c[t]); /* no thread to be had: do its share here */
        }
    }
    int status = TSGU_OK;
    for (int64_t t = 0; t < T && status == TSGU_OK; t++) status = c[t].status;
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
