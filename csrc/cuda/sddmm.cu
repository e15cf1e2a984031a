/* sddmm.cu: the gradient of A @ B at A's stored entries, on the device.
 *
 *   out[e] = sum_c G[k][i, c] * B[k][col[e], c]   for entry e of global row r = k*n + i
 *
 * Entries are independent, so the work is split by entries, not rows: a
 * group of L lanes (the width in packs rounded up to a power of two, at most
 * 8) takes four consecutive entries, reading each one's global row from
 * rows[e] (an array the caller keeps per structure), and each lane multiplies
 * its packs of G's and B's rows; the group adds its lanes by a butterfly, a
 * fixed order.  Long and short rows cost the same per entry; no atomics, no
 * temporaries. */
#include "tsgu_cuda_dev.cuh"

#define UNROLL 4    /* entries per group */
#define MAX_LANES 8 /* lanes per entry */

template <typename T, typename I> struct SddmmArgs {
    const I *rows, *col;
    const T *G, *B;
    T *out;
    int64_t R, n, m, nnz, packs;
    int64_t gbs, grs, bbs, brs;
    int lanes;
};

template <typename T, typename I, int V> __global__ void sddmm_entries(SddmmArgs<T, I> a)
{
    typedef typename Acc<T>::type F;
    int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, e0 = t / a.lanes * UNROLL;
    int c0 = (int)(t % a.lanes);
    F d[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; u++) {
        int64_t e = e0 + u;
        d[u] = 0;
        if (e >= a.nnz) continue;
        int64_t r = (int64_t)a.rows[e], j = (int64_t)a.col[e];
        if (r < 0 || r >= a.R || j < 0 || j >= a.m) continue;
        int64_t k = r / a.n;
        const T *Gi = a.G + k * a.gbs + (r - k * a.n) * a.grs, *Bj = a.B + k * a.bbs + j * a.brs;
        for (int64_t c = c0; c < a.packs; c += a.lanes) {
            F x[V], y[V];
            load_pack<T, V>(Gi + c * V, x);
            load_pack<T, V>(Bj + c * V, y);
#pragma unroll
            for (int v = 0; v < V; v++) d[u] += x[v] * y[v];
        }
    }
#pragma unroll
    for (int u = 0; u < UNROLL; u++) {
        for (int off = a.lanes >> 1; off > 0; off >>= 1) d[u] += __shfl_xor_sync(TSGU_FULL, d[u], off);
        if (c0 == 0 && e0 + u < a.nnz) a.out[e0 + u] = from_acc<T>(d[u]);
    }
}

template <typename T, typename I>
static int sddmm(const tsgu_csr *A, const void *rows, const tsgu_dense *G, const tsgu_dense *B, void *out,
                 cudaStream_t stream)
{
    SddmmArgs<T, I> a;
    a.rows = (const I *)rows;
    a.col = (const I *)A->col;
    a.G = (const T *)G->data;
    a.B = (const T *)B->data;
    a.out = (T *)out;
    a.R = A->batch * A->nrows;
    a.n = A->nrows;
    a.m = A->ncols;
    a.nnz = A->nnz;
    a.gbs = G->bstride;
    a.grs = G->rstride;
    a.bbs = B->bstride;
    a.brs = B->rstride;
    int V = tsgu_pack_for_both(sizeof(T), G, B, G->cols);
    a.packs = G->cols / V;
    a.lanes = tsgu_lanes_for(a.packs);
    if (a.lanes > MAX_LANES) a.lanes = MAX_LANES;
    if (a.nnz == 0) return TSGU_OK;
    int64_t threads = (a.nnz + UNROLL - 1) / UNROLL * a.lanes, per_block = TSGU_WARPS * 32;
    unsigned blocks = (unsigned)((threads + per_block - 1) / per_block);
    const int W = 16 / (int)sizeof(T);
    if (V == 1) sddmm_entries<T, I, 1><<<blocks, per_block, 0, stream>>>(a);
    else sddmm_entries<T, I, W><<<blocks, per_block, 0, stream>>>(a);
    return tsgu_launched();
}

extern "C" int tsgu_cuda_sddmm(const tsgu_csr *A, const void *rows, const tsgu_dense *G, const tsgu_dense *B,
                               void *out, void *stream)
{
    return TSGU_CUDA_DISPATCH(A->rtype, A->itype, sddmm, A, rows, G, B, out, (cudaStream_t)stream);
}
