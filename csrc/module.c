/* module.c: torchsparsegradutils._C -- the intake of tensors, the single exit, the
 * thunk of the entry points from tables, the status table and the module's own
 * methods; the entry points live in glue_<family>.c (glue.h says what they share).
 *
 * Tensors arrive through DLPack, zero-copy, so the module never links libtorch
 * and one build serves any PyTorch 2.x: borrowed through the tensor type's DLPack
 * C exchange table where PyTorch publishes one (recent releases; no capsule, no
 * allocation), else as DLPack capsules from a registered exporter or
 * tensor.__dlpack__(). */
#include "glue.h"
#include "tsgu_isa.h"
#include "tsgu_kept_blocks.h"
#include "tsgu_parallel.h"
#include <limits.h>
#include <string.h>

/* the C exchange table a tensor type may publish as its __dlpack_c_exchange_api__
 * capsule (DLPack 1.3); only dltensor_from_py_object_no_sync is used here: it fills
 * a DLTensor that borrows obj's sizes, strides and data (valid while obj lives and
 * is not resized), with no capsule, allocation or Python call */
typedef struct {
    uint32_t major;
    uint32_t minor;
} DLPackVersion;
typedef void (*dlpack_unused_fn)(void);
typedef struct DLPackExchangeAPIHeader {
    DLPackVersion version;
    struct DLPackExchangeAPIHeader *prev_api;
} DLPackExchangeAPIHeader;
typedef struct {
    DLPackExchangeAPIHeader header;
    dlpack_unused_fn managed_tensor_allocator;
    dlpack_unused_fn managed_tensor_from_py_object_no_sync;
    dlpack_unused_fn managed_tensor_to_py_object_no_sync;
    int (*dltensor_from_py_object_no_sync)(void *py_object, DLTensor *out); /* 0, or -1 and an exception */
    dlpack_unused_fn current_work_stream;
} DLPackExchangeAPI;

/* obj -> DLPack capsule: the registered exporter, or NULL for obj.__dlpack__() */
static PyObject *exporter = NULL;
/* instances of exchange_type are borrowed through exchange (see use_exchange_api) */
static PyTypeObject *exchange_type = NULL;
static const DLPackExchangeAPI *exchange = NULL;

/* h->mt <- obj's DLTensor: borrowed through the exchange table when obj is a tensor
 * of its type (obj, held by the caller's arguments for the whole call, keeps it
 * valid), else from a DLPack capsule that h owns; -1 with an exception */
static int intake(held *h, PyObject *obj)
{
    if (exchange && PyObject_TypeCheck(obj, exchange_type)) {
        if (exchange->dltensor_from_py_object_no_sync(obj, &h->borrowed.dl_tensor) != 0) return -1;
        h->mt = &h->borrowed;
        return 0;
    }
    h->capsule = exporter ? PyObject_CallFunctionObjArgs(exporter, obj, NULL)
                          : PyObject_CallMethod(obj, "__dlpack__", NULL);
    if (!h->capsule) return -1;
    h->mt = PyCapsule_GetPointer(h->capsule, "dltensor");
    if (!h->mt) return -1;
    if (PyCapsule_SetName(h->capsule, "used_dltensor") != 0) {
        h->mt = NULL;
        return -1;
    }
    return 0;
}

/* take obj's DLTensor into the next slot of c; on failure set an
 * exception and return -1 (what was taken is given back by finish) */
int take(call *c, PyObject *obj, const char *name)
{
    if (c->count == MAX_HELD) {
        PyErr_SetString(PyExc_RuntimeError, "internal error: too many tensors in one call");
        return -1;
    }
    held *h = &c->t[c->count++];
    h->name = name;
    if (intake(h, obj)) return -1;
    DLDevice d = h->mt->dl_tensor.device;
    if (d.device_type != (c->cuda ? kDLCUDA : kDLCPU)) {
        PyErr_Format(PyExc_ValueError, "%s must be a %s tensor", name, c->cuda ? "CUDA" : "CPU");
        return -1;
    }
    if (c->count > 1 && d.device_id != c->device_id) {
        PyErr_Format(PyExc_ValueError, "%s must be on the device of %s", name, c->t[0].name);
        return -1;
    }
    c->device_id = d.device_id;
    return 0;
}

/* take objs[0..count) named names[0..count) */
int take_all(call *c, PyObject *const *objs, const char *const *names, int count)
{
    for (int i = 0; i < count; i++)
        if (take(c, objs[i], names[i])) return -1;
    return 0;
}

/* the single exit of every entry point: give every tensor back, then return
 * None, or NULL with an exception (status < 0: already set; > 0: a kernel's) */
PyObject *finish(call *c, int status)
{
    for (int i = 0; i < c->count; i++) {
        held *h = &c->t[i];
        if (h->mt && h->mt->deleter) h->mt->deleter(h->mt);
        Py_XDECREF(h->capsule);
    }
    c->count = 0;
    if (status < 0 || raise_status(status)) return NULL;
    Py_RETURN_NONE;
}

/* PyArg_ParseTuple's error for nargs arguments to a function of the letters args */
static int arity(Py_ssize_t nargs, const char *args)
{
    const char *bar = strchr(args, '|');
    Py_ssize_t most = (Py_ssize_t)strlen(args) - (bar != NULL), least = bar ? bar - args : most;
    if (nargs >= least && nargs <= most) return 0;
    Py_ssize_t want = nargs < least ? least : most;
    PyErr_Format(PyExc_TypeError, "function takes %s %zd argument%s (%zd given)",
                 least == most ? "exactly" : nargs < least ? "at least" : "at most", want, want == 1 ? "" : "s",
                 nargs);
    return -1;
}

/* *a <- o, the argument k, by its letter (glue.h) with the errors of PyArg_ParseTuple's
 * format units; a tensor taken into c as **name, and *name moved on to the next
 * tensor's; -1 with an exception */
static int convert(call *c, arg *a, int k, char letter, PyObject *o, const char *const **name)
{
    long v;
    switch (letter) {
    case 'n':
        if (o == Py_None) {
            ++*name;
            return 0;
        }
        /* fall through */
    case 't':
        if (take(c, o, *(*name)++)) return -1;
        a->t = &c->t[c->count - 1];
        return 0;
    case 'L':
        a->L = PyLong_AsLongLong(o);
        return a->L == -1 && PyErr_Occurred() ? -1 : 0;
    case 'i':
        v = PyLong_AsLong(o);
        if (v == -1 && PyErr_Occurred()) return -1;
        if (v > INT_MAX || v < INT_MIN) {
            PyErr_SetString(PyExc_OverflowError, v > 0 ? "signed integer is greater than maximum"
                                                       : "signed integer is less than minimum");
            return -1;
        }
        a->i = (int)v;
        return 0;
    case 'p':
        return (a->i = PyObject_IsTrue(o)) < 0 ? -1 : 0;
    case 'K':
        if (!PyLong_Check(o)) {
            PyObject *type = PyObject_GetAttrString((PyObject *)Py_TYPE(o), "__name__");
            if (type) PyErr_Format(PyExc_TypeError, "argument %d must be int, not %U", k + 1, type);
            Py_XDECREF(type);
            return -1;
        }
        a->K = PyLong_AsUnsignedLongLongMask(o);
        return a->K == (unsigned long long)-1 && PyErr_Occurred() ? -1 : 0;
    default: /* 'd' */
        a->d = PyFloat_AsDouble(o);
        return a->d == -1.0 && PyErr_Occurred() ? -1 : 0;
    }
}

/* the one thunk of the entry points of the tables (glue.h): convert the arguments, taking
 * the tensors; e->check with the GIL, e->kernel without it; then the single exit */
PyObject *thunk(const entry *e, PyObject *args)
{
    frame f;
    memset(&f, 0, sizeof f);
    Py_ssize_t nargs = PyTuple_Size(args);
    if (nargs < 0 || arity(nargs, e->args)) return NULL;
    const char *letter = e->args;
    const char *const *name = e->tensors;
    for (int k = 0; k < nargs; k++, letter++) {
        if (*letter == '|') letter++;
        if (convert(&f.c, &f.a[k], k, *letter, PyTuple_GetItem(args, k), &name)) return finish(&f.c, -1);
    }
    if (e->check(&f)) return finish(&f.c, -1);
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = e->kernel(&f);
    Py_END_ALLOW_THREADS
    PyObject *none = finish(&f.c, status);
    if (!none || !e->result) return none;
    Py_DECREF(none);
    return e->result(&f);
}

/* ---- the status table: the name and ValueError message of every status a kernel
 * returns but TSGU_OK and TSGU_ENOMEM (a MemoryError); Python reads it through
 * status_messages() rather than typing the messages again ---- */
static const struct {
    const char *name;    /* the code's name in tsgu.h, without TSGU_ */
    const char *message;
} status_table[] = {
    [TSGU_EPTR_ENDS] = {"EPTR_ENDS", "malformed sparse matrix: row pointers (crow_indices) "
                                     "must start at 0 and end at the number of stored entries"},
    [TSGU_EPTR_ORDER] = {"EPTR_ORDER",
                         "malformed sparse matrix: row pointers (crow_indices) must be non-decreasing"},
    [TSGU_ECOL_RANGE] = {"ECOL_RANGE", "malformed sparse matrix: a column index is negative or "
                                       "not less than the number of columns"},
    [TSGU_ECOL_ORDER] = {"ECOL_ORDER", "malformed sparse matrix: column indices must be sorted "
                                       "and unique within each row"},
    [TSGU_EIDX_RANGE] = {"EIDX_RANGE", "malformed sparse matrix: an index is negative or not less "
                                       "than the size of its dimension"},
    [TSGU_EIDX_ORDER] = {"EIDX_ORDER", "malformed sparse matrix: the COO tensor is marked coalesced "
                                       "but its indices are not sorted by row"},
    [TSGU_ETRI_SIDE] = {"ETRI_SIDE", "A is not triangular on the requested side: it stores an entry "
                                     "below the diagonal with upper=True, or above it with upper=False"},
    [TSGU_EDIAG_ZERO] = {"EDIAG_ZERO", "A is singular: a diagonal entry is zero or not stored "
                                       "(pass unitriangular=True if the diagonal is implicit ones)"},
    [TSGU_EDIAG_UNIT] = {"EDIAG_UNIT", "unitriangular=True, but A stores diagonal entries: "
                                       "the unit diagonal must be implicit (A strictly triangular)"},
    [TSGU_EGROUP] = {"EGROUP", "malformed grouping: a relation index is negative or not less "
                               "than the number of relations, segment offsets do not run "
                               "from 0 to the number of rows, or a row order is not a "
                               "permutation of the rows"},
    [TSGU_EARG] = {"EARG", "malformed arg of reduce='amax'/'amin': an index is neither -1 nor "
                           "the offset of an entry in its row"},
    [TSGU_EROW_LONG] = {"EROW_LONG", "reduce='amax'/'amin' takes rows of fewer than 2^31 entries "
                                     "(their arg indices are int32)"},
};
#define N_STATUS ((int)(sizeof status_table / sizeof status_table[0]))

/* status code -> exception; returns -1 when one was set */
int raise_status(int status)
{
    if (status == TSGU_OK) return 0;
    if (status == TSGU_ENOMEM) PyErr_NoMemory();
    else if (status > 0 && status < N_STATUS && status_table[status].message)
        PyErr_SetString(PyExc_ValueError, status_table[status].message);
    else PyErr_Format(PyExc_RuntimeError, "internal error in a sparse kernel (status %d)", status);
    return -1;
}

/* the ValueError of a COO index array whose entry `entry` holds an index out of range
 * (tsgu_coo_row_ptr's *bad): the status's message, then which index (batch, row or
 * column), its value, the entry, the dimension and its size; returns -1 */
int raise_coo_range(const int64_t *idx, int64_t ld, int64_t sd, const int64_t *sizes, int64_t entry)
{
    static const char *const kinds[2][3] = {{"row", "column", ""}, {"batch", "row", "column"}};
    for (int64_t d = 0; d < sd; d++) {
        int64_t v = idx[d * ld + entry];
        if (v < 0 || v >= sizes[d]) {
            PyErr_Format(PyExc_ValueError, "%s: %s index %lld at entry %lld is out of range for dimension %lld "
                         "of size %lld", status_table[TSGU_EIDX_RANGE].message, kinds[sd == 3][d], (long long)v,
                         (long long)entry, (long long)d, (long long)sizes[d]);
            return -1;
        }
    }
    return raise_status(TSGU_EIDX_RANGE);      /* not reached: the entry holds one */
}

/* ---- status_messages() -> {name: message}: the status table ---- */
static PyObject *py_status_messages(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    PyObject *d = PyDict_New();
    for (int s = 0; d && s < N_STATUS; s++) {
        if (!status_table[s].message) continue;
        PyObject *msg = PyUnicode_FromString(status_table[s].message);
        if (!msg || PyDict_SetItemString(d, status_table[s].name, msg)) Py_CLEAR(d);
        Py_XDECREF(msg);
    }
    return d;
}

/* ---- set_exporter(fn): fn(tensor) -> "dltensor" capsule, used by every later call ---- */
static PyObject *py_set_exporter(PyObject *self, PyObject *fn)
{
    (void)self;
    if (!PyCallable_Check(fn)) {
        PyErr_SetString(PyExc_TypeError, "the exporter must be callable");
        return NULL;
    }
    PyObject *old = exporter;
    Py_INCREF(fn);
    exporter = fn;
    Py_XDECREF(old);
    Py_RETURN_NONE;
}

/* ---- use_exchange_api(tensor_type or None) -> bool ----
 * borrow the DLTensor of every later instance of tensor_type through its
 * __dlpack_c_exchange_api__ table (DLPack 1.3 or a later 1.x, with the non-owning export),
 * instead of exporting a capsule; True if it does.  None, or a type without such
 * a table, goes back to capsules for every tensor. */
static PyObject *py_use_exchange_api(PyObject *self, PyObject *type)
{
    (void)self;
    const DLPackExchangeAPI *api = NULL;
    if (type != Py_None) {
        if (!PyType_Check(type)) {
            PyErr_SetString(PyExc_TypeError, "use_exchange_api takes a type or None");
            return NULL;
        }
        PyObject *cap = PyObject_GetAttrString(type, "__dlpack_c_exchange_api__");
        if (!cap) {
            if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return NULL;
            PyErr_Clear();
        } else {
            api = PyCapsule_IsValid(cap, "dlpack_exchange_api") ? PyCapsule_GetPointer(cap, "dlpack_exchange_api")
                                                                 : NULL;
            Py_DECREF(cap); /* the table lives as long as the process (DLPack's rule) */
            if (api && (api->header.version.major != 1 || api->header.version.minor < 3 ||
                        !api->dltensor_from_py_object_no_sync))
                api = NULL;      /* the table's layout is DLPack 1.3's */
        }
    }
    PyTypeObject *old = exchange_type;
    exchange_type = api ? (PyTypeObject *)type : NULL;
    Py_XINCREF(exchange_type);
    exchange = api;
    Py_XDECREF(old);
    return PyBool_FromLong(api != NULL);
}

/* ---- simd() -> str: which variant of the kernels runs here ("avx2+fma" or "portable") ---- */
static PyObject *py_simd(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
#if TSGU_X86_CLONES
    if (tsgu_use_avx2()) return PyUnicode_FromString("avx2+fma");
#endif
    return PyUnicode_FromString("portable");
}

/* ---- threads() -> str: whose threads run the kernels ("openmp": the process's OpenMP
 * team, PyTorch's; "own": threads of our own, see parallel_rows.c) ---- */
static PyObject *py_threads(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyUnicode_FromString(tsgu_parallel_openmp() ? "openmp" : "own");
}

static PyMethodDef methods[] = {
    {"set_exporter", py_set_exporter, METH_O, "set_exporter(fn): fn(tensor) -> DLPack capsule"},
    {"simd", py_simd, METH_NOARGS, "simd() -> 'avx2+fma' or 'portable': the kernels' variant (TSGU_PORTABLE=1)"},
    {"threads", py_threads, METH_NOARGS,
     "threads() -> 'openmp' or 'own': whose threads run the kernels (TSGU_OPENMP=0: our own)"},
    {"status_messages", py_status_messages, METH_NOARGS,
     "status_messages() -> {name: message}: the ValueError message of each kernel status (tsgu.h, no TSGU_)"},
    {"use_exchange_api", py_use_exchange_api, METH_O,
     "use_exchange_api(tensor_type or None) -> bool: borrow tensors through the DLPack C exchange table"},
#ifdef TSGU_CUDA
    {"cuda_csr_check", py_cuda_csr_check, METH_VARARGS,
     "cuda_csr_check(crow, col, batch, n, m, item_nnz, flag, stream): raises for a malformed structure"},
    {"cuda_coo_check", py_cuda_coo_check, METH_VARARGS,
     "cuda_coo_check(indices, sizes, coalesced, flag, stream) -> order bits (0: coalesced order)"},
    {"cuda_coo_row_ptr", py_cuda_coo_row_ptr, METH_VARARGS, "cuda_coo_row_ptr(indices, sizes, row_ptr, stream)"},
    {"cuda_spmm", py_cuda_spmm, METH_VARARGS,
     "cuda_spmm(crow, col, values, perm, batch, n, m, B, out, plan, stream)"},
    {"cuda_sddmm", py_cuda_sddmm, METH_VARARGS, "cuda_sddmm(crow, col, rows, batch, n, m, G, B, out, stream)"},
    {"cuda_entry_rows", py_cuda_entry_rows, METH_VARARGS, "cuda_entry_rows(crow, col, batch, n, m, rows, stream)"},
    {"cuda_transpose_bytes", py_cuda_transpose_bytes, METH_VARARGS,
     "cuda_transpose_bytes(nnz, K) -> the workspace bytes of cuda_transpose"},
    {"cuda_transpose", py_cuda_transpose, METH_VARARGS,
     "cuda_transpose(crow, col, batch, n, m, tptr, trow, tperm, work, stream)"},
#endif
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C",
                                    "C kernels of torchsparsegradutils (private: use the Python API)",
                                    -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__C(void)
{
    tsgu_parallel_init();
    PyObject *m = PyModule_Create(&module);
#ifdef TSGU_CUDA
    const long cuda = 1;
#else
    const long cuda = 0;
#endif
    if (m && PyModule_AddIntConstant(m, "cuda", cuda)) Py_CLEAR(m); /* built with the CUDA kernels? */
    /* the least an output takes to go on a kept block (_backends.cpu.kept_empty) */
    if (m && PyModule_AddIntConstant(m, "kept_min_bytes", (long)TSGU_KEPT_MIN_BYTES)) Py_CLEAR(m);
    PyMethodDef *const families[] = {glue_mm, glue_reduce, glue_spgemm, glue_solve, glue_grouped, glue_lse,
                                     glue_softmax, glue_gat, glue_blocks, glue_order};
    for (size_t i = 0; m && i < sizeof families / sizeof families[0]; i++)
        if (PyModule_AddFunctions(m, families[i])) Py_CLEAR(m);
    return m;
}
