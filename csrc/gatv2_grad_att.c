#ifndef TSGU_IN_TEMPLATE
/* gatv2_grad_att.c: the gradient of GATv2's attention vector, the sum of the rows'
 * shares that gatv2_grad_rows.c wrote (arows, n x width, width = H*C):
 *     gatt[k] = sum_{i < n} arows[i,k]
 * each summed in double, in increasing i, by one thread: thread t owns the columns
 * [width*t/T, width*(t+1)/T), so the bits do not depend on the thread count. */
#include <stdlib.h>
#include "tsgu.h"
#include "tsgu_parallel.h"

typedef struct {
    int64_t n, width, T;
    const void *arows; /* (n, width) */
    void *gatt;        /* (width,) */
} gatv2_grad_att_ctx;

#define TSGU_MIN_WORK (1 << 18) /* additions below which one thread does it all */

#define TSGU_TEMPLATE_FILE "gatv2_grad_att.c"
#include "tsgu_template.h"

int tsgu_gatv2_grad_att(int64_t n, int64_t width, tsgu_real rtype, const void *arows, void *gatt, int nthreads)
{
    int64_t T = nthreads < 1 ? 1 : nthreads;
    if (T > TSGU_MAX_THREADS) T = TSGU_MAX_THREADS;
    if (T > n * width / TSGU_MIN_WORK) T = n * width / TSGU_MIN_WORK;
    if (T > width) T = width;
    if (T < 1) T = 1;
    gatv2_grad_att_ctx x = {n, width, T, arows, gatt};
    return tsgu_parallel_tasks(T, TSGU_PICK(gatv2_grad_att_task, rtype, TSGU_I64), &x);
}

#else /* template body: real_t, acc_t, idx_t, TSGU_FN */

TSGU_ISA_ATTR static int TSGU_FN(gatv2_grad_att_task)(void *vctx, int64_t t)
{
    const gatv2_grad_att_ctx *x = vctx;
    const real_t *P = x->arows;
    real_t *out = x->gatt;
    const int64_t W = x->width, k0 = W * t / x->T, k1 = W * (t + 1) / x->T;
    double *s = calloc((size_t)(k1 - k0 + 1), sizeof *s);  /* the sums of the own columns, row by row */
    if (!s) return TSGU_ENOMEM;
    for (int64_t i = 0; i < x->n; i++) {
        const real_t *restrict Pi = P + i * W + k0;
        for (int64_t k = 0; k < k1 - k0; k++) s[k] += Pi[k];
    }
    for (int64_t k = k0; k < k1; k++) out[k] = (real_t)s[k - k0];
    free(s);
    return TSGU_OK;
}

#endif
