/* glue_solve.c: the entry points of the solvers (trisolve.c, cg.c, minres.c). */
#include "glue.h"

/* ---- trisolve(ptr, col, val, batch, n, X, upper, unit, trans, nthreads) ----
 * in place: X[k] = A[k]^{-1} X[k] (or A[k]^{-T} X[k] with trans); A is batch x n x n
 * triangular, X (batch, n, p) contiguous, holding the right-hand side on entry. */
PyObject *py_trisolve(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *o[4];
    long long batch, n;
    int upper, unit, trans, nthreads, status;
    call c = {0};
    tsgu_csr A;
    tsgu_dense X;
    if (!PyArg_ParseTuple(args, "OOOLLOpppi", &o[0], &o[1], &o[2], &batch, &n, &o[3], &upper, &unit,
                          &trans, &nthreads))
        return NULL;
    const char *names[4] = {"crow_indices", "col_indices", "values", "X"};
    const held *h = c.t;
    if (take_all(&c, o, names, 4) || make_csr(&h[0], &h[1], &h[2], batch, n, n, &A, 0) ||
        make_dense(&h[3], batch, n, last_dim(&h[3]), A.rtype, &X) || need_contiguous(&h[3]))
        return finish(&c, -1);
    Py_BEGIN_ALLOW_THREADS
    status = tsgu_trisolve(&A, &X, upper, unit, trans, nthreads);
    Py_END_ALLOW_THREADS
    return finish(&c, status);
}

/* ---- Krylov solvers: the tensors of cg and minres ----
 * ptr, col, val: A n x n; B, X (n, k) contiguous of A's dtype; res float64 (2, k)
 * contiguous: rel in res[0], true_rel in res[1].  o[] holds them in that order. */
static int krylov_views(call *c, PyObject *const *o, int64_t n, tsgu_csr *A, tsgu_dense *B, tsgu_dense *X,
                        double **res)
{
    const char *names[6] = {"crow_indices", "col_indices", "values", "B", "X", "res"};
    const held *h = c->t;
    if (take_all(c, o, names, 6) || make_csr(&h[0], &h[1], &h[2], 1, n, n, A, 0) ||
        make_dense(&h[3], 1, n, last_dim(&h[3]), A->rtype, B) || need_contiguous(&h[3]) ||
        make_dense(&h[4], 1, n, B->cols, A->rtype, X) || need_contiguous(&h[4]))
        return -1;
    if (real_type(&h[5], 0) != TSGU_F64 || need_contiguous(&h[5]) || numel(dl(&h[5])) != 2 * B->cols) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "res must be float64 with two entries per column of B");
        return -1;
    }
    *res = data_of(&h[5]);
    return 0;
}

/* the single exit of cg and minres: (iterations, matvecs, recursive_stop, stopped_before,
 * breakdown) after finish() */
static PyObject *krylov_finish(call *c, int status, const tsgu_krylov_info *info)
{
    PyObject *none = finish(c, status);
    if (!none) return NULL;
    Py_DECREF(none);
    return Py_BuildValue("LLiii", (long long)info->iterations, (long long)info->matvecs, info->recursive_stop,
                         info->stopped_before, info->breakdown);
}

/* ---- cg(ptr, col, val, n, B, X, res, has_x0, tol, stop, tiny, mean, max_iter, min_iter, nthreads) ----
 * conjugate gradients for A X = B (cg.c); X holds the initial guess when has_x0 and
 * the solution on return. */
PyObject *py_cg(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *o[6];
    long long n, max_iter, min_iter;
    int has_x0, mean, nthreads, status;
    tsgu_krylov_opts opts = {0};
    tsgu_krylov_info info = {0};
    call c = {0};
    tsgu_csr A;
    tsgu_dense B, X;
    double *res;
    if (!PyArg_ParseTuple(args, "OOOLOOOpdddpLLi", &o[0], &o[1], &o[2], &n, &o[3], &o[4], &o[5], &has_x0,
                          &opts.tol, &opts.stop, &opts.tiny, &mean, &max_iter, &min_iter, &nthreads))
        return NULL;
    opts.mean = mean;
    opts.max_iter = max_iter;
    opts.min_iter = min_iter;
    if (krylov_views(&c, o, n, &A, &B, &X, &res)) return finish(&c, -1);
    Py_BEGIN_ALLOW_THREADS
    status = tsgu_cg(&A, &B, &X, has_x0, &opts, res, res + B.cols, &info, nthreads);
    Py_END_ALLOW_THREADS
    return krylov_finish(&c, status, &info);
}

/* ---- minres(ptr, col, val, n, B, X, res, tol, eps, scale, shift, max_iter, nthreads) ----
 * MINRES for (scale A + shift I) X = B (minres.c) */
PyObject *py_minres(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *o[6];
    long long n, max_iter;
    int nthreads, status;
    tsgu_krylov_opts opts = {0};
    tsgu_krylov_info info = {0};
    call c = {0};
    tsgu_csr A;
    tsgu_dense B, X;
    double *res;
    if (!PyArg_ParseTuple(args, "OOOLOOOddddLi", &o[0], &o[1], &o[2], &n, &o[3], &o[4], &o[5], &opts.tol,
                          &opts.eps, &opts.scale, &opts.shift, &max_iter, &nthreads))
        return NULL;
    opts.max_iter = max_iter;
    if (krylov_views(&c, o, n, &A, &B, &X, &res)) return finish(&c, -1);
    Py_BEGIN_ALLOW_THREADS
    status = tsgu_minres(&A, &B, &X, &opts, res, res + B.cols, &info, nthreads);
    Py_END_ALLOW_THREADS
    return krylov_finish(&c, status, &info);
}
