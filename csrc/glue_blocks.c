/* glue_blocks.c: output tensors on kept blocks (kept_blocks.c), handed to PyTorch as
 * DLPack capsules whose deleter gives the block back for the next call; and freeing
 * what is kept between calls on request. */
#include "glue.h"
#include "tsgu_kept_blocks.h"

typedef struct {
    DLManagedTensor mt;   /* first: the deleter gets &mt */
    int64_t shape[2];
    size_t bytes;         /* the block's */
} kept_tensor;

static void give_back(DLManagedTensor *mt)
{
    kept_tensor *k = (kept_tensor *)mt;
    tsgu_block_give(mt->dl_tensor.data, k->bytes);
    free(k);
}

/* a capsule freed before a consumer took it (still named "dltensor") gives its block back */
static void unused_capsule(PyObject *capsule)
{
    if (!PyCapsule_IsValid(capsule, "dltensor")) return;
    DLManagedTensor *mt = PyCapsule_GetPointer(capsule, "dltensor");
    mt->deleter(mt);
}

/* ---- kept_empty(shape, code, bits) -> DLPack capsule ----
 * an uninitialised contiguous CPU tensor of shape (one or two sizes) and DLPack type
 * (code, bits) on a kept block */
static PyObject *py_kept_empty(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *oshape;
    int code, bits;
    if (!PyArg_ParseTuple(args, "Oii", &oshape, &code, &bits)) return NULL;
    Py_ssize_t ndim = PyTuple_Check(oshape) ? PyTuple_Size(oshape) : -1;
    if (ndim < 1 || ndim > 2 || (code != kDLInt && code != kDLFloat && code != kDLBfloat) ||
        (bits != 16 && bits != 32 && bits != 64)) {
        PyErr_SetString(PyExc_ValueError, "kept_empty takes a shape of one or two sizes and an integer or "
                                          "floating DLPack type of 16, 32 or 64 bits");
        return NULL;
    }
    kept_tensor *k = calloc(1, sizeof *k);
    if (!k) return PyErr_NoMemory();
    size_t elements = 1;
    for (Py_ssize_t d = 0; d < ndim; d++) {
        k->shape[d] = PyLong_AsLongLong(PyTuple_GetItem(oshape, d));
        if (k->shape[d] < 0 || (k->shape[d] > 0 && elements > (SIZE_MAX / 8) / (size_t)k->shape[d])) {
            free(k);
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "kept_empty: a size is negative or too large");
            return NULL;
        }
        elements *= (size_t)k->shape[d];
    }
    k->bytes = elements * (size_t)(bits / 8);
    void *data = tsgu_block_take(&k->bytes);
    if (!data) {
        free(k);
        return PyErr_NoMemory();
    }
    k->mt.dl_tensor = (DLTensor){data, {kDLCPU, 0}, (int32_t)ndim, {(uint8_t)code, (uint8_t)bits, 1}, k->shape,
                                 NULL, 0};
    k->mt.deleter = give_back;
    PyObject *capsule = PyCapsule_New(&k->mt, "dltensor", unused_capsule);
    if (!capsule) give_back(&k->mt);
    return capsule;
}

/* ---- release_kept() -> int ----
 * frees the memory kept between calls: the kept blocks and sparse @ sparse's workspace
 * (spgemm.c); the bytes freed */
static PyObject *py_release_kept(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    size_t bytes;
    Py_BEGIN_ALLOW_THREADS
    bytes = tsgu_blocks_release() + tsgu_spgemm_release();
    Py_END_ALLOW_THREADS
    return PyLong_FromSize_t(bytes);
}

PyMethodDef glue_blocks[] = {
    {"kept_empty", py_kept_empty, METH_VARARGS,
     "kept_empty(shape, code, bits) -> DLPack capsule of an uninitialised tensor on a block kept for reuse"},
    {"release_kept", py_release_kept, METH_NOARGS,
     "release_kept() -> bytes: free the kept blocks and sparse @ sparse's workspace"},
    {NULL, NULL, 0, NULL}};
