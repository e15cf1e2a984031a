/* spmm.cu: C[k] = A[k] @ B[k] for a CSR A (global layout), on the device.
 *
 *   C[k][i, c] = sum over the entries e of global row r = k*n + i of
 *                val[e] * B[k][col[e], c]          (val[perm[e]] with perm)
 *
 * With A's transpose pattern (rows of A^T, their entries' rows of A as col,
 * and the position of each in A's arrays as perm) the same kernel gives
 * A^T @ G, deterministically: no atomics.
 *
 * Work: a group of L lanes per (row, chunk of L packs of columns), L the row
 * width in packs rounded up to a power of two, at most 32, so a warp holds
 * 32/L rows.  The group reads its row's columns and values L at a time (one
 * per lane, the next L in flight meanwhile), hands them round by shuffles,
 * and walks them in order, four packs of B in flight per lane; each lane sums
 * its own pack of columns: one order of summation.  Groups take the rows in
 * the plan's order where it has one (longest first: tsgu_cuda.h).  Rows of more
 * than plan->long_row entries are left to the plan: a group per piece sums
 * into the workspace, then one thread per (long row, column) adds its pieces
 * in order. */
#include "tsgu_cuda_dev.cuh"

#define UNROLL 4 /* entries in flight per lane */

template <typename T, typename I> struct SpmmArgs {
    const I *ptr, *col, *perm;
    const T *val, *B;
    T *C;
    int64_t R, n, m, nnz, p, packs, chunks;
    int64_t bbs, brs, cbs, crs; /* B's and C's batch and row strides */
    int lanes;
    int64_t long_row, nlong, npieces;
    const int64_t *long_rows, *piece_off, *piece_long, *order;
    typename Acc<T>::type *work;
};

/* value of entry e (0 for a position out of range) */
template <typename T, typename I>
__device__ __forceinline__ typename Acc<T>::type value_at(const SpmmArgs<T, I> &a, int64_t e)
{
    int64_t at = a.perm ? (int64_t)a.perm[e] : e;
    return at >= 0 && at < a.nnz ? to_acc(a.val[at]) : typename Acc<T>::type(0);
}

/* acc[0..V) = pack cv of sum over entries [s, e) of val[e] * B[k][col[e], :],
 * summed by the group of L lanes this lane belongs to (all of them call it
 * with the same range; a lane with cv >= packs only helps) */
template <typename T, typename I, int V>
__device__ __forceinline__ void row_sum(const SpmmArgs<T, I> &a, int64_t s, int64_t e, const T *Bk, int64_t cv,
                                        typename Acc<T>::type *acc)
{
    typedef typename Acc<T>::type F;
    const int L = a.lanes, l = (int)(threadIdx.x % L);
    const unsigned mask = L == 32 ? TSGU_FULL : ((1u << L) - 1) << ((threadIdx.x & 31) / L * L);
    const bool mine = cv < a.packs;
    const T *Bc = Bk + cv * V;
#pragma unroll
    for (int v = 0; v < V; v++) acc[v] = 0;
    /* the columns and values of L entries at a time, one per lane, the next
     * batch's loads issued before this batch's rows of B are read */
    I j = s + l < e ? a.col[s + l] : (I)-1;
    F w = s + l < e ? value_at(a, s + l) : F(0);
    for (int64_t base = s; base < e; base += L) {
        int64_t next = base + L;
        I jn = next + l < e ? a.col[next + l] : (I)-1;
        F wn = next + l < e ? value_at(a, next + l) : F(0);
        int cnt = (int)(e - base < L ? e - base : L);
        for (int t = 0; t < cnt; t += UNROLL) {
            F x[UNROLL][V], wu[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                int src = (t + u) & (L - 1);
                int64_t ju = (int64_t)__shfl_sync(mask, j, src, L);
                wu[u] = __shfl_sync(mask, w, src, L);
                if (mine && t + u < cnt && ju >= 0 && ju < a.m) {
                    load_pack<T, V>(Bc + ju * a.brs, x[u]);
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
        j = jn;
        w = wn;
    }
}

/* this lane's (work item, pack of columns), or false past the last item */
__device__ __forceinline__ bool group_item(int64_t items, int64_t chunks, int lanes, int64_t *item, int64_t *cv)
{
    int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, g = t / lanes;
    *item = g / chunks;
    *cv = (g % chunks) * lanes + t % lanes;
    return *item < items;
}

template <typename T, typename I, int V> __global__ void spmm_rows(SpmmArgs<T, I> a)
{
    typedef typename Acc<T>::type F;
    int64_t r, cv, s, e;
    if (!group_item(a.R, a.chunks, a.lanes, &r, &cv)) return; /* the whole group: one item */
    if (a.order) r = a.order[r];
    if (r < 0 || r >= a.R) return; /* an order out of range (never trusted) */
    row_range(a.ptr, r, a.nnz, &s, &e);
    if (e - s > a.long_row) return; /* the plan's pieces sum it */
    int64_t k = r / a.n, i = r - k * a.n;
    F acc[V];
    row_sum<T, I, V>(a, s, e, a.B + k * a.bbs, cv, acc);
    if (cv < a.packs) store_pack<T, V>(a.C + k * a.cbs + i * a.crs + cv * V, acc);
}

template <typename T, typename I, int V> __global__ void spmm_pieces(SpmmArgs<T, I> a)
{
    typedef typename Acc<T>::type F;
    int64_t q, cv, r, s, e;
    if (!group_item(a.npieces, a.chunks, a.lanes, &q, &cv) ||
        !piece_range(a.ptr, a.R, a.nnz, a.long_row, a.nlong, a.long_rows, a.piece_off, a.piece_long, q, &r, &s, &e))
        return;
    F acc[V];
    row_sum<T, I, V>(a, s, e, a.B + (r / a.n) * a.bbs, cv, acc);
    if (cv < a.packs)
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

template <typename T, typename I, int V>
static int launch(const SpmmArgs<T, I> &a, const tsgu_cuda_plan *plan, cudaStream_t stream)
{
    if (a.R * a.chunks > 0)
        spmm_rows<T, I, V><<<tsgu_group_blocks(a.R * a.chunks, a.lanes), TSGU_WARPS * 32, 0, stream>>>(a);
    if (plan->npieces > 0) {
        spmm_pieces<T, I, V><<<tsgu_group_blocks(plan->npieces * a.chunks, a.lanes), TSGU_WARPS * 32, 0,
                               stream>>>(a);
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
    a.order = plan->order;
    a.work = (typename Acc<T>::type *)plan->work;
    if (a.p == 0) return TSGU_OK;
    int V = tsgu_pack_for_both(sizeof(T), B, C, a.p);
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
