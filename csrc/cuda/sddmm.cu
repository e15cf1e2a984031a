/* sddmm.cu: the gradient of A @ B at A's stored entries, on the device.
 *
 *   out[e] = sum_c G[k][i, c] * B[k][col[e], c]   for entry e of global row r = k*n + i
 *
 * Work: one warp per row (a warp per piece of a long row, tsgu_cuda.h).  The
 * warp reads 32 entries' columns at once and hands them round by shuffles;
 * its lanes form groups of L (the row width in packs, rounded up to a power
 * of two, at most 32) and each group takes every (32/L)-th entry, several in
 * flight: each lane multiplies packs of G's row (kept in registers for the
 * first 32 packs) and B's, and the group adds its lanes by a butterfly, a
 * fixed order.  No atomics, no temporaries. */
#include "tsgu_cuda_dev.cuh"

#define UNROLL 2 /* entries per group in flight */

template <typename T, typename I> struct SddmmArgs {
    const I *ptr, *col;
    const T *G, *B;
    T *out;
    int64_t R, n, m, nnz, packs;
    int64_t gbs, grs, bbs, brs;
    int lanes;
    int64_t long_row, nlong, npieces;
    const int64_t *long_rows, *piece_off, *piece_long;
};

/* out[e] for the entries [s, e) of global row r */
template <typename T, typename I, int V>
__device__ __forceinline__ void dots(const SddmmArgs<T, I> &a, int64_t r, int64_t s, int64_t e)
{
    typedef typename Acc<T>::type F;
    int lane = threadIdx.x & 31, L = a.lanes, groups = 32 / L, g = lane / L, c0 = lane % L;
    int64_t k = r / a.n, i = r - k * a.n;
    const T *Gi = a.G + k * a.gbs + i * a.grs, *Bk = a.B + k * a.bbs;
    F gi[V]; /* this lane's first pack of G's row */
#pragma unroll
    for (int v = 0; v < V; v++) gi[v] = 0;
    if (c0 < a.packs) load_pack<T, V>(Gi + (int64_t)c0 * V, gi);
    for (int64_t base = s; base < e; base += 32) {
        I j = base + lane < e ? a.col[base + lane] : (I)-1;
        int cnt = (int)(e - base < 32 ? e - base : 32);
        for (int t0 = 0; t0 < cnt; t0 += groups * UNROLL) {
            F d[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                int t = t0 + u * groups + g;
                I ju = __shfl_sync(TSGU_FULL, j, t & 31);
                d[u] = 0;
                if (t < cnt && ju >= 0 && (int64_t)ju < a.m) {
                    const T *Bj = Bk + (int64_t)ju * a.brs;
                    F x[V];
                    for (int64_t c = c0; c < a.packs; c += L) {
                        F y[V];
                        if (c == c0) {
#pragma unroll
                            for (int v = 0; v < V; v++) y[v] = gi[v];
                        } else {
                            load_pack<T, V>(Gi + c * V, y);
                        }
                        load_pack<T, V>(Bj + c * V, x);
#pragma unroll
                        for (int v = 0; v < V; v++) d[u] += y[v] * x[v];
                    }
                }
            }
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                for (int off = L >> 1; off > 0; off >>= 1) d[u] += __shfl_xor_sync(TSGU_FULL, d[u], off);
                int t = t0 + u * groups + g;
                if (c0 == 0 && t < cnt) a.out[base + t] = from_acc<T>(d[u]);
            }
        }
    }
}

template <typename T, typename I, int V> __global__ void sddmm_rows(SddmmArgs<T, I> a)
{
    int64_t r = (int64_t)blockIdx.x * TSGU_WARPS + threadIdx.x / 32, s, e;
    if (r >= a.R) return;
    row_range(a.ptr, r, a.nnz, &s, &e);
    if (e - s > a.long_row) return; /* the plan's pieces do it */
    dots<T, I, V>(a, r, s, e);
}

template <typename T, typename I, int V> __global__ void sddmm_pieces(SddmmArgs<T, I> a)
{
    int64_t q = (int64_t)blockIdx.x * TSGU_WARPS + threadIdx.x / 32;
    if (q >= a.npieces) return;
    int64_t r, s, e;
    if (!piece_range(a.ptr, a.R, a.nnz, a.long_row, a.nlong, a.long_rows, a.piece_off, a.piece_long, q, &r, &s, &e))
        return;
    dots<T, I, V>(a, r, s, e);
}

static unsigned warp_blocks(int64_t warps) { return (unsigned)((warps + TSGU_WARPS - 1) / TSGU_WARPS); }

template <typename T, typename I, int V>
static int launch(const SddmmArgs<T, I> &a, const tsgu_cuda_plan *plan, cudaStream_t stream)
{
    if (a.R > 0) sddmm_rows<T, I, V><<<warp_blocks(a.R), TSGU_WARPS * 32, 0, stream>>>(a);
    if (plan->npieces > 0)
        sddmm_pieces<T, I, V><<<warp_blocks(plan->npieces), TSGU_WARPS * 32, 0, stream>>>(a);
    return tsgu_launched();
}

template <typename T, typename I>
static int sddmm(const tsgu_csr *A, const tsgu_dense *G, const tsgu_dense *B, void *out,
                 const tsgu_cuda_plan *plan, cudaStream_t stream)
{
    SddmmArgs<T, I> a;
    a.ptr = (const I *)A->ptr;
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
    a.long_row = plan->npieces > 0 ? plan->long_row : INT64_MAX;
    a.nlong = plan->nlong;
    a.npieces = plan->npieces;
    a.long_rows = plan->long_rows;
    a.piece_off = plan->piece_off;
    a.piece_long = plan->piece_long;
    int64_t p = G->cols;
    int V = tsgu_pack_for(sizeof(T), G->data, p, a.grs, a.gbs);
    if (tsgu_pack_for(sizeof(T), B->data, p, a.brs, a.bbs) != V) V = 1;
    a.packs = p / V;
    a.lanes = tsgu_lanes_for(a.packs);
    const int W = 16 / (int)sizeof(T);
    return V == 1 ? launch<T, I, 1>(a, plan, stream) : launch<T, I, W>(a, plan, stream);
}

extern "C" int tsgu_cuda_sddmm(const tsgu_csr *A, const tsgu_dense *G, const tsgu_dense *B, void *out,
                               const tsgu_cuda_plan *plan, void *stream)
{
    return TSGU_CUDA_DISPATCH(A->rtype, A->itype, sddmm, A, G, B, out, plan, (cudaStream_t)stream);
}
