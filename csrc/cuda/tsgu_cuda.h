/* tsgu_cuda.h: the CUDA kernels' launchers, callable from C (csrc/glue_cuda.c).
 *
 * Every launcher takes views (tsgu.h) of device memory, launches on the given
 * stream (PyTorch's current stream, cudaStream_t passed as void *), allocates
 * nothing and does not synchronise, except tsgu_cuda_read_flag.  It returns
 * TSGU_OK, or TSGU_ECUDA + the cudaError_t of the failed call.
 *
 * The CUDA kernels take the global row-pointer layout only (ptr of batch*n+1
 * entries into flat col/val arrays; tsgu.h): the Python side makes a batched
 * CSR's pointers global once per structure.  Structure is validated once per
 * structure by tsgu_cuda_csr_check / tsgu_cuda_coo_check; the other kernels
 * still clamp every row range into [0, nnz] and skip every column out of
 * range, so a structure edited after its check is never read out of bounds.
 *
 * Long rows.  A row of more than `long_row` entries would keep one group of
 * lanes busy while the rest of the device idles; spmm skips such rows, and a plan
 * (computed once per structure) splits them into pieces of at most long_row
 * entries: piece q belongs to long row piece_long[q], whose global row is
 * long_rows[L] and whose pieces are piece_off[L] .. piece_off[L+1]-1 in
 * order.  Products sum each piece into a workspace row, then the pieces of a
 * row in order: the result does not depend on scheduling.
 *
 * Row order.  Where row lengths vary widely, the plan also lists the rows
 * longest first (`order`), and spmm's groups take them in that order, so that
 * the rows a warp holds together are about as long as each other.  Each row
 * is still summed by one group in its own order: the same bits either way. */
#ifndef TSGU_CUDA_H
#define TSGU_CUDA_H

#include "../tsgu.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TSGU_ECUDA 1000 /* status TSGU_ECUDA + e: CUDA call failed with cudaError_t e */

typedef struct {
    int64_t long_row;         /* rows with more entries than this are split */
    int64_t nlong, npieces;   /* 0, 0: no row is long */
    const int64_t *long_rows; /* (nlong,) global rows */
    const int64_t *piece_off; /* (nlong + 1,) */
    const int64_t *piece_long; /* (npieces,) */
    const int64_t *order;     /* (batch*n,) global rows, longest first; NULL: 0, 1, ... */
    void *work;               /* (npieces, p) sums, float (double for float64 values) */
} tsgu_cuda_plan;

/* the name and description of CUDA error e */
const char *tsgu_cuda_error_name(int e);
const char *tsgu_cuda_error_string(int e);

/* make `device` the current device of this thread (launches go there) */
int tsgu_cuda_use_device(int device);

/* *host = *flag, after everything queued on stream before it (synchronises) */
int tsgu_cuda_read_flag(const int *flag, int *host, void *stream);

/* the first status in the order of the codes whose bit (1 << status) a check
 * set in its flag; TSGU_OK for none */
static inline int tsgu_cuda_first_status(int bits)
{
    for (int s = 1; s < 31; s++)
        if (bits & (1 << s)) return s;
    return TSGU_OK;
}

/* CSR structure check of A (global layout); item_nnz >= 0 also requires every
 * item k to start at entry k*item_nnz (a batched CSR made global).  *flag
 * (device, 0 on entry) receives bit 1 << s for every status s of a rule broken:
 * TSGU_EPTR_ENDS, TSGU_EPTR_ORDER, TSGU_ECOL_RANGE, TSGU_ECOL_ORDER. */
int tsgu_cuda_csr_check(const tsgu_csr *A, int64_t item_nnz, int *flag, void *stream);

/* COO index check of idx (sparse_dims rows of nnz int64 at stride ld) against
 * sizes: *flag (0 on entry) |= TSGU_COO_RANGE if an index is out of range,
 * TSGU_COO_ROWS if entries are not sorted by (batch, row), TSGU_COO_UNIQUE if
 * not by (batch, row, col) without repeats. */
enum { TSGU_COO_RANGE = 1, TSGU_COO_ROWS = 2, TSGU_COO_UNIQUE = 4 };
int tsgu_cuda_coo_check(const int64_t *idx, int64_t ld, int64_t sparse_dims, int64_t nnz,
                        const int64_t *sizes, int *flag, void *stream);
/* row pointers (batch*n+1) of checked COO indices sorted by (batch, row) */
int tsgu_cuda_coo_row_ptr(const int64_t *idx, int64_t ld, int64_t sparse_dims, int64_t nnz,
                          const int64_t *sizes, int64_t *ptr, void *stream);

/* rows[e] = the global row of entry e of A (A's index type, nnz of them) */
int tsgu_cuda_entry_rows(const tsgu_csr *A, void *rows, void *stream);

/* A's transpose pattern in the global layout (transpose.cu): tptr (batch*m+1),
 * trow and tperm (nnz), int32, for nnz and batch*m under 2^31; work holds
 * *bytes from tsgu_cuda_transpose_bytes(nnz, batch*m, bytes) */
int tsgu_cuda_transpose_bytes(int64_t nnz, int64_t K, size_t *bytes);
int tsgu_cuda_transpose(const tsgu_csr *A, int32_t *tptr, int32_t *trow, int32_t *tperm, void *work, size_t bytes,
                        void *stream);

/* C[k] = A[k] @ B[k]; with perm (A's index type) the value of entry e is
 * val[perm[e]] (A^T through its transpose pattern: see spmm.cu) */
int tsgu_cuda_spmm(const tsgu_csr *A, const void *perm, const tsgu_dense *B, tsgu_dense *C,
                   const tsgu_cuda_plan *plan, void *stream);

/* out[e] = dot(G[k][i,:], B[k][j,:]) at every stored entry e = (k, i, j), with
 * rows[e] = k*n + i (A's index type) */
int tsgu_cuda_sddmm(const tsgu_csr *A, const void *rows, const tsgu_dense *G, const tsgu_dense *B, void *out,
                    void *stream);

#ifdef __cplusplus
}
#endif
#endif
