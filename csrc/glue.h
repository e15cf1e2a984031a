/* glue.h: what the glue files (module.c, glue_*.c: the only C files that know
 * about Python) share; private to them.
 *
 * Tensors arrive through DLPack, zero-copy (module.c: take).  Each entry point
 * takes its tensors into a `call`, re-checks device, dtype, shape and strides
 * while building the kernel views (glue_views.c), releases the GIL around the
 * kernel, and leaves through finish(), which gives every tensor back and maps
 * the kernel's status to an exception; most do it all through one thunk, from
 * a table (below).  Outputs are allocated by the caller (torch.empty) and
 * written in place.
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
enum { kDLCPU = 1, kDLCUDA = 2, kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4 };

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
/* of an optional tensor: NULL for none */
static inline void *data_or_null(const held *h) { return h ? data_of(h) : NULL; }

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

/* ---- the entry points from tables ----
 * A glue_<family>.c declares each entry point by one ENTRY line (its argument letters, its
 * check and kernel functions, the names of its tensors for messages) and lists them with
 * their docstrings in its method table (METHOD lines), which module.c adds to the module.
 * thunk() parses the arguments by their letters into a frame, taking the tensors, then
 * runs check with the GIL (validate, build the views in the frame) and kernel without it
 * (call the kernel on them), and leaves through finish().  The few that do not fit (a
 * workspace, a status mapped after the kernel, a Python call between two kernels) are
 * written out, in the same tables. */
#define MAX_ARGS 24       /* the most letters of an entry (gatv2_grad has 22) */

/* one argument, as its letter in entry.args says: t a tensor, n a tensor or None (.t,
 * NULL for None), L int64 (.L), i int, p flag (.i), K uint64 (.K), d float (.d); those
 * after '|' may be left out (zero) */
typedef union {
    const held *t;
    long long L;
    int i;
    unsigned long long K;
    double d;
} arg;

typedef struct {
    call c;
    arg a[MAX_ARGS];      /* the arguments, by position */
    tsgu_csr A, B, C;     /* the views check builds for kernel, */
    tsgu_dense X, Y, Z;
    union {               /* and a family's own */
        tsgu_gat gat;
        tsgu_gatv2 gatv2;
        struct {
            tsgu_groups g;
            int itype;        /* group_rows: of its relation indices */
        } groups;
        struct {
            tsgu_krylov_opts opts;
            tsgu_krylov_info info;
        } krylov;
    } u;
} frame;

typedef struct {
    const char *args;
    const char *const *tensors;
    int (*check)(frame *f);         /* 0, or -1 with an exception */
    int (*kernel)(frame *f);        /* a status */
    PyObject *(*result)(frame *f);  /* after success, the return value; NULL: None */
} entry;

PyObject *thunk(const entry *e, PyObject *args);

/* the entry point <name>: py_<name>, and its line in a method table */
#define ENTRY(name, args, check, kernel, result, ...)                                                   \
    static const entry name##_entry = {args, (const char *const[]){__VA_ARGS__}, check, kernel, result}; \
    static PyObject *py_##name(PyObject *self, PyObject *a)                                             \
    {                                                                                                   \
        (void)self;                                                                                     \
        return thunk(&name##_entry, a);                                                                 \
    }
#define METHOD(name, doc) {#name, py_##name, METH_VARARGS, doc}
/* the names of a CSR pattern's arguments */
#define CSR_NAMES "crow_indices", "col_indices"

/* the method tables of the families */
extern PyMethodDef glue_mm[], glue_reduce[], glue_spgemm[], glue_solve[], glue_grouped[], glue_lse[],
    glue_softmax[], glue_gat[], glue_blocks[], glue_order[];
#ifdef TSGU_CUDA
/* glue_cuda.c: the CUDA kernels (csrc/cuda/) */
PyObject *py_cuda_csr_check(PyObject *self, PyObject *args);
PyObject *py_cuda_coo_check(PyObject *self, PyObject *args);
PyObject *py_cuda_coo_row_ptr(PyObject *self, PyObject *args);
PyObject *py_cuda_spmm(PyObject *self, PyObject *args);
PyObject *py_cuda_sddmm(PyObject *self, PyObject *args);
PyObject *py_cuda_entry_rows(PyObject *self, PyObject *args);
PyObject *py_cuda_transpose_bytes(PyObject *self, PyObject *args);
PyObject *py_cuda_transpose(PyObject *self, PyObject *args);
#endif

#endif
