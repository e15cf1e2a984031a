/* glue_solve.c: the entry points of the solvers (trisolve.c, cg.c, minres.c). */
#include "glue.h"

/* ---- trisolve(ptr, col, val, batch, n, X, upper, unit, trans, nthreads) ----
 * in place: X[k] = A[k]^{-1} X[k] (or A[k]^{-T} X[k] with trans); A is batch x n x n
 * triangular, X (batch, n, p) contiguous, holding the right-hand side on entry. */
static int trisolve_check(frame *f)
{
    const arg *a = f->a;
    return make_csr(a[0].t, a[1].t, a[2].t, a[3].L, a[4].L, a[4].L, &f->A, 0) ||
           make_dense(a[5].t, a[3].L, a[4].L, last_dim(a[5].t), f->A.rtype, &f->X) || need_contiguous(a[5].t);
}
static int trisolve_kernel(frame *f)
{
    const arg *a = f->a;
    return tsgu_trisolve(&f->A, &f->X, a[6].i, a[7].i, a[8].i, a[9].i);
}

/* ---- Krylov solvers: the tensors of cg and minres ----
 * ptr, col, val: A n x n; B, X (n, k) contiguous of A's dtype; res float64 (2, k)
 * contiguous: rel in res[0], true_rel in res[1].  They are the arguments 0-2 and 4-6. */
static int krylov_check(frame *f)
{
    const arg *a = f->a;
    long long n = a[3].L;
    if (make_csr(a[0].t, a[1].t, a[2].t, 1, n, n, &f->A, 0) ||
        make_dense(a[4].t, 1, n, last_dim(a[4].t), f->A.rtype, &f->X) || need_contiguous(a[4].t) ||
        make_dense(a[5].t, 1, n, f->X.cols, f->A.rtype, &f->Y) || need_contiguous(a[5].t))
        return -1;
    if (real_type(a[6].t, 0) != TSGU_F64 || need_contiguous(a[6].t) || numel(dl(a[6].t)) != 2 * f->X.cols) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "res must be float64 with two entries per column of B");
        return -1;
    }
    return 0;
}

/* the value of cg and minres: (iterations, matvecs, recursive_stop, stopped_before, breakdown) */
static PyObject *krylov_result(frame *f)
{
    const tsgu_krylov_info *info = &f->u.krylov.info;
    return Py_BuildValue("LLiii", (long long)info->iterations, (long long)info->matvecs, info->recursive_stop,
                         info->stopped_before, info->breakdown);
}

/* ---- cg(ptr, col, val, n, B, X, res, has_x0, tol, stop, tiny, mean, max_iter, min_iter, nthreads) ----
 * conjugate gradients for A X = B (cg.c); X holds the initial guess when has_x0 and
 * the solution on return. */
static int cg_check(frame *f)
{
    const arg *a = f->a;
    f->u.krylov.opts = (tsgu_krylov_opts){.tol = a[8].d, .stop = a[9].d, .tiny = a[10].d, .mean = a[11].i,
                                          .max_iter = a[12].L, .min_iter = a[13].L};
    return krylov_check(f);
}
static int cg_kernel(frame *f)
{
    double *res = data_of(f->a[6].t);
    return tsgu_cg(&f->A, &f->X, &f->Y, f->a[7].i, &f->u.krylov.opts, res, res + f->X.cols, &f->u.krylov.info,
                   f->a[14].i);
}

/* ---- minres(ptr, col, val, n, B, X, res, tol, eps, scale, shift, max_iter, nthreads) ----
 * MINRES for (scale A + shift I) X = B (minres.c) */
static int minres_check(frame *f)
{
    const arg *a = f->a;
    f->u.krylov.opts = (tsgu_krylov_opts){.tol = a[7].d, .eps = a[8].d, .scale = a[9].d, .shift = a[10].d,
                                          .max_iter = a[11].L};
    return krylov_check(f);
}
static int minres_kernel(frame *f)
{
    double *res = data_of(f->a[6].t);
    return tsgu_minres(&f->A, &f->X, &f->Y, &f->u.krylov.opts, res, res + f->X.cols, &f->u.krylov.info, f->a[12].i);
}

#define KRYLOV_NAMES CSR_NAMES, "values", "B", "X", "res"
ENTRY(trisolve, "tttLLtpppi", trisolve_check, trisolve_kernel, NULL, CSR_NAMES, "values", "X")
ENTRY(cg, "tttLtttpdddpLLi", cg_check, cg_kernel, krylov_result, KRYLOV_NAMES)
ENTRY(minres, "tttLtttddddLi", minres_check, minres_kernel, krylov_result, KRYLOV_NAMES)

PyMethodDef glue_solve[] = {
    METHOD(trisolve, "trisolve(crow, col, values, batch, n, X, upper, unit, trans, nthreads): X <- A^{-1} X in place"),
    METHOD(cg, "cg(crow, col, values, n, B, X, res, has_x0, tol, stop, tiny, mean, max_iter, min_iter, nthreads)"),
    METHOD(minres, "minres(crow, col, values, n, B, X, res, tol, eps, scale, shift, max_iter, nthreads)"),
    {NULL, NULL, 0, NULL}};
