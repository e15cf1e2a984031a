/* csr_check.cu: is A a well-formed CSR matrix (global row-pointer layout)?
 *
 *   ptr[0] = 0 and ptr[R] = nnz                      (else TSGU_EPTR_ENDS)
 *   ptr[k*n] = k * item_nnz for every item k, when item_nnz >= 0
 *                                                    (else TSGU_EPTR_ENDS)
 *   0 <= ptr[r] <= ptr[r+1] <= nnz for every row r   (else TSGU_EPTR_ORDER)
 *   0 <= col[e] < m for every entry                  (else TSGU_ECOL_RANGE)
 *   col[e-1] < col[e] within every row               (else TSGU_ECOL_ORDER)
 *
 * A group of L lanes per row, across its entries (L the average row length
 * rounded up to a power of two, at most 32); group R checks the last pointer.
 * Every broken rule sets its bit in *flag; columns are read only inside a row
 * range that passed its own check. */
#include "tsgu_cuda_dev.cuh"

template <typename I>
__global__ void csr_check_rows(const I *ptr, const I *col, int64_t R, int64_t n, int64_t m, int64_t nnz,
                               int64_t item_nnz, int L, int *flag)
{
    int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / L;
    int lane = (int)(threadIdx.x % L);
    if (r > R) return;
    int bits = 0;
    if (lane == 0) {
        int64_t at = (int64_t)ptr[r];
        if ((r == 0 && at != 0) || (r == R && at != nnz)) bits |= 1 << TSGU_EPTR_ENDS;
        if (item_nnz >= 0 && n > 0 && r % n == 0 && at != (r / n) * item_nnz) bits |= 1 << TSGU_EPTR_ENDS;
    }
    if (r < R) {
        int64_t a = (int64_t)ptr[r], b = (int64_t)ptr[r + 1];
        if (a < 0 || a > b || b > nnz) {
            if (lane == 0) bits |= 1 << TSGU_EPTR_ORDER;
        } else {
            for (int64_t e = a + lane; e < b; e += L) {
                int64_t j = (int64_t)col[e];
                if (j < 0 || j >= m) bits |= 1 << TSGU_ECOL_RANGE;
                else if (e > a && (int64_t)col[e - 1] >= j) bits |= 1 << TSGU_ECOL_ORDER;
            }
        }
    }
    if (bits) atomicOr(flag, bits);
}

template <typename I>
static int check(const tsgu_csr *A, int64_t item_nnz, int *flag, cudaStream_t stream)
{
    int64_t R = A->batch * A->nrows;
    int L = tsgu_lanes_for(R > 0 ? (A->nnz + R - 1) / R : 1);
    csr_check_rows<I><<<tsgu_group_blocks(R + 1, L), TSGU_WARPS * 32, 0, stream>>>(
        (const I *)A->ptr, (const I *)A->col, R, A->nrows, A->ncols, A->nnz, item_nnz, L, flag);
    return tsgu_launched();
}

extern "C" int tsgu_cuda_csr_check(const tsgu_csr *A, int64_t item_nnz, int *flag, void *stream)
{
    return A->itype == TSGU_I32 ? check<int32_t>(A, item_nnz, flag, (cudaStream_t)stream)
                                : check<int64_t>(A, item_nnz, flag, (cudaStream_t)stream);
}
