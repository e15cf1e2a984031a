/* coo_row_ptr.cu: check COO indices, and the row pointers of sorted ones.
 *
 * idx holds sparse_dims (2: row, col; 3: batch, row, col) rows of nnz int64
 * indices, row d at idx + d*ld.  The check sets in *flag
 *   TSGU_COO_RANGE   some index outside [0, sizes[d])
 *   TSGU_COO_ROWS    some entry before its predecessor in (batch, row) order
 *   TSGU_COO_UNIQUE  some entry not after its predecessor in (batch, row, col) order
 * (one thread per entry, comparing it with the one before).
 * For indices in range and sorted by (batch, row), the global row of entry e
 * is g(e) = batch*n + row, non-decreasing, and
 *   ptr[q] = #{e : g(e) < q},  q = 0 .. batch*n,
 * one binary search per pointer: no atomics, no dependence on scheduling. */
#include "tsgu_cuda_dev.cuh"

struct Sizes { int64_t s[3]; };

__global__ void coo_check_entries(const int64_t *idx, int64_t ld, int sd, int64_t nnz, Sizes sz, int *flag)
{
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < nnz;
         e += (int64_t)gridDim.x * blockDim.x) {
        int bits = 0, order = 0; /* order: -1, 0, 1 as entry e-1 is before, at, after entry e */
        for (int d = 0; d < sd; d++) {
            int64_t v = idx[d * ld + e];
            if (v < 0 || v >= sz.s[d]) bits |= TSGU_COO_RANGE;
            if (e > 0 && order == 0) {
                int64_t u = idx[d * ld + e - 1];
                order = u < v ? -1 : u > v ? 1 : 0;
                if (order == 1) bits |= d < sd - 1 ? TSGU_COO_ROWS | TSGU_COO_UNIQUE : TSGU_COO_UNIQUE;
            }
        }
        if (e > 0 && order == 0) bits |= TSGU_COO_UNIQUE;
        if (bits) atomicOr(flag, bits);
    }
}

__device__ __forceinline__ int64_t global_row(const int64_t *idx, int64_t ld, int sd, int64_t n, int64_t e)
{
    return sd == 3 ? idx[e] * n + idx[ld + e] : idx[e];
}

__global__ void coo_fill_ptr(const int64_t *idx, int64_t ld, int sd, int64_t nnz, int64_t n, int64_t R,
                             int64_t *ptr)
{
    for (int64_t q = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; q <= R; q += (int64_t)gridDim.x * blockDim.x) {
        int64_t lo = 0, hi = nnz; /* first entry whose global row is >= q */
        while (lo < hi) {
            int64_t mid = lo + (hi - lo) / 2;
            if (global_row(idx, ld, sd, n, mid) < q) lo = mid + 1;
            else hi = mid;
        }
        ptr[q] = lo;
    }
}

extern "C" int tsgu_cuda_coo_check(const int64_t *idx, int64_t ld, int64_t sparse_dims, int64_t nnz,
                                   const int64_t *sizes, int *flag, void *stream)
{
    if (nnz == 0) return TSGU_OK;
    Sizes sz = {{0, 0, 0}};
    for (int d = 0; d < sparse_dims; d++) sz.s[d] = sizes[d];
    coo_check_entries<<<tsgu_blocks_for(nnz), 256, 0, (cudaStream_t)stream>>>(idx, ld, (int)sparse_dims, nnz, sz, flag);
    return tsgu_launched();
}

extern "C" int tsgu_cuda_coo_row_ptr(const int64_t *idx, int64_t ld, int64_t sparse_dims, int64_t nnz,
                                     const int64_t *sizes, int64_t *ptr, void *stream)
{
    int64_t n = sizes[sparse_dims - 2], R = (sparse_dims == 3 ? sizes[0] : 1) * n;
    coo_fill_ptr<<<tsgu_blocks_for(R + 1), 256, 0, (cudaStream_t)stream>>>(idx, ld, (int)sparse_dims, nnz, n, R, ptr);
    return tsgu_launched();
}
