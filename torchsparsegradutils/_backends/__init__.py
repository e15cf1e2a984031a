"""The one place where a route to a backend is chosen, once per call.

    cpu        the C kernels (csrc/), for CPU tensors
    cuda       our CUDA kernels (csrc/cuda/), for CUDA tensors, where they are built
               and cover the op (the products of sparse_mm)
    triton     our Triton kernels (triton/), for CUDA tensors the cuda route does not
               take, where triton imports and the op has one (has_triton); imported
               only then, so the package imports without triton
    torch_ops  PyTorch's own ops, for everything else

Each function here is one op on a CSRView (or on dense rows and their grouping):
it does what is the same on every route (a hypersparse view's kept rows: on_kept_rows,
and kept_rows.py for sparse @ sparse; the output layout of the log-sum-exp), picks the
backend, and calls it.
"""
from typing import Callable, NoReturn

import torch

from .._core import native
from .._core.intake import as_csr
from .._core.torch_sparse import csr_tensor
from .._core.view import CSRView, head_copies, item_rows, kernel_array, product_itype, view_of
from . import cpu, cuda, torch_ops
from .cpu import cg, minres  # noqa: F401  (only on the route krylov_view opens)
from .cpu import release_kept  # noqa: F401  (memory the C kernels keep, on no route)
from .kept_rows import block_diagonal, dense_on_rows

# Tests set this to run the torch-ops route on CPU tensors.
force_torch_ops = False
# Tests set this to run the Triton kernels on CPU tensors (under TRITON_INTERPRET=1),
# for the ops that have one.
force_triton = False
# Tests set this to False to send CUDA tensors past the Triton kernels (to torch_ops),
# as a machine without triton does; with native.cuda_enabled False too, every op on
# CUDA takes the torch_ops route.
triton_enabled = True
_triton = None                 # the triton backend once imported; False: triton is missing


def _backend(has_cuda_kernel: bool, *tensors: torch.Tensor, has_triton: bool = False):
    """cpu when every tensor is on the CPU (triton there when forced and the op has a
    Triton kernel: has_triton); cuda when every one is on CUDA and our kernels take
    them (has_cuda_kernel: the op has one); else triton where the op has a Triton
    kernel, triton imports and triton_enabled; else torch_ops."""
    if force_torch_ops:
        return torch_ops
    for t in tensors:          # a loop: all() of a generator costs a microsecond more
        if not t.is_cpu:
            break
    else:
        if force_triton and has_triton:
            return _triton_backend(required=True)
        return cpu
    if not all(t.is_cuda for t in tensors):
        return torch_ops
    if has_cuda_kernel and native.cuda_kernels():
        return cuda
    if has_triton and triton_enabled and _triton_backend():
        return _triton
    return torch_ops


def _triton_backend(required: bool = False):
    """The triton backend, imported on first use; None where triton does not import
    (ImportError with required)."""
    global _triton
    if _triton is None:
        try:
            from . import triton as backend
        except ImportError:
            if required:
                raise
            backend = False
        _triton = backend
    if required and not _triton:
        raise ImportError("the Triton route needs triton, which does not import here")
    return _triton or None


def on_kept_rows(A: CSRView, Y: torch.Tensor) -> torch.Tensor:
    """Y (n_kept, p), the rows of a hypersparse A's product, placed at their global
    rows of a zero (n, p) or (b, n, p) output (here, not in kept_rows.py: the products
    route through it, and a reader following A stays in this module)."""
    out = Y.new_zeros((*A.shape[:-1], Y.shape[-1]))
    item_rows(out).index_copy_(0, A.rows, Y)
    return out


def on_cpu(*tensors: torch.Tensor) -> bool:
    """Does the cpu route take these tensors?"""
    return _backend(False, *tensors) is cpu


# ---------------------------------------------------------------- products (sparse_mm)
# With mean (reduce="mean") the matrix is D^-1 A, D the rows' entry counts; our CUDA
# C kernels do not take it (triton does), so the cuda route is open only without it.
def spmm(A: CSRView, B: torch.Tensor, mean: bool = False) -> torch.Tensor:
    """C = A @ B for every batch item; B is (m, p) or (b, m, p)."""
    if A.rows is not None:
        return on_kept_rows(A, spmm(A._replace(rows=None), item_rows(B), mean))
    return _backend(not mean, A.values, B, has_triton=True).spmm(A, B, mean)


def spmm_t(A: CSRView, G: torch.Tensor, mean: bool = False) -> torch.Tensor:
    """A^T @ G for every batch item."""
    if A.rows is not None:
        out = spmm_t(A._replace(rows=None), item_rows(G).index_select(0, A.rows), mean)
        return out.reshape(*A.shape[:-2], A.shape[-1], G.shape[-1])
    return _backend(not mean, A.values, G, has_triton=True).spmm_t(A, G, mean)


def sddmm(A: CSRView, G: torch.Tensor, B: torch.Tensor, mean: bool = False) -> torch.Tensor:
    """g[e] = dot(G[k][i,:], B[k][j,:]) at every stored entry e = (k, i, j) of A,
    shaped like A.col: the gradient of A @ B w.r.t. A's values (A.values unused)."""
    if A.rows is not None:
        return sddmm(A._replace(rows=None), item_rows(G).index_select(0, A.rows), item_rows(B), mean)
    return _backend(not mean, G, B, has_triton=True).sddmm(A, G, B, mean)


def sddmm_heads(A: CSRView, U: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """g[h, e] = dot(U[h][i,:], V[h][j,:]) at every stored entry e = (i, j) of the 2-D A,
    for the H heads of U (H, n, k) and V (H, m, k): (H, nnz), from A's one pattern on
    the CPU; elsewhere, sddmm of H copies of it as a batch."""
    if _backend(False, U, V) is cpu:
        return cpu.sddmm_heads(A, U, V)
    return sddmm(head_copies(A.ptr, A.col, U.shape[0], A.shape), U, V)


# --------------------------------------------------------- sparse @ sparse (sparse_mm)
# A[k] n x l times B[k] l x m, both CSRViews (B no kept-rows view); the product comes as
# (ptr, index, values): global row pointers (batch*n+1,), and columns increasing in each
# row, or with coo the COO index array of C ((2 or 3, nnz)); int64, or int32 where both
# operands' indices are (view.product_itype; the cpu route writes them so).  G, the gradient w.r.t.
# C, is a CSRView or a dense tensor.  A hypersparse A (a COO's kept rows, A.rows) is
# multiplied through those rows alone, times B's items as one block diagonal: then ptr
# holds the kept rows' pointers (len(A.rows)+1,), index is C's COO index array (coo is
# implied: such an A is COO, and so is C), and a sparse G is a view on A's kept rows
# (intake.on_rows).  No CUDA C kernel of ours: on CUDA the triton route's forward is
# PyTorch's CSR @ CSR (cuSPARSE), its backward our Triton kernels.
def spgemm(A: CSRView, B: CSRView, coo: bool = False):
    """(ptr, index, values) of C = A @ B for every batch item."""
    if A.rows is not None:
        ptr, col, values = spgemm(A._replace(rows=None), block_diagonal(B))
        row = A.rows.repeat_interleave(ptr.diff())                 # C's entries' global rows
        n, p = A.shape[-2], B.ncols
        if len(A.shape) == 3:
            k = row // n
            return ptr, torch.stack([k, row - k * n, col - k * p]), values
        return ptr, torch.stack([row, col]), values
    ptr, index, values = _backend(False, A.values, B.values, has_triton=True).spgemm(A, B, coo)
    itype = product_itype(A, B, coo, index.shape[-1])
    return ptr.to(itype), index.to(itype), values


def spgemm_grad(A: CSRView, B: CSRView, G, need_a: bool, need_b: bool):
    """(grad_A, grad_B): the gradients of A @ B w.r.t. A's and B's values at their stored
    entries (shaped like A.col and B.col), None where not needed."""
    if A.rows is not None:
        if not isinstance(G, CSRView):
            G = dense_on_rows(G, A.rows, A.shape[-2])
        ga, gb = spgemm_grad(A._replace(rows=None), block_diagonal(B), G, need_a, need_b)
        return ga, None if gb is None else gb.reshape(B.col.shape)
    return _backend(False, A.values, B.values, _grad_values(G), has_triton=True).spgemm_grad(A, B, G, need_a,
                                                                                              need_b)


def _grad_values(G) -> torch.Tensor:
    return G.values if isinstance(G, CSRView) else G


# ------------------------------------------------- amax / amin (sparse_mm's reduce)
# arg (int32, the shape of C, or (kept rows, p) for a hypersparse view): for each
# output element, the offset in its row of the entry whose product it holds, -1 for
# none (see csrc/spmm_arg.c).  No CUDA C kernels of ours: CUDA takes triton.
def spmm_arg(A: CSRView, B: torch.Tensor, is_min: bool, need_arg: bool = True):
    """(C, arg): C[k][i,t] = max (min with is_min) over the entries e of row i of
    A.val[e] * B[k][A.col[e],t] (0 for an empty row), with PyTorch's ties; arg None
    unless need_arg."""
    if A.rows is not None:
        C, arg = spmm_arg(A._replace(rows=None), item_rows(B), is_min, need_arg)
        return on_kept_rows(A, C), arg
    return _backend(False, A.values, B, has_triton=True).spmm_arg(A, B, is_min, need_arg)


def spmm_t_arg(A: CSRView, arg: torch.Tensor, G: torch.Tensor) -> torch.Tensor:
    """out[k][j,t] = sum of A.val[e] * G[k][i,t] over the rows i whose arg entry e of
    column t lies in column j: the gradient of spmm_arg w.r.t. B."""
    if A.rows is not None:
        out = spmm_t_arg(A._replace(rows=None), arg, item_rows(G).index_select(0, A.rows))
        return out.reshape(*A.shape[:-2], A.shape[-1], G.shape[-1])
    return _backend(False, A.values, arg, G, has_triton=True).spmm_t_arg(A, arg, G)


def sddmm_arg(A: CSRView, arg: torch.Tensor, G: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """g[e] = sum of G[k][i,t] * B[k][A.col[e],t] over the columns t whose arg is e,
    shaped like A.col: the gradient of spmm_arg w.r.t. A's values."""
    if A.rows is not None:
        return sddmm_arg(A._replace(rows=None), arg, item_rows(G).index_select(0, A.rows), item_rows(B))
    return _backend(False, arg, G, B, has_triton=True).sddmm_arg(A, arg, G, B)


def gather_arg(A: CSRView, arg: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
    """out[k][i,t] = A.val[e] * X[k][A.col[e],t] at each output element's arg entry e
    (0 where none): spmm_arg's output with arg fixed, for second derivatives only:
    PyTorch's ops on every device."""
    if A.rows is not None:
        return on_kept_rows(A, torch_ops.gather_arg(A._replace(rows=None), arg, item_rows(X)))
    return torch_ops.gather_arg(A, arg, X)


def spmm_reduce(A: CSRView, B: torch.Tensor, reduce: str) -> torch.Tensor:
    """A @ B with reduce "sum", "mean", "amax" or "amin" (sparse_mm's), where no graph is
    recorded: amax and amin keep no arg."""
    if reduce in ("sum", "mean"):
        return spmm(A, B, reduce == "mean")
    return spmm_arg(A, B, reduce == "amin", need_arg=False)[0]


def spmm_arrays(ptr: torch.Tensor, col: torch.Tensor, values: torch.Tensor, shape, B: torch.Tensor,
                reduce: str, contract: Callable[[], object]):
    """spmm_reduce of CSR arrays of an A of shape `shape`, taken as they are (any strides;
    the kernels check their structure), where no graph is recorded: a sum on the cpu
    route straight to the kernel, without building a view.  contract: see
    spmm_tensor."""
    if reduce != "sum" or _backend(True, values, B) is not cpu:
        contract()
        return spmm_reduce(view_of(ptr, col, values, None, shape), B, reduce)
    try:
        return cpu.spmm_arrays(kernel_array(ptr), kernel_array(col), kernel_array(values),
                               shape[0] if len(shape) == 3 else 1, shape[-2], shape[-1], B)
    except Exception as failure:
        _failed(contract, failure)


def spmm_tensor(A: torch.Tensor, B: torch.Tensor, shape, reduce: str, contract: Callable[[], object]) -> torch.Tensor:
    """spmm_reduce of a torch sparse A of shape `shape` where no graph is recorded: a sum
    on the cpu route on A's own arrays (a COO one's row pointers built in the kernel's
    call).  contract: the op's check of A and B (a function of _core.validate, its
    arguments bound), raising its published errors; the caller has checked what they
    are and their ranks (validate.check_operands).  It runs first on a route of
    PyTorch's ops; on the cpu route, whose C glue checks every array it is given
    (dtypes, sizes, devices), only after a failure (_failed), so that a call that
    succeeds pays for none of its property reads (0.2 to 0.5 us each).  The other
    reductions check it first, and their op chooses the route."""
    if reduce != "sum" or _backend(True, A, B) is not cpu:      # the route, chosen once for the call
        contract()
        return spmm_reduce(as_csr(A, compress_rows=True), B, reduce)
    try:
        if A.layout is torch.sparse_csr:    # index arrays: never requiring grad nor lazily negated
            return cpu.spmm_arrays(A.crow_indices().contiguous(), A.col_indices().contiguous(),
                                   kernel_array(A.values()), shape[0] if len(shape) == 3 else 1, shape[-2],
                                   shape[-1], B)
        C = cpu.spmm_coo(A._indices(), A._values(), shape, B)
        return spmm(as_csr(A, compress_rows=True), B) if C is None else C
    except Exception as failure:
        _failed(contract, failure)


def _failed(contract: Callable[[], object], failure: Exception) -> NoReturn:
    """After a failure on the cpu route: the contract's error where the operands break
    it (raised on its own, not as a consequence of the failure), else the failure."""
    try:
        contract()
    except Exception as broken:
        raise broken from None
    raise failure


def csr_transpose(A: CSRView) -> torch.Tensor:
    """A^T of a 2D view as a torch CSR tensor (never dense)."""
    if _backend(False, A.values) is cpu:
        tptr, trow, tperm = cpu.transpose_pattern(A)
        return csr_tensor(tptr, trow, A.values[tperm.long()], (A.ncols, A.nrows))
    return A.to_torch().t().to_sparse_csr()


# ------------------------------------------------------------------------- solves
def trisolve(A: CSRView, B: torch.Tensor, upper: bool, unitriangular: bool, transpose: bool) -> torch.Tensor:
    """X = A^{-1} B (or A^{-T} B with transpose) for every batch item of a triangular A;
    B is (n, p) or (b, n, p).  Returns a new tensor."""
    return _backend(False, A.values, B, has_triton=True).trisolve(A, B, upper, unitriangular, transpose)


def trisolve_arrays(ptr: torch.Tensor, col: torch.Tensor, values: torch.Tensor, shape, B: torch.Tensor,
                    upper: bool, unitriangular: bool, transpose: bool) -> torch.Tensor:
    """trisolve of CSR arrays of an A of shape `shape`, taken as they are, where no
    graph is recorded: on the cpu route straight to the kernel."""
    if _backend(False, values, B, has_triton=True) is cpu:
        return cpu.trisolve_arrays(kernel_array(ptr), kernel_array(col), kernel_array(values),
                                   shape[0] if len(shape) == 3 else 1, shape[-1], B, upper, unitriangular,
                                   transpose)
    return trisolve(view_of(ptr, col, values, None, shape), B, upper, unitriangular, transpose)


def krylov_view(A, B: torch.Tensor, *dense):
    """The CSR view of A when the Krylov kernels (cg, minres: cpu only) can solve
    A X = B: A a 2D sparse COO/CSR tensor (n, n) of B's dtype (float32/float64), B
    (n, k), both on the cpu route, and no gradient to record through B or the other
    `dense` inputs (an initial guess); else None."""
    if not (isinstance(A, torch.Tensor) and A.layout in (torch.sparse_coo, torch.sparse_csr) and A.dim() == 2
            and A.dense_dim() == 0 and A.dtype in (torch.float32, torch.float64) and B.dtype == A.dtype
            and B.dim() == 2 and A.shape[0] == A.shape[1] == B.shape[0] and on_cpu(A, B)):
        return None
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (B,) + dense):
        return None
    return as_csr(A.detach())


# ------------------------------------------- grouped products (gather_mm, segment_mm)
def group_rows(idx: torch.Tensor, R: int):
    """(off (R+1,), perm (n,)), int64: the rows i grouped by relation idx[i] in [0, R),
    a stable sort (group r is perm[off[r]:off[r+1]], in increasing i)."""
    return _backend(False, idx).group_rows(idx, R)


def grouped_mm(off: torch.Tensor, perm, a: torch.Tensor, M: torch.Tensor) -> torch.Tensor:
    """out[i] = a[i] @ M[r] for the rows i of group r (see group_rows; perm None: group r
    is the rows off[r]..off[r+1]-1); a (n, K), M (R, K, P), out (n, P)."""
    return _backend(False, off, a, M).grouped_mm(off, perm, a, M)


def grouped_mm_tn(off: torch.Tensor, perm, a: torch.Tensor, G: torch.Tensor) -> torch.Tensor:
    """out[r] = sum over the rows i of group r of a[i]^T G[i]; a (n, K), G (n, P), out (R, K, P)."""
    return _backend(False, off, a, G).grouped_mm_tn(off, perm, a, G)


# ------------------------------------------- orderings (utils.reverse_cuthill_mckee)
def rcm(ptr: torch.Tensor, col: torch.Tensor, n: int, symmetric: bool) -> torch.Tensor:
    """The reverse Cuthill-McKee ordering (n,) int64 of the n x n pattern (ptr, col), on
    its device: computed by the C kernel on the CPU whatever the device (a breadth-first
    search, sequential)."""
    return cpu.rcm(ptr.cpu(), col.cpu(), n, symmetric).to(ptr.device)


# ------------------------------------------------- log-sum-exp (sparse_logsumexp)
# The matrix reduced is the view's items, or with `transposed` their transposes
# (a CSC tensor is read as the CSR view of its transpose); "rows" and "cols" are
# that matrix's.  mode "rows" gives (b, n), "cols" (b, m), "all" (b,), "both"
# (2, b, max(n, m)) with [0] the columns and [1] the rows, -inf padded.
LSE_MODES = ("rows", "cols", "all", "both")


def check_lse_mode(mode: str) -> None:
    if mode not in LSE_MODES:
        raise ValueError(f"unknown log-sum-exp mode {mode!r}; expected one of {', '.join(map(repr, LSE_MODES))}")


def lse_shape(shape, mode: str, transposed: bool):
    """The output shape of lse for a view of shape `shape` ((n, m) or (b, n, m))."""
    check_lse_mode(mode)
    b = shape[0] if len(shape) == 3 else 1
    n, m = (shape[-1], shape[-2]) if transposed else (shape[-2], shape[-1])
    return {"rows": (b, n), "cols": (b, m), "all": (b,), "both": (2, b, torch.sym_max(n, m))}[mode]


def lse(A: CSRView, mode: str, include_zeros: bool, transposed: bool) -> torch.Tensor:
    """Log-sum-exp of the stored values (absent entries as zeros with include_zeros,
    else left out) by rows, columns, both or whole items; see lse_shape."""
    backend = _backend(False, A.values)
    shape = lse_shape(A.shape, mode, transposed)
    if mode == "both":
        out = torch.full(shape, float("-inf"), dtype=A.values.dtype, device=A.values.device)
        rows, cols = out[1], out[0]
    else:
        out = torch.empty(shape, dtype=A.values.dtype, device=A.values.device)
        rows, cols = (out, None) if mode == "rows" else (None, out) if mode == "cols" else (None, None)
    if transposed:
        rows, cols = cols, rows
    if mode == "all":
        backend.lse_items(A, include_zeros, out)
    if rows is not None:
        backend.lse_groups(A, include_zeros, rows, by_rows=True)
    if cols is not None:
        backend.lse_groups(A, include_zeros, cols, by_rows=False)
    return out


def lse_grad(A: CSRView, out: torch.Tensor, G: torch.Tensor, mode: str, transposed: bool) -> torch.Tensor:
    """d(sum G * out)/d A.values for out = lse(A, mode, .., transposed): each value's
    softmax weight exp(v - lse) in its group times the group's gradient (summed over
    both groups for "both"); shaped like A.values."""
    backend = _backend(False, A.values)
    if mode == "all":          # every row of an item carries the item's lse and gradient
        return backend.lse_grad(A, (out[:, None].expand(-1, A.nrows), G[:, None].expand(-1, A.nrows)), None)
    n, m = (A.ncols, A.nrows) if transposed else (A.nrows, A.ncols)
    if mode == "both":
        rows, cols = (out[1, :, :n], G[1, :, :n]), (out[0, :, :m], G[0, :, :m])
    else:
        rows, cols = ((out, G), None) if mode == "rows" else (None, (out, G))
    return backend.lse_grad(A, *((cols, rows) if transposed else (rows, cols)))


def lse_wsum(A: CSRView, out: torch.Tensor, u: torch.Tensor, mode: str) -> torch.Tensor:
    """s[group] = sum over the group's stored values v of u * exp(v - out[group]), shaped
    like out = lse(A, mode, .., False) (0 in the padding of "both"): the derivative of
    lse_grad w.r.t. its G, for second derivatives only: PyTorch's ops on every device."""
    return torch_ops.lse_wsum(A, out, u, mode)


# ------------------------------------- softmax (sparse_softmax, sparse_log_softmax)
# Over the stored entries of each row (by_rows) or each column of every item, absent
# entries left out; value arrays in and out are shaped like A.values, in A's entry
# order.  The cpu route takes columns through the transpose's pattern; triton has rows only.
def softmax(A: CSRView, by_rows: bool, log: bool) -> torch.Tensor:
    """y[e] = exp(v[e] - L[group of e]) (log: v[e] - L[group of e]), L the group's
    log-sum-exp of its stored values v = A.values."""
    return _backend(False, A.values, has_triton=by_rows).softmax(A, by_rows, log)


def softmax_tensor(A: torch.Tensor, by_rows: bool, log: bool):
    """(view, y): as_csr(A, compress_rows=True) of a torch sparse A (detached) and y =
    softmax(view, by_rows, log); on the cpu route, a COO A's rows in one C pass over its
    indices that checks them, builds the view's row pointers and takes the softmax."""
    if by_rows and A.layout is torch.sparse_coo and _backend(False, A, has_triton=True) is cpu:
        done = cpu.softmax_coo(A, log)
        if done is not None:
            return done
    view = as_csr(A, compress_rows=True)
    return view, softmax(view, by_rows, log)


def softmax_grad(A: CSRView, y: torch.Tensor, g: torch.Tensor, by_rows: bool, log: bool) -> torch.Tensor:
    """d(sum g * y)/d A.values for y = softmax(A, by_rows, log): y * (g - S(g * y)), or
    for log g - exp(y) * S(g), S(x)[e] the sum of x over e's group (A.values unused)."""
    return _backend(False, y, g, has_triton=by_rows).softmax_grad(A, y, g, by_rows, log)


def group_sum(A: CSRView, x: torch.Tensor, by_rows: bool) -> torch.Tensor:
    """S(x)[e] = the sum of x over the stored entries of e's group, shaped like x: for
    second derivatives of softmax only, PyTorch's ops on every device."""
    return torch_ops.group_sum(A, x, by_rows)


# ------------------------------------------------------ graph attention (graph_attention)
# A 2-D view (n, m): row i a target node, its columns j the sources it attends to; x (m,
# H, F), s (m, H), d (n, H), e (nnz, H) a score per entry or None, contiguous; dropout:
# (entry e, head h) is dropped when its draw (gat_dropped) is below drop (of 2^24), seed
# an int64 tensor of one element (None without dropout), scale a kept entry's factor;
# slope LeakyReLU's.  CUDA: triton.
def gat(A: CSRView, x: torch.Tensor, s: torch.Tensor, d: torch.Tensor, e, seed, drop: int, scale: float,
        slope: float):
    """(out, alpha): alpha[q,h] = softmax over row i's entries of LeakyReLU(s[j,h] + d[i,h]
    (+ e[q,h])), out[i,h,:] = sum over row i of alpha * (0 if dropped else scale) * x[j,h,:];
    out (n, H, F), alpha (nnz, H), before dropout."""
    return _backend(False, x, s, d, has_triton=True).gat(A, x, s, d, e, seed, drop, scale, slope)


def gat_grad(A: CSRView, x: torch.Tensor, s: torch.Tensor, d: torch.Tensor, e, seed, drop: int, scale: float,
             slope: float, alpha: torch.Tensor, G: torch.Tensor, galpha):
    """(gx, gs, gd, ge): the gradients w.r.t. x, s, d and the entry scores e (the scores'
    gradient before LeakyReLU, (nnz, H), made whether or not e is given) of gat's out
    (upstream G) and alpha (upstream galpha, or None)."""
    return _backend(False, x, G, alpha, has_triton=True).gat_grad(A, x, s, d, e, seed, drop, scale, slope, alpha,
                                                                 G, galpha)


def gat_dropped(seed: torch.Tensor, nnz: int, heads: int, drop: int) -> torch.Tensor:
    """bool (nnz, heads): which attention weights gat's dropout drops (the kernels' draw,
    csrc/tsgu_gat.h), for return_attention: PyTorch's ops on every device."""
    return torch_ops.gat_dropped(seed, nnz, heads, drop)


# --------------------------------------------------- GATv2 attention (graph_attention_v2)
# A 2-D view (n, m); xl (m, H, C) the source rows (scores and messages), xr (n, H, C) the
# target rows, att (H, C), et (nnz, H, C) an edge term inside LeakyReLU or None, b (nnz,
# H) a score added after the sum or None, contiguous; dropout as gat's.  CUDA: triton.
def gatv2(A: CSRView, xl: torch.Tensor, xr: torch.Tensor, att: torch.Tensor, et, b, seed, drop: int, scale: float,
          slope: float):
    """(out, alpha): alpha[q,h] = softmax over row i's entries of sum_c att[h,c]
    LeakyReLU(xl[j,h,c] + xr[i,h,c] (+ et[q,h,c])) (+ b[q,h]), out[i,h,:] = sum over row i
    of alpha * (0 if dropped else scale) * xl[j,h,:]; out (n, H, C), alpha (nnz, H), before dropout."""
    return _backend(False, xl, xr, att, has_triton=True).gatv2(A, xl, xr, att, et, b, seed, drop, scale, slope)


def gatv2_grad(A: CSRView, xl: torch.Tensor, xr: torch.Tensor, att: torch.Tensor, et, seed, drop: int,
               scale: float, slope: float, alpha: torch.Tensor, G: torch.Tensor, galpha):
    """(gxl, gxr, gatt, get, gb): the gradients w.r.t. xl, xr, att, et (None without it) and
    b (the scores' gradient, (nnz, H), made whether or not b is given) of gatv2's out
    (upstream G) and alpha (upstream galpha, or None)."""
    return _backend(False, xl, G, alpha, has_triton=True).gatv2_grad(A, xl, xr, att, et, seed, drop, scale, slope,
                                                                    alpha, G, galpha)
