/* entry_rows.cu: the global row of every stored entry of A (global layout), on the device.
 *
 *   rows[e] = r   for ptr[r] <= e < ptr[r+1],  r = k*n + i
 *
 * A group of L lanes per row (L the average row length rounded up to a power
 * of two, at most 32) writes its own entries (A's index type): no atomics, and
 * no synchronisation with the host (the size is nnz, known to the caller).
 * Row ranges are clamped into [0, nnz]; an entry that no range covers (a
 * structure edited after its check) gets row R, which every kernel skips. */
#include "tsgu_cuda_dev.cuh"

template <typename I> __global__ void fill_rows(int64_t nnz, int64_t R, I *rows)
{
    for (int64_t x = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; x < nnz; x += (int64_t)gridDim.x * blockDim.x)
        rows[x] = (I)R;
}

template <typename I> __global__ void entry_rows(const I *ptr, int64_t R, int64_t nnz, int L, I *rows)
{
    int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / L, s, e;
    if (r >= R) return;
    row_range(ptr, r, nnz, &s, &e);
    for (int64_t x = s + (threadIdx.x % L); x < e; x += L) rows[x] = (I)r;
}

template <typename I> static int rows_of(const tsgu_csr *A, void *rows, cudaStream_t stream)
{
    int64_t R = A->batch * A->nrows, nnz = A->nnz;
    if (nnz == 0) return TSGU_OK;
    fill_rows<I><<<tsgu_blocks_for(nnz), 256, 0, stream>>>(nnz, R, (I *)rows);
    if (R > 0) {
        int L = tsgu_lanes_for((nnz + R - 1) / R);
        entry_rows<I><<<tsgu_group_blocks(R, L), TSGU_WARPS * 32, 0, stream>>>((const I *)A->ptr, R, nnz, L,
                                                                             (I *)rows);
    }
    return tsgu_launched();
}

extern "C" int tsgu_cuda_entry_rows(const tsgu_csr *A, void *rows, void *stream)
{
    return A->itype == TSGU_I32 ? rows_of<int32_t>(A, rows, (cudaStream_t)stream)
                                : rows_of<int64_t>(A, rows, (cudaStream_t)stream);
}
