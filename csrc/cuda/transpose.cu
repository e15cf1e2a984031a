/* transpose.cu: the transpose pattern of A (global layout, int32 out), on the device.
 *
 * Entry e of global row r = k*n + i with column j gets the key
 *     key(e) = k*m + j            (m x n item k of A^T, row j)
 * and the entries sorted by key, stably (an LSD radix sort over the bits that
 * K = batch*m needs), give
 *     tperm[t] = the entry of A at position t of A^T     (the sort's values)
 *     tptr[q]  = #{e : key(e) < q},  q = 0 .. K          (one binary search each)
 *     trow[t]  = i of entry tperm[t] = r % n              (written beside each key, gathered)
 * so the entries of a row of A^T come in increasing row of A: a fixed order.
 * No atomics: the same pattern whatever the scheduling.
 *
 * A column out of [0, m) (a structure edited after its check) gets key K: such
 * entries sort after every row of A^T, outside every tptr range, and are never
 * read.  The workspace holds two key arrays, one value array and the rows i, nnz
 * int32 each (the sort's double buffers, the other value buffer being tperm
 * itself), and the radix sort's own temporary storage; tsgu_cuda_transpose_bytes
 * gives its size.  Rows are taken by groups of L lanes, L the average row length
 * rounded up to a power of two (at most 32). */
#include <cub/device/device_radix_sort.cuh>
#include "tsgu_cuda_dev.cuh"

/* the bits a key in [0, K] needs */
static int key_bits(int64_t K)
{
    int b = 1;
    while (b < 31 && (K >> b) != 0) b++;
    return b;
}

static size_t align_up(size_t x) { return (x + 255) & ~(size_t)255; }

/* the radix sort's temporary storage for nnz pairs of keys of `bits` bits */
static cudaError_t sort_bytes(int64_t nnz, int bits, size_t *bytes)
{
    cub::DoubleBuffer<int32_t> keys(nullptr, nullptr), vals(nullptr, nullptr);
    return cub::DeviceRadixSort::SortPairs(nullptr, *bytes, keys, vals, (int)nnz, 0, bits);
}

extern "C" int tsgu_cuda_transpose_bytes(int64_t nnz, int64_t K, size_t *bytes)
{
    size_t sort = 0;
    cudaError_t e = sort_bytes(nnz, key_bits(K), &sort);
    *bytes = 4 * align_up((size_t)nnz * sizeof(int32_t)) + align_up(sort);
    return e == cudaSuccess ? TSGU_OK : TSGU_ECUDA + (int)e;
}

/* a group of L lanes per row: each entry's key, its own position and its row in the item */
template <typename I>
__global__ void transpose_keys(const I *ptr, const I *col, int64_t R, int64_t n, int64_t m, int64_t nnz, int L,
                               int32_t *keys, int32_t *pos, int32_t *lrow)
{
    int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / L;
    if (r >= R) return;
    int64_t s, e, base = (r / n) * m, K = (R / n) * m;
    row_range(ptr, r, nnz, &s, &e);
    for (int64_t x = s + (threadIdx.x % L); x < e; x += L) {
        int64_t j = (int64_t)col[x];
        keys[x] = (int32_t)(j < 0 || j >= m ? K : base + j);
        pos[x] = (int32_t)x;
        lrow[x] = (int32_t)(r % n);
    }
}

/* the entries no row range covers (a structure edited after its check) sort last too */
__global__ void transpose_fill(int64_t nnz, int32_t K, int32_t *keys, int32_t *pos, int32_t *lrow)
{
    for (int64_t x = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; x < nnz; x += (int64_t)gridDim.x * blockDim.x) {
        keys[x] = K;
        pos[x] = (int32_t)x;
        lrow[x] = 0;
    }
}

__global__ void transpose_ptr(const int32_t *keys, int64_t nnz, int64_t K, int32_t *tptr)
{
    for (int64_t q = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; q <= K; q += (int64_t)gridDim.x * blockDim.x) {
        int64_t lo = 0, hi = nnz; /* the first key >= q */
        while (lo < hi) {
            int64_t mid = lo + (hi - lo) / 2;
            if ((int64_t)keys[mid] < q) lo = mid + 1;
            else hi = mid;
        }
        tptr[q] = (int32_t)lo;
    }
}

__global__ void transpose_rows(const int32_t *lrow, const int32_t *tperm, int64_t nnz, int32_t *trow)
{
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < nnz; t += (int64_t)gridDim.x * blockDim.x)
        trow[t] = lrow[tperm[t]]; /* tperm: a permutation of [0, nnz), by construction */
}

template <typename I>
static int transpose(const tsgu_csr *A, int32_t *tptr, int32_t *trow, int32_t *tperm, void *work, size_t bytes,
                     cudaStream_t stream)
{
    int64_t R = A->batch * A->nrows, K = A->batch * A->ncols, nnz = A->nnz;
    size_t need = 0;
    int status = tsgu_cuda_transpose_bytes(nnz, K, &need);
    if (status != TSGU_OK) return status;
    if (bytes < need || nnz >= INT32_MAX || K >= INT32_MAX) return TSGU_ENOMEM; /* the glue checks both */
    const I *ptr = (const I *)A->ptr, *col = (const I *)A->col;
    char *w = (char *)work;
    size_t slot = align_up((size_t)nnz * sizeof(int32_t));
    int32_t *keys0 = (int32_t *)w, *keys1 = (int32_t *)(w + slot), *pos = (int32_t *)(w + 2 * slot),
            *lrow = (int32_t *)(w + 3 * slot);
    if (nnz > 0) {
        transpose_fill<<<tsgu_blocks_for(nnz), 256, 0, stream>>>(nnz, (int32_t)K, keys0, pos, lrow);
        if (R > 0) {
            int L = tsgu_lanes_for((nnz + R - 1) / R);
            transpose_keys<I><<<tsgu_group_blocks(R, L), TSGU_WARPS * 32, 0, stream>>>(ptr, col, R, A->nrows,
                                                                                      A->ncols, nnz, L, keys0, pos,
                                                                                      lrow);
        }
        cub::DoubleBuffer<int32_t> keys(keys0, keys1), vals(pos, tperm);
        size_t sort = need - 4 * slot;
        cudaError_t e = cub::DeviceRadixSort::SortPairs(w + 4 * slot, sort, keys, vals, (int)nnz, 0, key_bits(K),
                                                        stream);
        if (e != cudaSuccess) return TSGU_ECUDA + (int)e;
        if (vals.Current() != tperm) {
            e = cudaMemcpyAsync(tperm, vals.Current(), (size_t)nnz * sizeof(int32_t), cudaMemcpyDeviceToDevice,
                                stream);
            if (e != cudaSuccess) return TSGU_ECUDA + (int)e;
        }
        transpose_ptr<<<tsgu_blocks_for(K + 1), 256, 0, stream>>>(keys.Current(), nnz, K, tptr);
        transpose_rows<<<tsgu_blocks_for(nnz), 256, 0, stream>>>(lrow, tperm, nnz, trow);
    } else {
        cudaError_t e = cudaMemsetAsync(tptr, 0, (size_t)(K + 1) * sizeof(int32_t), stream);
        if (e != cudaSuccess) return TSGU_ECUDA + (int)e;
    }
    return tsgu_launched();
}

extern "C" int tsgu_cuda_transpose(const tsgu_csr *A, int32_t *tptr, int32_t *trow, int32_t *tperm, void *work,
                                   size_t bytes, void *stream)
{
    return A->itype == TSGU_I32 ? transpose<int32_t>(A, tptr, trow, tperm, work, bytes, (cudaStream_t)stream)
                                : transpose<int64_t>(A, tptr, trow, tperm, work, bytes, (cudaStream_t)stream);
}
