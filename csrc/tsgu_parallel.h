/* tsgu_parallel.h: running a kernel's work on threads (parallel_rows.c). */
#ifndef TSGU_PARALLEL_H
#define TSGU_PARALLEL_H

#include "tsgu.h"

#define TSGU_MAX_THREADS 256
/* Run fn(ctx, t) for t in [0, T) on T threads (the process's OpenMP team, or threads of
 * our own); first non-zero status in task order. */
typedef int (*tsgu_task_fn)(void *ctx, int64_t t);
int tsgu_parallel_tasks(int64_t T, tsgu_task_fn fn, void *ctx);
/* once, as the module loads: from then on a forked child runs threads of its own */
void tsgu_parallel_init(void);
/* 1 where tsgu_parallel_tasks runs on the process's OpenMP team, 0 on threads of our own */
int tsgu_parallel_openmp(void);
/* Split the global rows [0, batch*nrows) into T <= nthreads contiguous chunks of
 * about equal cost (entries*work_per_entry + rows); chunk t is
 * [bounds[t], bounds[t+1]).  Returns T; bounds needs TSGU_MAX_THREADS+1 slots. */
int64_t tsgu_split_rows(const tsgu_csr *A, int64_t work_per_entry, int nthreads, int64_t *bounds);
/* Run fn over those chunks on threads; first non-zero status any chunk returned. */
typedef int (*tsgu_rows_fn)(void *ctx, int64_t r0, int64_t r1);
int tsgu_parallel_rows(const tsgu_csr *A, int64_t work_per_entry, int nthreads,
                       tsgu_rows_fn fn, void *ctx);
/* the same with each row costing work_per_row besides its entries */
int tsgu_parallel_rows_weighted(const tsgu_csr *A, int64_t work_per_entry, int64_t work_per_row, int nthreads,
                                tsgu_rows_fn fn, void *ctx);
/* Split the global columns [0, batch*ncols) into T <= nthreads contiguous ranges of
 * about equal cost (entries + columns, the entries from a sample; split_cols.c);
 * range t is [bounds[t], bounds[t+1]).  Returns T; bounds needs TSGU_MAX_THREADS+1 slots. */
int64_t tsgu_split_cols(const tsgu_csr *A, int nthreads, int64_t *bounds);
/* the rows of C = A·B in T <= chunks chunks of about equal products (spgemm_split.c);
 * A and B checked; returns T, or -1 for want of memory */
int64_t tsgu_split_product_rows(const tsgu_csr *A, const tsgu_csr *B, int chunks, int nthreads, int64_t *bounds);

#endif
