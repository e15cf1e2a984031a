/* glue.h: what the glue files (module.c, glue_*.c: the only C files that know
 * about Python) share; private to them.
 *
 * Tensors arrive through DLPack, zero-copy (module.c: take).  Each entry point:
 * takes its tensors into a `call`, re-checks device, dtype, shape and strides
 * while building the kernel views (glue_views.c), releases the GIL around the
 * kernel, and leaves through finish(), which gives every tensor back and maps
 * the kernel's status to an exception.  Outputs are allocated by the caller
 * (torch.empty) and written in place.
 *
 * The functions declared here are defined once, in the file named beside them,
 * where their comments are; the accessors are inline, for the per-call path.
 * The build hides every symbol but PyInit__C (-fvisibility=hidden), so these
 * short names neither leave the module nor bind to another library's.  A glue
 * file includes this header first: Python.h must precede the system headers. */
#ifndef TSGU_GLUE_H
#define TSGU_GLUE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "tsgu.h"

/* ---- DLPack ABI, declared from the published specification (dlpack.h) ---- */
typedef struct {
    int32_t device_type; /* kDLCPU = 1 */
    int32_t device_id;
} DLDevice;
typedef struct {
    uint8_t code;        /* kDLInt = 0, kDLUInt = 1, kDLFloat = 2, ... */
    uint8_t bits;
    uint16_t lanes;
} DLDataType;
typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides;    /* in elements; NULL means compact row-major */
    uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;
enum { kDLCPU = 1, kDLCUDA = 2, kDLInt = 0, kDLFloat = 2, kDLBfloat = 4 };

/* ---- the tensors of one call, held from intake to the single exit ---- */
typedef struct {
    const char *name;     /* argument name, for messages */
    PyObject *capsule;    /* NULL when borrowed */
    DLManagedTensor *mt;  /* the capsule's, or &borrowed */
    DLManagedTensor borrowed; /* dl_tensor from the exchange table; no deleter */
} held;

#define MAX_HELD 16

typedef struct {
    held t[MAX_HELD];
    int count;            /* how many of t[] to give back */
    int cuda;             /* 0: every tensor on the CPU; 1: all on one CUDA device */
    int32_t device_id;    /* that device, once a tensor was taken */
} call;

/* ---- intake, exit and the status table (module.c) ---- */
int take(call *c, PyObject *obj, const char *name);
int take_all(call *c, PyObject *const *objs, const char *const *names, int count);
PyObject *finish(call *c, int status);
int raise_status(int status);
int raise_coo_range(const int64_t *idx, int64_t ld, int64_t sd, const int64_t *sizes, int64_t entry);

/* ---- accessors of a taken tensor ---- */
static inline const DLTensor *dl(const held *h) { return &h->mt->dl_tensor; }
static inline void *data_of(const held *h) { return (char *)dl(h)->data + dl(h)->byte_offset; }

static inline int64_t numel(const DLTensor *t)
{
    int64_t s = 1;
    for (int d = 0; d < t->ndim; d++) s *= t->shape[d];
    return s;
}

static inline int64_t stride_of(const DLTensor *t, int d)
{
    if (t->strides) return t->strides[d];
    int64_t s = 1;
    for (int e = t->ndim - 1; e > d; e--) s *= t->shape[e];
    return s;
}

/* width p of an output-like (.., p) tensor, or -1 when it has fewer than 2 dims */
static inline int64_t last_dim(const held *h)
{
    return dl(h)->ndim >= 2 ? dl(h)->shape[dl(h)->ndim - 1] : -1;
}

/* ---- checks and kernel views (glue_views.c): 0, or -1 with an exception ---- */
int index_type(const held *h);
int real_type(const held *h, int half_ok);
int need_contiguous(const held *h);
int make_csr(const held *ptr, const held *col, const held *val, int64_t batch, int64_t n, int64_t m,
             tsgu_csr *A, int half_ok);
int make_dense(const held *h, int64_t batch, int64_t rows, int64_t cols, int rt, tsgu_dense *D);
int index_array(const held *h, const tsgu_csr *A, int64_t want, const char *like);
int coo_sizes(PyObject *osizes, int64_t *sizes, int64_t *sd, int64_t *R);
int coo_indices(const held *h, int64_t sd, int64_t *ld, int64_t *nnz);
int take_coo(call *c, PyObject *oi, PyObject *osizes, int64_t *sizes, int64_t *sd, int64_t *R, int64_t *ld,
             int64_t *nnz);
int take_row_ptr(call *c, PyObject *optr, int64_t R);

/* ---- the entry points, by family: the method table is in module.c ---- */
/* glue_mm.c: sparse_mm's products and the structures they read */
PyObject *py_spmm(PyObject *self, PyObject *args);
PyObject *py_spmm_t(PyObject *self, PyObject *args);
PyObject *py_spmm_coo(PyObject *self, PyObject *args);
PyObject *py_sddmm(PyObject *self, PyObject *args);
PyObject *py_csr_check(PyObject *self, PyObject *args);
PyObject *py_csr_transpose(PyObject *self, PyObject *args);
PyObject *py_coo_row_ptr(PyObject *self, PyObject *args);
/* glue_reduce.c: sparse_mm's amax/amin kernels */
PyObject *py_spmm_arg(PyObject *self, PyObject *args);
PyObject *py_spmm_t_arg(PyObject *self, PyObject *args);
PyObject *py_sddmm_arg(PyObject *self, PyObject *args);
/* glue_spgemm.c: sparse_mm's sparse @ sparse kernels */
PyObject *py_spgemm(PyObject *self, PyObject *args);
PyObject *py_spgemm_grad(PyObject *self, PyObject *args);
/* glue_solve.c: solves */
PyObject *py_trisolve(PyObject *self, PyObject *args);
PyObject *py_cg(PyObject *self, PyObject *args);
PyObject *py_minres(PyObject *self, PyObject *args);
/* glue_grouped.c: gather_mm, segment_mm */
PyObject *py_group_rows(PyObject *self, PyObject *args);
PyObject *py_grouped_mm(PyObject *self, PyObject *args);
PyObject *py_grouped_mm_tn(PyObject *self, PyObject *args);
/* glue_lse.c: sparse_logsumexp */
PyObject *py_lse_rows(PyObject *self, PyObject *args);
PyObject *py_lse_cols(PyObject *self, PyObject *args);
PyObject *py_lse_grad(PyObject *self, PyObject *args);
/* glue_softmax.c: sparse_softmax, sparse_log_softmax */
PyObject *py_softmax_rows(PyObject *self, PyObject *args);
PyObject *py_softmax_grad(PyObject *self, PyObject *args);
/* glue_gat.c: graph_attention */
PyObject *py_gat_forward(PyObject *self, PyObject *args);
PyObject *py_gat_grad_scores(PyObject *self, PyObject *args);
PyObject *py_gat_grad_src(PyObject *self, PyObject *args);
/* glue_gatv2.c: graph_attention_v2 */
PyObject *py_gatv2_forward(PyObject *self, PyObject *args);
PyObject *py_gatv2_grad(PyObject *self, PyObject *args);
#ifdef TSGU_CUDA
/* glue_cuda.c: the CUDA kernels (csrc/cuda/) */
PyObject *py_cuda_csr_check(PyObject *self, PyObject *args);
PyObject *py_cuda_coo_check(PyObject *self, PyObject *args);
PyObject *py_cuda_coo_row_ptr(PyObject *self, PyObject *args);
PyObject *py_cuda_spmm(PyObject *self, PyObject *args);
PyObject *py_cuda_sddmm(PyObject *self, PyObject *args);
#endif

#endif
