/* tsgu.h: the interface of the C kernels: the views they take, the status
 * codes they return and their prototypes.  What the kernels share beyond it
 * lives in headers named after their jobs (tsgu_parallel.h, tsgu_rows.h, ...).
 *
 * A sparse matrix (or a batch of them, all n x m) is passed to kernels as a
 * non-owning CSR view.  Kernels never allocate tensor memory; they read and
 * write arrays owned by the caller and report problems through status codes.
 *
 * Two row-pointer layouts share one view, so that 2D CSR, batched CSR and
 * (coalesced) batched COO all reach the same kernels without copies:
 *   global:  one array of batch*n+1 pointers (ptr_stride = n, entry_stride = 0)
 *   batched: batch arrays of n+1 pointers each, every one starting at 0
 *            (ptr_stride = n+1, entry_stride = nnz per item)
 * In both, global row r = k*n + i (item k, row i) holds the entries
 *   [k*entry_stride + ptr[q], k*entry_stride + ptr[q+1]),  q = k*ptr_stride + i
 * of the flat col/val arrays, and column indices are local to the item.
 */
#ifndef TSGU_H
#define TSGU_H

#include <stddef.h>
#include <stdint.h>

/* status codes: 0 is success, every other value names one problem */
enum {
    TSGU_OK = 0,
    TSGU_EPTR_ENDS = 1,  /* row pointers do not start at 0 or do not end at nnz */
    TSGU_EPTR_ORDER = 2, /* row pointers decrease, or point outside [0, nnz] */
    TSGU_ECOL_RANGE = 3, /* a column index is < 0 or >= ncols */
    TSGU_ECOL_ORDER = 4, /* column indices within a row are not strictly increasing */
    TSGU_EIDX_RANGE = 5, /* a COO index (batch, row or column) is out of range */
    TSGU_EIDX_ORDER = 6, /* COO entries are not sorted by (batch, row) */
    TSGU_ENOMEM = 7,     /* a workspace allocation failed */
    TSGU_ETRI_SIDE = 8,  /* triangular solve: an entry on the wrong side of the diagonal */
    TSGU_EDIAG_ZERO = 9, /* triangular solve: a diagonal entry is zero or not stored */
    TSGU_EDIAG_UNIT = 10, /* triangular solve: unitriangular, yet a diagonal entry is stored */
    TSGU_EGROUP = 11,     /* grouped rows: a group index, offset or row out of range */
    TSGU_EARG = 12,       /* amax/amin: an arg index names no entry of its row */
    TSGU_EROW_LONG = 13   /* amax/amin: a row holds 2^31 entries or more (arg indices are int32) */
};

/* value types; the 16-bit ones (stored as uint16_t, summed in float, see
 * tsgu_half.h) only for the kernels of sparse_mm: spmm, spmm_t, sddmm and
 * their amax/amin forms spmm_arg, spmm_t_arg, sddmm_arg; and of sparse_softmax:
 * softmax_rows, softmax_coo, softmax_grad, softmax_cols, softmax_cols_grad */
typedef enum { TSGU_F32 = 0, TSGU_F64 = 1, TSGU_F16 = 2, TSGU_BF16 = 3 } tsgu_real;
typedef enum { TSGU_I32 = 0, TSGU_I64 = 1 } tsgu_index; /* index types */

typedef struct {
    int64_t batch;        /* number of matrices b (1 when unbatched) */
    int64_t nrows;        /* rows n of each matrix */
    int64_t ncols;        /* columns m of each matrix */
    int64_t nnz;          /* length of the flat col (and val) arrays, all items together */
    const void *ptr;      /* row pointers, layout given by the two strides below */
    int64_t ptr_stride;   /* n (global layout) or n+1 (batched layout) */
    int64_t entry_stride; /* 0 (global layout) or nnz per item (batched layout) */
    const void *col;      /* column index of each entry, local to [0, ncols) */
    const void *val;      /* value of each entry; NULL for pattern-only kernels */
    tsgu_index itype;     /* type of ptr and col */
    tsgu_real rtype;      /* type of val */
    int row_mean;         /* 1: the matrix is D^-1 A, each row's values divided by its number of
                           * entries (reduce="mean"; spmm, spmm_t and sddmm read it), else 0 */
} tsgu_csr;

typedef struct {
    void *data;      /* element (k, i, c) lives at data[k*bstride + i*rstride + c] */
    int64_t batch;   /* number of matrices (1 when unbatched) */
    int64_t rows;    /* rows of each matrix */
    int64_t cols;    /* columns of each matrix (unit stride) */
    int64_t bstride; /* elements between consecutive matrices */
    int64_t rstride; /* elements between consecutive rows */
    tsgu_real rtype; /* element type */
} tsgu_dense;

/* Rows of a dense matrix in R groups (gather_mm, segment_mm): group r holds the
 * rows perm[q] for q in [off[r], off[r+1]), or the rows q themselves when perm
 * is NULL (consecutive segments).  Kernels check the grouping (tsgu_groups_check)
 * before reading through it. */
typedef struct {
    int64_t ngroups;     /* R */
    const int64_t *off;  /* R+1 offsets into the row order */
    const int64_t *perm; /* the row order (a permutation of the rows), or NULL */
} tsgu_groups;

/* kernels, one per file */
int tsgu_csr_check_ends(const tsgu_csr *A);
int tsgu_csr_check(const tsgu_csr *A, int nthreads);
int tsgu_spmm(const tsgu_csr *A, const tsgu_dense *B, tsgu_dense *C, int nthreads);
int tsgu_spmm_t(const tsgu_csr *A, const tsgu_dense *G, tsgu_dense *out, int nthreads);
int tsgu_sddmm(const tsgu_csr *A, const tsgu_dense *G, const tsgu_dense *B, void *out,
               int nthreads);
int tsgu_csr_transpose(const tsgu_csr *A, void *tptr, void *trow, void *tperm, int nthreads);
/* amax/amin (spmm_arg.c, spmm_t_arg.c, sddmm_arg.c): arg is int32 (batch*nrows, p),
 * contiguous: for each output element, the offset within its row of the entry
 * whose product it holds, or -1 for none */
int tsgu_spmm_arg(const tsgu_csr *A, const tsgu_dense *B, tsgu_dense *C, int32_t *arg, int is_min,
                  int nthreads);
int tsgu_spmm_t_arg(const tsgu_csr *A, const int32_t *arg, const tsgu_dense *G, tsgu_dense *out,
                    int nthreads);
int tsgu_sddmm_arg(const tsgu_csr *A, const int32_t *arg, const tsgu_dense *G, const tsgu_dense *B,
                   void *out, int nthreads);
/* sparse @ sparse, C = A·B item by item (spgemm.c, spgemm_grad.c): tsgu_spgemm computes
 * C into a workspace (*work, to be given back with tsgu_spgemm_done whatever the status)
 * and gives its size nnzC; tsgu_spgemm_write copies it into the caller's arrays of that
 * size: row pointers Cptr (batch*n+1, int64, global rows), columns int64 (Ccol) or int32
 * (Ccol32, the other NULL), values, and where not NULL each entry's row and item;
 * tsgu_spgemm_release frees the workspace kept for the next call, giving its bytes.
 * G, the upstream gradient of C, is a CSR view or (G NULL) dense Gd; gA / gB NULL when
 * not wanted */
typedef struct tsgu_spgemm_work tsgu_spgemm_work;
int tsgu_spgemm(const tsgu_csr *A, const tsgu_csr *B, tsgu_spgemm_work **work, int64_t *nnzC, int nthreads);
int tsgu_spgemm_write(const tsgu_spgemm_work *work, int64_t *Cptr, int64_t *Ccol, int32_t *Ccol32, int64_t *Crow,
                      int64_t *Citem, void *Cval);
void tsgu_spgemm_done(tsgu_spgemm_work *work);
size_t tsgu_spgemm_release(void);
int tsgu_spgemm_grad(const tsgu_csr *A, const tsgu_csr *B, const tsgu_csr *G, const tsgu_dense *Gd, void *gA,
                     void *gB, int nthreads);
int tsgu_trisolve(const tsgu_csr *A, tsgu_dense *X, int upper, int unit, int trans, int nthreads);
/* the reverse Cuthill-McKee ordering (rcm.c) of one square pattern A: perm (n) int64 */
int tsgu_rcm(const tsgu_csr *A, int symmetric, int64_t *perm);
int tsgu_coo_row_ptr(const int64_t *idx, int64_t ld, int64_t sparse_dims, int64_t nnz,
                     const int64_t *sizes, int64_t *ptr, int nthreads, int *coalesced, int64_t *bad);

/* Krylov solvers on an n x n CSR A (cg.c, minres.c), all k columns of an n x k
 * block at once (blocks contiguous, row-major).  Per-column scalars are doubles;
 * column sums run over the rows in order and products go through tsgu_spmm, so
 * the results do not depend on the thread count. */
typedef struct {
    double tol;        /* relative residual ||b - A x|| / ||b|| to reach */
    double stop;       /* cg: a column stops moving once its relative residual is at most this */
    double tiny;       /* cg: breakdown threshold of p^T A p and r^T r */
    int mean;          /* cg: converged when the mean relative residual (not every column's) meets tol */
    double eps;        /* minres: floor of the Givens norm */
    double scale, shift; /* minres: the operator is scale * A + shift * I */
    int64_t max_iter;  /* iteration cap */
    int64_t min_iter;  /* cg: iterate at least this many times */
} tsgu_krylov_opts;

enum { TSGU_CG_OK = 0, TSGU_CG_BREAK_START = 1, TSGU_CG_BREAK_PAP = 2, TSGU_CG_BREAK_RZ = 3 };

typedef struct {
    int64_t iterations;
    int64_t matvecs;
    int recursive_stop;  /* cg: stopped because the recurrence's residuals met tol */
    int stopped_before;  /* cg: every starting residual was at most stop: no iteration */
    int breakdown;       /* cg: TSGU_CG_OK, or which inner product broke down (an unconverged
                          * column's r^T r at the start, p^T A p, or r^T r: below tiny or not finite) */
} tsgu_krylov_info;

int tsgu_csr_compact(const tsgu_csr *A, tsgu_csr *out, void **mem);
/* cg: X = A^{-1} B for A SPD; X holds the initial guess on entry when has_x0.
 * minres: X = (scale A + shift I)^{-1} B for A symmetric.  rel (k) receives the
 * recurrence's relative residuals, true_rel (k) the recomputed ones. */
int tsgu_cg(const tsgu_csr *A, const tsgu_dense *B, tsgu_dense *X, int has_x0, const tsgu_krylov_opts *o,
            double *rel, double *true_rel, tsgu_krylov_info *info, int nthreads);
int tsgu_minres(const tsgu_csr *A, const tsgu_dense *B, tsgu_dense *X, const tsgu_krylov_opts *o,
                double *rel, double *true_rel, tsgu_krylov_info *info, int nthreads);

/* kernels of the grouped products and log-sum-exp (files of the same name) */
int tsgu_groups_check(const tsgu_groups *g, int64_t rows);
int tsgu_group_rows(const void *idx, tsgu_index itype, int64_t n, int64_t R, int64_t *off,
                    int64_t *perm);
int tsgu_grouped_mm(const tsgu_groups *g, const tsgu_dense *A, const tsgu_dense *M, tsgu_dense *C,
                    int nthreads);
int tsgu_grouped_mm_tn(const tsgu_groups *g, const tsgu_dense *A, const tsgu_dense *G,
                       tsgu_dense *out, int nthreads);
int tsgu_lse_rows(const tsgu_csr *A, int include_zeros, void *out, int64_t ld, void *item_out,
                  int nthreads);
int tsgu_lse_cols(const tsgu_csr *A, int include_zeros, void *out, int64_t ld, int nthreads);
int tsgu_lse_grad(const tsgu_csr *A, const void *row_lse, const void *row_grad,
                  const void *col_lse, const void *col_grad, void *out, int nthreads);
/* softmax and log-softmax over each row's stored entries (softmax_rows.c) and their
 * values gradient (softmax_grad.c); the values, y, g and out are (nnz, heads): each head on its own */
int tsgu_softmax_rows(const tsgu_csr *A, int64_t heads, int is_log, int check_cols, void *out, int nthreads);
int tsgu_softmax_grad(const tsgu_csr *A, int64_t heads, const void *y, const void *g, int is_log, void *out,
                      int nthreads);
/* the same over each column's stored entries (softmax_cols.c, softmax_cols_grad.c) */
int tsgu_softmax_cols(const tsgu_csr *A, int64_t heads, int is_log, void *out, int nthreads);
int tsgu_softmax_cols_grad(const tsgu_csr *A, int64_t heads, const void *y, const void *g, int is_log, void *out,
                           int nthreads);
/* the same over the rows of a COO index array (coo_row_ptr.c's idx, ld, sparse_dims, nnz, sizes), one
 * value per entry of type rtype, the array checked and its row pointers ptr written in the same pass */
int tsgu_softmax_coo(const int64_t *idx, int64_t ld, int64_t sparse_dims, int64_t nnz, const int64_t *sizes,
                     const void *val, tsgu_real rtype, int is_log, int64_t *ptr, void *out, int nthreads,
                     int64_t *bad);

/* graph attention on a CSR pattern (gat_forward.c, gat_grad_scores.c, gat_grad_src.c):
 * row i of A (n x m) is a target node, its columns j the source nodes it attends to;
 * H heads of F features; every array contiguous, of A's value type rtype */
typedef struct {
    int64_t heads, feats; /* H, F */
    const void *x;        /* (m, H, F) source features */
    const void *s;        /* (m, H) source scores (x * a_src).sum(-1) */
    const void *d;        /* (n, H) target scores (x_dst * a_dst).sum(-1) */
    const void *e;        /* (nnz, H) per-entry scores added to s + d (edge features), or NULL: none */
    uint64_t seed;        /* dropout: (entry e, head h) is dropped when tsgu_gat_draw(seed, e*H + h) */
    int64_t drop;         /* is below drop (of 2^24: p * 2^24); 0: no dropout (tsgu_gat.h) */
    double scale;         /* a kept entry's factor 1/(1-p) (1 without dropout) */
    double slope;         /* LeakyReLU's negative slope */
} tsgu_gat;
/* alpha (nnz, H): the attention probabilities; out (n, H, F); G (n, H, F) out's
 * gradient; galpha (nnz, H) alpha's gradient or NULL; dz (nnz, H) the gradient of the
 * scores before LeakyReLU; gd (n, H), gs (m, H), gx (m, H, F) the gradients of d, s, x */
int tsgu_gat_forward(const tsgu_csr *A, const tsgu_gat *g, void *alpha, void *out, int nthreads);
int tsgu_gat_grad_scores(const tsgu_csr *A, const tsgu_gat *g, const void *alpha, const void *G,
                         const void *galpha, void *dz, void *gd, int nthreads);
int tsgu_gat_grad_src(const tsgu_csr *A, const tsgu_gat *g, const void *alpha, const void *G, const void *dz,
                      void *gx, void *gs, int nthreads);

/* GATv2 attention on a CSR pattern (gatv2_forward.c, gatv2_grad_rows.c, gatv2_grad_src.c,
 * gatv2_grad_att.c): the score of entry (i, j) is computed from the two rows on the fly,
 * per head h, sum_c att[h,c] LeakyReLU(xl[j,h,c] + xr[i,h,c] (+ et[e,h,c])) (+ b[e,h]);
 * H heads of C features; every array contiguous, of A's value type rtype */
typedef struct {
    int64_t heads, feats; /* H, C */
    const void *xl;       /* (m, H, C) source rows: in the scores and the messages */
    const void *xr;       /* (n, H, C) target rows: in the scores */
    const void *att;      /* (H, C) the attention vector */
    const void *et;       /* (nnz, H, C) an edge term added inside LeakyReLU, or NULL: none */
    const void *b;        /* (nnz, H) a score added after the sum over c, or NULL: none */
    uint64_t seed;        /* dropout as tsgu_gat's (tsgu_gat_draw of seed, e*H + h) */
    int64_t drop;         /* of 2^24; 0: no dropout */
    double scale;         /* a kept entry's factor 1/(1-p) (1 without dropout) */
    double slope;         /* LeakyReLU's negative slope */
} tsgu_gatv2;
/* alpha (nnz, H) the attention probabilities; out (n, H, C); G (n, H, C) out's gradient;
 * galpha (nnz, H) alpha's or NULL; dz (nnz, H) the scores' gradient (b's); gxr (n, H, C);
 * arows (n, H, C) each row's share of att's gradient, summed by tsgu_gatv2_grad_att into
 * gatt (H, C); get (nnz, H, C) et's gradient or NULL; gxl (m, H, C) */
int tsgu_gatv2_forward(const tsgu_csr *A, const tsgu_gatv2 *g, void *alpha, void *out, int nthreads);
int tsgu_gatv2_grad_rows(const tsgu_csr *A, const tsgu_gatv2 *g, const void *alpha, const void *G,
                         const void *galpha, void *dz, void *gxr, void *arows, void *get, int nthreads);
int tsgu_gatv2_grad_src(const tsgu_csr *A, const tsgu_gatv2 *g, const void *alpha, const void *G, const void *dz,
                        void *gxl, int nthreads);
int tsgu_gatv2_grad_att(int64_t n, int64_t width, tsgu_real rtype, const void *arows, void *gatt, int nthreads);

#endif
