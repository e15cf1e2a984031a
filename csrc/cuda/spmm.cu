/* spmm.cu: C[k] = A[k] @ B[k] for a CSR A (global layout), on the device.
 *
 *   C[k][i, c] = sum over the entries e of global row r = k*n + i of
 *                val[e] * B[k][col[e], c]          (val[perm[e]] with perm)
 *
 * With A's transpose pattern (rows of A^T, their entries' rows of A as col,
 * and the position of each in A's arrays as perm) the same kernel gives
 * A^T @ G, deterministically: no atomics.
 *
 * Work: one warp per (row, chunk of 32 packs of columns).  The warp reads 32
 * entries' columns and values at once (one per lane, coalesced) and hands
 * them round by shuffles; its lanes form groups of L (the row width in packs,
 * rounded up to a power of two, at most 32), each group takes every
 * (32/L)-th entry and its lanes one pack of B's row each, several entries in
 * flight.  The groups' sums are added by a butterfly over lanes: a fixed
 * order.  Rows of more than plan->long_row entries are left to the plan
 * (tsgu_cuda.h): a warp per piece sums into the workspace, then one thread
 * per (long row, column) adds its pieces in order. */
#include "tsgu_cuda_dev.cuh"

#define UNROLL 4 /* entries per group in flight */

template <typename T, typename I> struct SpmmArgs {
    const I *ptr, *col, *perm;
    const T *val, *B;
    T *C;
    int64_t R, n, m, nnz, p, packs, chunks;
    int64_t bbs, brs, cbs, crs; /* B's and C's batch and row strides */
    int lanes;
    int64_t long_row, nlong, npieces;
    const int64_t *long_rows, *piece_off, *piece_long;
    typename Acc<T>::type *work;
};

/* acc[0..V) += this lane's pack (column pack cv) of sum over entries [s, e) of
 * val[e] * B[k][col[e], :]; the groups' partial sums are not yet added */
template <typename T, typename I, int V>
__device__ __forceinline__ void gather_sum(const SpmmArgs<T, I> &a, int64_t s, int64_t e, const T *Bk, int64_t cv,
                                           typename Acc<T>::type *acc)
{
    typedef typename Acc<T>::type F;
    int lane = threadIdx.x & 31, L = a.lanes, groups = 32 / L, g = lane / L;
    bool mine = cv < a.packs;
    for (int64_t base = s; base < e; base += 32) {
        int64_t me = base + lane;
        I j = -1;
        F w = 0;
        if (me < e) {
            j = a.col[me];
            int64_t at = a.perm ? (int64_t)a.perm[me] : me;
            w = at >= 0 && at < a.nnz ? to_acc(a.val[at]) : F(0);
        }
        int cnt = (int)(e - base < 32 ? e - base : 32);
        for (int t0 = 0; t0 < cnt; t0 += groups * UNROLL) {
            F x[UNROLL][V], wu[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                int t = t0 + u * groups + g;
                I ju = __shfl_sync(TSGU_FULL, j, t & 31);
                wu[u] = __shfl_sync(TSGU_FULL, w, t & 31);
                bool ok = mine && t < cnt && ju >= 0 && (int64_t)ju < a.m;
                if (ok) {
                    load_pack<T, V>(Bk + (int64_t)ju * a.brs + cv * V, x[u]);
                } else {
                    wu[u] = 0;
#pragma unroll
                    for (int v = 0; v < V; v++) x[u][v] = 0;
                }
            }
#pragma unroll
            for (int u = 0; u < UNROLL; u++)
#pragma unroll
                for (int v = 0; v < V; v++) acc[v] += wu[u] * x[u][v];
        }
    }
}

/* add the groups' sums: afterwards every lane of group 0 holds its pack's total */
template <typename F, int V> __device__ __forceinline__ void add_groups(F *acc, int L)
{
    for (int off = L; off < 32; off <<= 1)
#pragma unroll
        for (int v = 0; v < V; v++) acc[v] += __shfl_xor_sync(TSGU_FULL, acc[v], off);
}

template <typename T, typename I, int V> __global__ void spmm_rows(SpmmArgs<T, I> a)
{
    typedef typename Acc<T>::type F;
    int64_t w = (int64_t)blockIdx.x * TSGU_WARPS + threadIdx.x / 32;
    if (w >= a.R * a.chunks) return;
    int64_t r = w / a.chunks, s, e;
    row_range(a.ptr, r, a.nnz, &s, &e);
    if (e - s > a.long_row) return; /* the plan's pieces sum it */
    int lane = threadIdx.x & 31;
    int64_t k = r / a.n, i = r - k * a.n, cv = (w % a.chunks) * a.lanes + lane % a.lanes;
    F acc[V];
#pragma unroll
    for (int v = 0; v < V; v++) acc[v] = 0;
    gather_sum<T, I, V>(a, s, e, a.B + k * a.bbs, cv, acc);
    add_groups<F, V>(acc, a.lanes);
    if (lane < a.lanes && cv < a.packs) store_pack<T, V>(a.C + k * a.cbs + i * a.crs + cv * V, acc);
}

template <typename T, typename I, int V> __global__ void spmm_pieces(SpmmArgs<T, I> a)
{
    typedef typename Acc<T>::type F;
    int64_t w = (int64_t)blockIdx.x * TSGU_WARPS + threadIdx.x / 32;
    if (w >= a.npieces * a.chunks) return;
    int64_t q = w / a.chunks, r, s, e;
    if (!piece_range(a.ptr, a.R, a.nnz, a.long_row, a.nlong, a.long_rows, a.piece_off, a.piece_long, q, &r, &s, &e))
        return;
    int lane = threadIdx.x & 31;
    int64_t k = r / a.n, cv = (w % a.chunks) * a.lanes + lane % a.lanes;
    F acc[V];
#pragma unroll
    for (int v = 0; v < V; v++) acc[v] = 0;
    gather_sum<T, I, V>(a, s, e, a.B + k * a.bbs, cv, acc);
    add_groups<F, V>(acc, a.lanes);
    if (lane < a.lanes && cv < a.packs)
#pragma unroll
        for (int v = 0; v < V; v++) a.work[q * a.p + cv * V + v] = acc[v];
}

template <typename T, typename I> __global__ void spmm_long_rows(SpmmArgs<T, I> a)
{
    typedef typename Acc<T>::type F;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < a.nlong * a.p;
         t += (int64_t)gridDim.x * blockDim.x) {
        int64_t L = t / a.p, c = t - L * a.p, r = a.long_rows[L], k = r / a.n, i = r - k * a.n;
        int64_t q0 = a.piece_off[L], q1 = a.piece_off[L + 1];
        if (r < 0 || r >= a.R || q0 < 0 || q1 > a.npieces) continue;
        F sum = 0;
        for (int64_t q = q0; q < q1; q++) sum += a.work[q * a.p + c];
        a.C[k * a.cbs + i * a.crs + c] = from_acc<T>(sum);
    }
}

static unsigned warp_blocks(int64_t warps) { return (unsigned)((warps + TSGU_WARPS - 1) / TSGU_WARPS); }

template <typename T, typename I, int V>
static int launch(const SpmmArgs<T, I> &a, const tsgu_cuda_plan *plan, cudaStream_t stream)
{
    if (a.R * a.chunks > 0) spmm_rows<T, I, V><<<warp_blocks(a.R * a.chunks), TSGU_WARPS * 32, 0, stream>>>(a);
    if (plan->npieces > 0) {
        spmm_pieces<T, I, V><<<warp_blocks(plan->npieces * a.chunks), TSGU_WARPS * 32, 0, stream>>>(a);
        int64_t blocks = (plan->nlong * a.p + 255) / 256;
        spmm_long_rows<T, I><<<(unsigned)(blocks > 65535 ? 65535 : blocks), 256, 0, stream>>>(a);
    }
    return tsgu_launched();
}

template <typename T, typename I>
static int spmm(const tsgu_csr *A, const void *perm, const tsgu_dense *B, tsgu_dense *C,
                const tsgu_cuda_plan *plan, cudaStream_t stream)
{
    SpmmArgs<T, I> a;
    a.ptr = (const I *)A->ptr;
    a.col = (const I *)A->col;
    a.perm = (const I *)perm;
    a.val = (const T *)A->val;
    a.B = (const T *)B->data;
    a.C = (T *)C->data;
    a.R = A->batch * A->nrows;
    a.n = A->nrows;
    a.m = A->ncols;
    a.nnz = A->nnz;
    a.p = C->cols;
    a.bbs = B->bstride;
    a.brs = B->rstride;
    a.cbs = C->bstride;
    a.crs = C->rstride;
    a.long_row = plan->npieces > 0 ? plan->long_row : INT64_MAX;
    a.nlong = plan->nlong;
    a.npieces = plan->npieces;
    a.long_rows = plan->long_rows;
    a.piece_off = plan->piece_off;
    a.piece_long = plan->piece_long;
    a.work = (typename Acc<T>::type *)plan->work;
    if (a.p == 0) return TSGU_OK;
    int V = tsgu_pack_for(sizeof(T), B->data, a.p, a.brs, a.bbs);
    if (tsgu_pack_for(sizeof(T), C->data, a.p, a.crs, a.cbs) != V) V = 1;
    a.packs = a.p / V;
    a.lanes = tsgu_lanes_for(a.packs);
    a.chunks = (a.packs + a.lanes - 1) / a.lanes;
    const int W = 16 / (int)sizeof(T);
    return V == 1 ? launch<T, I, 1>(a, plan, stream) : launch<T, I, W>(a, plan, stream);
}

extern "C" int tsgu_cuda_spmm(const tsgu_csr *A, const void *perm, const tsgu_dense *B, tsgu_dense *C,
                              const tsgu_cuda_plan *plan, void *stream)
{
    return TSGU_CUDA_DISPATCH(A->rtype, A->itype, spmm, A, perm, B, C, plan, (cudaStream_t)stream);
}
