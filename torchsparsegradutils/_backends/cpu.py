"""The C kernels (csrc/), one wrapper per entry point of torchsparsegradutils._C that
computes (the structure checks are the intake's, _core/intake.py).

Every wrapper takes CPU tensors; the route to it is chosen in _backends/__init__.py.
Outputs are allocated here and written by C; the thread count is PyTorch's.
"""
from typing import Optional, Tuple

import torch

from .._core.native import _C
from .._core.structures import unit_stride_rows
from .._core.view import (HYPERSPARSE_ROWS_PER_ENTRY, CSRView, dense_operand, hypersparse, kernel_array, plain,
                          product_itype)


# ---------------------------------------------------------------- products (sparse_mm)
def spmm(A: CSRView, B: torch.Tensor, mean: bool = False) -> torch.Tensor:
    """C = A @ B for every batch item; B is (m, p) or (b, m, p).  With mean, each row
    of C divided by the row's number of entries (reduce="mean")."""
    return spmm_arrays(A.ptr, A.col, plain(A.values), A.batch, A.nrows, A.ncols, B, mean)


def spmm_arrays(ptr: torch.Tensor, col: torch.Tensor, values: torch.Tensor, batch: int, n: int, m: int,
                B: torch.Tensor, mean: bool = False) -> torch.Tensor:
    """spmm of arrays as the kernels read them (kernel_array's): the C kernel, called
    with nothing else on the way (it runs on every call)."""
    B = dense_operand(B)
    C = _spmm_out(batch, n, B)
    _C.spmm(ptr, col, values, batch, n, m, B, C, torch.get_num_threads(), mean)
    return C


def spmm_coo(indices: torch.Tensor, values: torch.Tensor, shape, B: torch.Tensor) -> Optional[torch.Tensor]:
    """spmm of a COO A from its own index and values arrays (A._indices(), A._values()):
    its row pointers are built in C on the way, in the same call.  None where that does
    not apply (entries not sorted and unique, or A hypersparse; see spmm_coo in
    csrc/glue_mm.c): then take A's view (_core.intake.as_csr).  A sparse tensor's own
    arrays never require grad nor carry a lazy negation (its constructor resolves one),
    so they need no `plain`: only contiguous values (it runs on every call)."""
    B = dense_operand(B)
    C = _spmm_out(shape[0] if len(shape) == 3 else 1, shape[-2], B)
    if _C.spmm_coo(indices, values.contiguous(), shape, B, C, HYPERSPARSE_ROWS_PER_ENTRY,
                   torch.get_num_threads()):
        return C
    return None


def _spmm_out(batch: int, n: int, B: torch.Tensor) -> torch.Tensor:
    """The output of spmm, (batch, n, p) or (n, p) as B is 3D or 2D: B.new_empty with
    the sizes unpacked, the cheapest allocation from Python (0.2 us less than
    torch.empty(sizes, dtype=..))."""
    p = B.shape[-1]
    return B.new_empty(batch, n, p) if B.dim() == 3 else B.new_empty(n, p)


def spmm_t(A: CSRView, G: torch.Tensor, mean: bool = False) -> torch.Tensor:
    """A^T @ G for every batch item, without atomics or a transpose: each thread owns
    a range of A's columns (see csrc/spmm_t.c).  With mean, (D^-1 A)^T @ G, D the
    rows' entry counts."""
    out = _spmm_t_out(A, G)
    _C.spmm_t(A.ptr, A.col, plain(A.values), A.batch, A.nrows, A.ncols, dense_operand(G), out,
              torch.get_num_threads(), mean)
    return out


def _spmm_t_out(A: CSRView, G: torch.Tensor) -> torch.Tensor:
    """The output of A^T G: (b, m, p) or (m, p) as G is 3D or 2D."""
    p = G.shape[-1]
    return torch.empty((A.batch, A.ncols, p) if G.dim() == 3 else (A.ncols, p), dtype=G.dtype)


def sddmm(A: CSRView, G: torch.Tensor, B: torch.Tensor, mean: bool = False) -> torch.Tensor:
    """g[e] = dot(G[k][i,:], B[k][j,:]) at every stored entry e = (k, i, j) of A,
    shaped like A.col (A.values unused); with mean, divided by row i's entry count."""
    g = torch.empty(A.col.shape, dtype=G.dtype)
    _C.sddmm(A.ptr, A.col, A.batch, A.nrows, A.ncols, dense_operand(G), dense_operand(B), g,
             torch.get_num_threads(), mean)
    return g


def sddmm_heads(A: CSRView, U: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """g[h, e] = dot(U[h][i,:], V[h][j,:]) at every stored entry e = (i, j) of the 2-D A,
    (H, nnz): sddmm head by head on A's one pattern (each head's pass keeps its own V
    rows in cache, where all heads at once would gather from all of V)."""
    U, V = dense_operand(U), dense_operand(V)
    g = torch.empty((U.shape[0], A.col.shape[0]), dtype=U.dtype)
    for h in range(U.shape[0]):
        _C.sddmm(A.ptr, A.col, 1, A.nrows, A.ncols, U[h], V[h], g[h], torch.get_num_threads())
    return g


# ------------------------------------------------- amax / amin (sparse_mm's reduce)
def spmm_arg(A: CSRView, B: torch.Tensor, is_min: bool, need_arg: bool):
    """(C, arg): C[k][i,t] the max (min with is_min) over the entries e of row i of
    A.val[e] * B[k][A.col[e],t]; arg int32, C's shape, the offset of that e in its
    row (-1 for none), or None unless need_arg (see csrc/spmm_arg.c)."""
    B = dense_operand(B)
    C = _spmm_out(A.batch, A.nrows, B)
    arg = torch.empty(C.shape, dtype=torch.int32) if need_arg else None
    _C.spmm_arg(A.ptr, A.col, plain(A.values), A.batch, A.nrows, A.ncols, B, C, arg, is_min,
                torch.get_num_threads())
    return C, arg


def spmm_t_arg(A: CSRView, arg: torch.Tensor, G: torch.Tensor) -> torch.Tensor:
    """out[k][j,t] = sum of A.val[e] * G[k][i,t] over the rows i whose arg entry e of
    column t lies in column j (grad_B of spmm_arg; csrc/spmm_t_arg.c)."""
    out = _spmm_t_out(A, G)
    _C.spmm_t_arg(A.ptr, A.col, plain(A.values), A.batch, A.nrows, A.ncols, arg.contiguous(), dense_operand(G),
                  out, torch.get_num_threads())
    return out


def sddmm_arg(A: CSRView, arg: torch.Tensor, G: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """g[e] = sum of G[k][i,t] * B[k][A.col[e],t] over the columns t whose arg is e
    (grad of spmm_arg w.r.t. A's values, shaped like A.col; csrc/sddmm_arg.c)."""
    g = torch.empty(A.col.shape, dtype=G.dtype)
    _C.sddmm_arg(A.ptr, A.col, A.batch, A.nrows, A.ncols, arg.contiguous(), dense_operand(G),
                 dense_operand(B), g, torch.get_num_threads())
    return g


def transpose_pattern(A: CSRView):
    """(tptr, trow, tperm) of every item's transpose (an explicit A^T for the solves;
    products with A^T use spmm_t instead): tptr (b*m+1,) global row pointers of A^T,
    trow the row of A each entry came from, and tperm its position in A's entry
    arrays (A^T's values are A.values.flatten()[tperm])."""
    nnz = A.col.numel()
    itype = A.ptr.dtype
    tptr = torch.empty(A.batch * A.ncols + 1, dtype=itype)
    trow = torch.empty(nnz, dtype=itype)
    tperm = torch.empty(nnz, dtype=itype)
    _C.csr_transpose(A.ptr, A.col, A.batch, A.nrows, A.ncols, tptr, trow, tperm, torch.get_num_threads())
    return tptr, trow, tperm


# ------------------------------------------------ outputs on blocks kept between calls
# DLPack's (code, bits) of each dtype an output on a kept block may have
_DLPACK_TYPES = {torch.int32: (0, 32), torch.int64: (0, 64), torch.float16: (2, 16), torch.float32: (2, 32),
                 torch.float64: (2, 64), torch.bfloat16: (4, 16)}
KEPT_MIN_BYTES = _C.kept_min_bytes      # csrc/tsgu_kept_blocks.h


def kept_empty(shape: Tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """torch.empty(shape, dtype=dtype), on a block kept for reuse (csrc/kept_blocks.c)
    where it takes KEPT_MIN_BYTES or more: a block freed by an earlier output comes back
    already paged in, where a fresh one of tens of MiB costs a page fault per 4 KiB on
    its first write, in a process that has allocated before as long as the product itself.
    The tensor is PyTorch's like any other (through DLPack), but its storage cannot be resized."""
    numel = 1
    for size in shape:
        numel *= size
    if numel * dtype.itemsize < KEPT_MIN_BYTES:
        return torch.empty(shape, dtype=dtype)
    return torch.utils.dlpack.from_dlpack(_C.kept_empty(shape, *_DLPACK_TYPES[dtype]))


def release_kept() -> int:
    """Free what the C side keeps between calls (the kept blocks and sparse @ sparse's
    workspace); the bytes freed."""
    return _C.release_kept()


# ------------------------------------------------------------- sparse @ sparse (sparse_mm)
# A[k] is n x l and B[k] l x m; the product's pattern comes as global row pointers
# (batch*n+1,) and int64 columns, increasing in each row.  The kernels take one index
# dtype for all their sparse operands: int32 ones are widened where the dtypes differ.
def spgemm(A: CSRView, B: CSRView, coo: bool = False):
    """(ptr, index, values) of C = A @ B for every batch item (csrc/spgemm.c: the product
    computed once, then written into the outputs allocated here once its size is known,
    index and values on kept blocks: kept_empty);
    index: the columns, or with coo C's COO index array ((2 or 3, nnz): (item,) row,
    column), written by the kernel with the columns.  The pointers and columns of int32
    operands are int32 (product_itype)."""
    A, B = _one_index_dtype(A, B)
    ptr = torch.empty(A.batch * A.nrows + 1, dtype=torch.int64)

    def outputs(nnz):
        itype = product_itype(A, B, coo, nnz)
        return kept_empty((len(A.shape), nnz) if coo else (nnz,), itype), kept_empty((nnz,), A.values.dtype)

    index, values = _C.spgemm(A.ptr, A.col, plain(A.values), B.ptr, B.col, plain(B.values), A.batch, A.nrows,
                              A.ncols, B.ncols, ptr, outputs, torch.get_num_threads())
    return ptr.to(index.dtype), index, values


def spgemm_grad(A: CSRView, B: CSRView, G, need_a: bool, need_b: bool):
    """(grad_A, grad_B): the gradients of A @ B w.r.t. A's and B's values, shaped like
    A.col and B.col (None where not needed), for G = dL/dC a CSRView (C's shape, any
    pattern) or a dense tensor; both from one walk over the products (csrc/spgemm_grad.c)."""
    A, B, G = _one_index_dtype(A, B, G)
    ga = kept_empty(tuple(A.col.shape), A.values.dtype) if need_a else None
    gb = kept_empty(tuple(B.col.shape), A.values.dtype) if need_b else None
    _C.spgemm_grad(A.ptr, A.col, plain(A.values), B.ptr, B.col, plain(B.values), A.batch, A.nrows, A.ncols,
                   B.ncols, *_grad_arrays(G), ga, gb, torch.get_num_threads())
    return ga, gb


def _grad_arrays(G):
    """The upstream gradient as the kernels take it: (ptr, col, values) of a CSRView,
    or (dense, None, None)."""
    if isinstance(G, CSRView):
        return G.ptr, G.col, plain(G.values)
    return dense_operand(G), None, None


def _one_index_dtype(*operands):
    """The operands (CSRViews, or a dense G) with one index dtype: int64 unless all are int32."""
    views = [X for X in operands if isinstance(X, CSRView)]
    if all(X.ptr.dtype == views[0].ptr.dtype for X in views):
        return operands
    return tuple(X._replace(ptr=X.ptr.long(), col=X.col.long()) if isinstance(X, CSRView) else X
                 for X in operands)


# ------------------------------------------------------------------------- solves
def trisolve(A: CSRView, B: torch.Tensor, upper: bool, unitriangular: bool, transpose: bool) -> torch.Tensor:
    """X = A^{-1} B (or A^{-T} B with transpose) for every batch item of a triangular A;
    B is (n, p) or (b, n, p).  Returns a new tensor."""
    return trisolve_arrays(A.ptr, A.col, plain(A.values), A.batch, A.nrows, B, upper, unitriangular, transpose)


def trisolve_arrays(ptr: torch.Tensor, col: torch.Tensor, values: torch.Tensor, batch: int, n: int,
                    B: torch.Tensor, upper: bool, unitriangular: bool, transpose: bool) -> torch.Tensor:
    """trisolve of arrays as the kernels read them (kernel_array's), where no graph is
    recorded: the C kernel with nothing else on the way."""
    X = B.clone(memory_format=torch.contiguous_format)     # a clone applies B's negative bit
    _C.trisolve(ptr, col, values, batch, n, X, upper, unitriangular, transpose, torch.get_num_threads())
    return X


def _krylov_outputs(B: torch.Tensor):
    """(B as the kernels read it, X, residuals) for an (n, k) B; residuals float64 (2, k):
    the recurrence's relative residuals, then the recomputed ones"""
    return (plain(B).contiguous(), torch.empty(B.shape, dtype=B.dtype),
            torch.empty(2, B.shape[1], dtype=torch.float64))


def cg(A: CSRView, B: torch.Tensor, X0: Optional[torch.Tensor], tol: float, stop: float, tiny: float, mean: bool,
       max_iter: int, min_iter: int):
    """utils.linear_cg's loop for a sparse A without preconditioner or probes (csrc/cg.c).
    Returns (X, rel, true_rel, (iterations, matvecs, recursive_stop, stopped_before,
    breakdown)); rel and true_rel float64 (k,), breakdown 0 or the broken inner product
    (1: r^T r at the start, 2: p^T A p, 3: r^T r)."""
    B, X, res = _krylov_outputs(B)
    if X0 is not None:
        X.copy_(X0.detach())                     # the kernel starts from it, in place
    info = _C.cg(A.ptr, A.col, plain(A.values), A.nrows, B, X, res, X0 is not None, tol, stop, tiny, mean,
                 max_iter, min_iter, torch.get_num_threads())
    return X, res[0], res[1], info


def minres(A: CSRView, B: torch.Tensor, tol: float, eps: float, scale: float, shift: float, max_iter: int):
    """utils.minres's loop for a sparse A without preconditioner (csrc/minres.c), solving
    (scale A + shift I) X = B.  Returns (X, rel, true_rel, iterations)."""
    B, X, res = _krylov_outputs(B)
    info = _C.minres(A.ptr, A.col, plain(A.values), A.nrows, B, X, res, tol, eps, scale, shift, max_iter,
                     torch.get_num_threads())
    return X, res[0], res[1], info[0]


# ------------------------------------------- grouped products (gather_mm, segment_mm)
def group_rows(idx: torch.Tensor, R: int):
    """(off (R+1,), perm (n,)), int64: the rows i grouped by relation idx[i] in [0, R),
    a stable sort (group r is perm[off[r]:off[r+1]], in increasing i)."""
    off = torch.empty(R + 1, dtype=torch.int64)
    perm = torch.empty(idx.shape[0], dtype=torch.int64)
    _C.group_rows(idx.contiguous(), R, off, perm)
    return off, perm


def grouped_mm(off: torch.Tensor, perm, a: torch.Tensor, M: torch.Tensor) -> torch.Tensor:
    """out[i] = a[i] @ M[r] for the rows i of group r; a (n, K), M (R, K, P), out (n, P)."""
    out = torch.empty(a.shape[0], M.shape[2], dtype=a.dtype)
    _C.grouped_mm(off, perm, dense_operand(a), dense_operand(M), out, torch.get_num_threads())
    return out


def grouped_mm_tn(off: torch.Tensor, perm, a: torch.Tensor, G: torch.Tensor) -> torch.Tensor:
    """out[r] = sum over the rows i of group r of a[i]^T G[i]; a (n, K), G (n, P), out (R, K, P)."""
    out = torch.empty(off.shape[0] - 1, a.shape[1], G.shape[1], dtype=a.dtype)
    _C.grouped_mm_tn(off, perm, dense_operand(a), dense_operand(G), out, torch.get_num_threads())
    return out


# ------------------------------------------- orderings (utils.reverse_cuthill_mckee)
def rcm(ptr: torch.Tensor, col: torch.Tensor, n: int, symmetric: bool) -> torch.Tensor:
    """As _backends.rcm, for CPU arrays (checked by the kernel first)."""
    perm = torch.empty(n, dtype=torch.int64)
    _C.rcm(plain(ptr).contiguous(), plain(col).contiguous(), n, symmetric, perm)
    return perm


# ------------------------------------------------- log-sum-exp (sparse_logsumexp)
def lse_groups(view: CSRView, include_zeros: bool, out: torch.Tensor, by_rows: bool) -> None:
    """out[k, g] = lse of row (by_rows) or column g of item k (csrc/lse_rows.c,
    lse_cols.c); out is (b, w) with w at least the group count, written in place."""
    args = (view.ptr, view.col, view.values, view.batch, view.nrows, view.ncols, include_zeros, out)
    if by_rows:
        _C.lse_rows(*args, None, torch.get_num_threads())
    else:
        _C.lse_cols(*args, torch.get_num_threads())


def lse_items(view: CSRView, include_zeros: bool, out: torch.Tensor) -> None:
    """out[k] = lse of the whole item k: of its row results, folded in row order."""
    rows = torch.empty(view.batch, view.nrows, dtype=out.dtype)
    _C.lse_rows(view.ptr, view.col, view.values, view.batch, view.nrows, view.ncols, include_zeros,
                rows, out.view(1, -1), torch.get_num_threads())


def lse_grad(view: CSRView, rows, cols) -> torch.Tensor:
    """d(sum Gr * row lse + Gc * col lse)/d values of the view, shaped like its values;
    rows and cols are (lse, grad) pairs of (b, n) and (b, m) tensors, or None."""
    g = torch.empty(1, view.values.numel(), dtype=view.values.dtype)
    arrays = [plain(t).contiguous() if pair is not None else None
              for pair in (rows, cols) for t in (pair or (None, None))]
    _C.lse_grad(view.ptr, view.col, view.values, view.batch, view.nrows, view.ncols, *arrays, g,
                torch.get_num_threads())
    return g.reshape(view.values.shape)


# ------------------------------------- softmax (sparse_softmax, sparse_log_softmax)
def softmax(view: CSRView, by_rows: bool, log: bool) -> torch.Tensor:
    """Softmax (log-softmax with log) over each row's (by_rows, csrc/softmax_rows.c) or
    column's (csrc/softmax_cols.c) stored values, shaped like view.values.  Columns with
    no transpose: each thread owns a range of them and streams the entries in row order
    (each result from the column's max and sum, not exp(v - column lse): the lse rounded
    to the values' dtype loses their low bits at large magnitudes, and a column holding
    +inf would not be NaN throughout)."""
    heads = _heads(view.col, view.values)
    if not by_rows:
        y = torch.empty(view.values.shape, dtype=view.values.dtype)
        _C.softmax_cols(view.ptr, view.col, plain(view.values).reshape(-1, heads), view.batch, view.nrows,
                        view.ncols, heads, log, y.view(-1, heads), torch.get_num_threads())
        return y
    return _softmax_rows(view, heads, log, view.coo_indices is not None)


def softmax_coo(A: torch.Tensor, log: bool) -> Optional[Tuple[CSRView, torch.Tensor]]:
    """(view, y): A's view, as _core.intake.as_csr(A, compress_rows=True) makes it, and
    the softmax (log-softmax with log) of each row of a COO A, in one pass over A's
    indices that checks them and writes the view's row pointers (csrc/softmax_coo.c).
    None where that does not apply (A hypersparse, or its entries not sorted and unique
    and A not flagged coalesced): then take A's view."""
    sizes = tuple(A.shape)
    batch = sizes[0] if len(sizes) == 3 else 1
    indices = unit_stride_rows(plain(A._indices()))
    if hypersparse(batch * sizes[-2], indices.shape[1]):
        return None
    val = kernel_array(A._values())
    ptr = torch.empty(batch * sizes[-2] + 1, dtype=torch.int64)
    y = torch.empty(val.shape, dtype=val.dtype)
    if not _C.softmax_coo(indices, val.view(-1, 1), sizes, A.is_coalesced(), log, ptr, y.view(-1, 1),
                          torch.get_num_threads()):
        return None
    return CSRView(ptr, indices[-1], val, batch, sizes[-2], sizes[-1], A.shape, indices), y


def _softmax_rows(view: CSRView, heads: int, log: bool, cols_checked: bool) -> torch.Tensor:
    """The kernel over rows; cols_checked: the columns need no check (a COO tensor's,
    checked as its view was made)."""
    y = torch.empty(view.values.shape, dtype=view.values.dtype)
    _C.softmax_rows(view.ptr, view.col, plain(view.values).reshape(-1, heads), view.batch, view.nrows, view.ncols,
                    heads, log, cols_checked, y.view(-1, heads), torch.get_num_threads())
    return y


def softmax_grad(view: CSRView, y: torch.Tensor, g: torch.Tensor, by_rows: bool, log: bool) -> torch.Tensor:
    """The values gradient of softmax for its output y and y's gradient g, over rows
    (csrc/softmax_grad.c) or columns (csrc/softmax_cols_grad.c), shaped like y."""
    heads = _heads(view.col, y)
    out = torch.empty(y.shape, dtype=y.dtype)
    kernel = _C.softmax_grad if by_rows else _C.softmax_cols_grad
    kernel(view.ptr, view.col, view.batch, view.nrows, view.ncols, heads,
           plain(y).reshape(-1, heads).contiguous(), plain(g).to(y.dtype).reshape(-1, heads).contiguous(),
           log, out.view(-1, heads), torch.get_num_threads())
    return out


def _heads(col: torch.Tensor, values: torch.Tensor) -> int:
    """H of values shaped like col (1) or col + (H,): the heads of a multi-head softmax."""
    return values.shape[-1] if values.dim() > col.dim() else 1


# ------------------------------------------------------ graph attention (graph_attention)
# A 2-D view (n, m), row i a target node and its columns the sources it attends to;
# x (m, H, F), s (m, H), d (n, H), e (nnz, H) or None and the gradients, as kernel_array
# makes them (the custom op's); dropout: seed (None, or an int64 tensor of one element) and drop (of 2^24).
def gat(A: CSRView, x: torch.Tensor, s: torch.Tensor, d: torch.Tensor, e, seed, drop: int, scale: float,
        slope: float):
    """(out (n, H, F), alpha (nnz, H)): attention over each row's entries and the rows of
    x it weighs, in one walk (csrc/gat_forward.c); no (nnz, H, F) temporary."""
    n, (_, H, F) = A.nrows, x.shape
    out = torch.empty(n, H, F, dtype=x.dtype)
    alpha = torch.empty(A.col.shape[0], H, dtype=x.dtype)
    _C.gat_forward(A.ptr, A.col, n, A.ncols, x, s, d, e, _seed(seed), drop, scale, slope, alpha, out,
                   torch.get_num_threads())
    return out, alpha


def gat_grad(A: CSRView, x: torch.Tensor, s: torch.Tensor, d: torch.Tensor, e, seed, drop: int, scale: float,
             slope: float, alpha: torch.Tensor, G: torch.Tensor, galpha):
    """(gx, gs, gd, ge): the gradients of gat's out (G) and alpha (galpha, or None) back to
    x, s, d and e: the rows' scores (csrc/gat_grad_scores.c: their gradient dz is e's), then
    the sums over each source (csrc/gat_grad_src.c); one (nnz, H) array, returned as ge."""
    n, m, nt, seed = A.nrows, A.ncols, torch.get_num_threads(), _seed(seed)
    dz = torch.empty_like(alpha)
    gd = torch.empty_like(d)
    _C.gat_grad_scores(A.ptr, A.col, n, m, x, s, d, e, seed, drop, scale, slope, alpha, G, galpha, dz, gd, nt)
    gx, gs = torch.empty_like(x), torch.empty_like(s)
    _C.gat_grad_src(A.ptr, A.col, n, m, x, seed, drop, scale, alpha, G, dz, gx, gs, nt)
    return gx, gs, gd, dz


# --------------------------------------------------- GATv2 attention (graph_attention_v2)
# A 2-D view (n, m); xl (m, H, C), xr (n, H, C), att (H, C), et (nnz, H, C) or None, b
# (nnz, H) or None and the gradients, as kernel_array makes them; dropout as gat's.
def gatv2(A: CSRView, xl: torch.Tensor, xr: torch.Tensor, att: torch.Tensor, et, b, seed, drop: int,
          scale: float, slope: float):
    """(out (n, H, C), alpha (nnz, H)): each entry's score from its two rows, the softmax
    over each row and the weighted rows of xl, in one walk (csrc/gatv2_forward.c); no
    (nnz, H, C) temporary."""
    n, (_, H, C) = A.nrows, xl.shape
    out = torch.empty(n, H, C, dtype=xl.dtype)
    alpha = torch.empty(A.col.shape[0], H, dtype=xl.dtype)
    _C.gatv2_forward(A.ptr, A.col, n, A.ncols, xl, xr, att, et, b, _seed(seed), drop, scale, slope, alpha, out,
                     torch.get_num_threads())
    return out, alpha


def gatv2_grad(A: CSRView, xl: torch.Tensor, xr: torch.Tensor, att: torch.Tensor, et, seed, drop: int,
               scale: float, slope: float, alpha: torch.Tensor, G: torch.Tensor, galpha):
    """(gxl, gxr, gatt, get, gb): the gradients of gatv2's out (G) and alpha (galpha, or
    None) by rows (csrc/gatv2_grad_rows.c: the scores' gradient gb, gxr, et's get), by
    sources (csrc/gatv2_grad_src.c: gxl) and att's as the sum of the rows' shares
    (csrc/gatv2_grad_att.c, through one (n, H, C) workspace); get is None without et."""
    n, m = A.nrows, A.ncols
    dz = torch.empty_like(alpha)
    gxl, gxr, arows, gatt = torch.empty_like(xl), torch.empty_like(xr), torch.empty_like(xr), torch.empty_like(att)
    get = None if et is None else torch.empty_like(et)
    _C.gatv2_grad(A.ptr, A.col, n, m, xl, xr, att, et, _seed(seed), drop, scale, slope, alpha, G, galpha, dz, gxl,
                  gxr, arows, gatt, get, torch.get_num_threads())
    return gxl, gxr, gatt, get, dz


def _seed(seed) -> int:
    """The dropout seed as the kernels take it: an unsigned 64-bit int (0 without dropout)."""
    return 0 if seed is None else int(seed) % 2**64
