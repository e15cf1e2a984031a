"""Typed wrappers around the C kernels, one per kernel: on a CSRView, or for the
grouped products (gather_mm, segment_mm) on dense rows and their grouping.

CPU tensors go to torchsparsegradutils._C.  CUDA tensors go to the CUDA
kernels (_cuda.py) for the products of sparse_mm where the build has them;
otherwise, and on other devices, through PyTorch's own ops with the same
meaning, which, like the kernels, never build a dense n x m matrix.
"""
from typing import Optional

import torch

from . import _C, _cuda
from ._csr import _HYPERSPARSE_ROWS_PER_ENTRY, CSRView, check_structure, entry_rows, plain

# Entries per chunk of the gather-based SDDMM on non-CPU devices: bounds its
# temporaries to about this many elements times p, instead of nnz times p.
_GATHER_CHUNK_ELEMS = 1 << 24


def _use_c(*tensors: torch.Tensor) -> bool:
    if _force_torch_ops:
        return False
    for t in tensors:          # a loop: all() of a generator costs a microsecond more
        if not t.is_cpu:
            return False
    return True


# Tests set this to run the non-CPU code path on CPU tensors.
_force_torch_ops = False

# 16-bit values: the torch-ops path sums their products in float32 and rounds
# once, as the kernels do (PyTorch's sparse CUDA ops do not take bfloat16)
_HALF = (torch.float16, torch.bfloat16)


def _dense_for_c(X: torch.Tensor) -> torch.Tensor:
    """X as the kernels read a dense operand: plain (see _csr.plain), with
    unit-stride rows (any row and batch stride is fine), copied only if needed."""
    X = plain(X)
    if X.is_contiguous():        # the common case, in one call (size(-1) and stride(-1) cost 0.2 us each)
        return X
    return X if X.size(-1) <= 1 or X.stride(-1) == 1 else X.contiguous()


def kernel_array(t: torch.Tensor) -> torch.Tensor:
    """An index or values array as the kernels read it (and a CSRView holds it): plain
    and contiguous, copied only if needed."""
    return plain(t).contiguous()


def _item_rows(X: torch.Tensor) -> torch.Tensor:
    """X (.., rows, p) as the 2D (b*rows, p) stack of its batch items."""
    return X.reshape(X.shape[:-1].numel(), X.shape[-1])


def _on_kept_rows(A: CSRView, Y: torch.Tensor) -> torch.Tensor:
    """Y (n_kept, p), the rows of a hypersparse A's product, placed at their
    global rows of a zero (n, p) or (b, n, p) output."""
    p = Y.shape[-1]
    out = Y.new_zeros((*A.shape[:-1], p))
    _item_rows(out).index_copy_(0, A.rows, Y)
    return out


def spmm(A: CSRView, B: torch.Tensor) -> torch.Tensor:
    """C = A @ B for every batch item; B is (m, p) or (b, m, p)."""
    if A.rows is not None:
        return _on_kept_rows(A, spmm(A._replace(rows=None), _item_rows(B)))
    p = B.shape[-1]
    out_shape = (A.batch, A.nrows, p) if B.dim() == 3 else (A.nrows, p)
    if not _use_c(A.values, B):
        if _cuda.usable(A.values, B):
            return _cuda.spmm(A, _dense_for_c(B))
        if B.dtype in _HALF:
            return spmm(A._replace(values=A.values.float()), B.float()).to(B.dtype)
        A2, _, _ = _global_csr(A)
        C = torch.sparse.mm(A2, B.reshape(A.batch * A.ncols, p))
        return C.reshape(out_shape)
    return spmm_c(A.ptr, A.col, plain(A.values), A.batch, A.nrows, A.ncols, B)


def spmm_c(ptr: torch.Tensor, col: torch.Tensor, values: torch.Tensor, batch: int, n: int, m: int,
           B: torch.Tensor) -> torch.Tensor:
    """spmm of CPU arrays as the kernels read them (kernel_array's): the C kernel,
    called from here with nothing else on the way (it runs on every call)."""
    B = _dense_for_c(B)
    C = _spmm_out(batch, n, B)
    _C.spmm(ptr, col, values, batch, n, m, B, C, torch.get_num_threads())
    return C


def spmm_coo_c(indices: torch.Tensor, values: torch.Tensor, shape, B: torch.Tensor) -> Optional[torch.Tensor]:
    """spmm of a CPU COO A from its own index and values arrays (A._indices(),
    A._values()): its row pointers are built in C on the way, in the same call.  None
    where that does not apply (entries not sorted and unique, or A hypersparse; see
    spmm_coo in csrc/module.c): then take A's view (_csr.as_csr)."""
    B = _dense_for_c(B)
    C = _spmm_out(shape[0] if len(shape) == 3 else 1, shape[-2], B)
    if _C.spmm_coo(plain(indices), kernel_array(values), shape, B, C, _HYPERSPARSE_ROWS_PER_ENTRY,
                   torch.get_num_threads()):
        return C
    return None


def _spmm_out(batch: int, n: int, B: torch.Tensor) -> torch.Tensor:
    """The output of spmm, (batch, n, p) or (n, p) as B (a CPU tensor) is 3D or 2D:
    B.new_empty with the sizes unpacked, the cheapest allocation from Python (0.2 us
    less than torch.empty(sizes, dtype=..))."""
    p = B.shape[-1]
    return B.new_empty(batch, n, p) if B.dim() == 3 else B.new_empty(n, p)


def spmm_t(A: CSRView, G: torch.Tensor) -> torch.Tensor:
    """A^T @ G for every batch item, without atomics or a transpose: each thread
    owns a range of A's columns (see csrc/spmm_t.c)."""
    if A.rows is not None:
        out = spmm_t(A._replace(rows=None), _item_rows(G).index_select(0, A.rows))
        return out.reshape(*A.shape[:-2], A.shape[-1], G.shape[-1])
    p = G.shape[-1]
    out_shape = (A.batch, A.ncols, p) if G.dim() == 3 else (A.ncols, p)
    if not _use_c(A.values, G):
        if _cuda.usable(A.values, G):
            return _cuda.spmm_t(A, _dense_for_c(G))
        if G.dtype in _HALF:
            return spmm_t(A._replace(values=A.values.float()), G.float()).to(G.dtype)
        A2, rows, cols = _global_csr(A)
        At = torch.sparse_coo_tensor(torch.stack([cols, rows]), A2.values(),
                                     (A.batch * A.ncols, A.batch * A.nrows))
        return torch.sparse.mm(At, G.reshape(A.batch * A.nrows, p)).reshape(out_shape)
    out = torch.empty(out_shape, dtype=G.dtype)
    _C.spmm_t(A.ptr, A.col, plain(A.values), A.batch, A.nrows, A.ncols, _dense_for_c(G), out,
              torch.get_num_threads())
    return out


def transpose_pattern(A: CSRView):
    """(tptr, trow, tperm) of every item's transpose, CPU only (an explicit A^T for
    the solves; products with A^T use spmm_t instead): tptr (b*m+1,) global
    row pointers of A^T, trow the row of A each entry came from, and tperm its
    position in A's entry arrays (A^T's values are A.values.flatten()[tperm])."""
    nnz = A.col.numel()
    itype = A.ptr.dtype
    tptr = torch.empty(A.batch * A.ncols + 1, dtype=itype)
    trow = torch.empty(nnz, dtype=itype)
    tperm = torch.empty(nnz, dtype=itype)
    _C.csr_transpose(A.ptr, A.col, A.batch, A.nrows, A.ncols, tptr, trow, tperm, torch.get_num_threads())
    return tptr, trow, tperm


def sddmm(A: CSRView, G: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """g[e] = dot(G[k][i,:], B[k][j,:]) at every stored entry e = (k, i, j) of A,
    shaped like A.col: the gradient of A @ B w.r.t. A's values (A.values unused)."""
    if A.rows is not None:
        return sddmm(A._replace(rows=None), _item_rows(G).index_select(0, A.rows), _item_rows(B))
    if not _use_c(G, B):
        if _cuda.usable(G, B):
            return _cuda.sddmm(A, _dense_for_c(G), _dense_for_c(B))
        if G.dtype in _HALF:
            return _sddmm_gather(A, G.float(), B.float()).to(G.dtype)
        return _sddmm_gather(A, G, B)
    g = torch.empty(A.col.shape, dtype=G.dtype)
    _C.sddmm(A.ptr, A.col, A.batch, A.nrows, A.ncols, _dense_for_c(G), _dense_for_c(B), g,
             torch.get_num_threads())
    return g


def _global_csr(A: CSRView):
    """A as one block-diagonal 2D CSR matrix of (b*n) x (b*m), built from index
    arithmetic alone, with the global row and column of every entry: the way of every
    PyTorch-ops route, so a structure not checked yet (one from CSR arrays; a COO
    tensor's was checked as its view was made) is checked here, before PyTorch's
    sparse ops, which trust it, read it."""
    if A.coo_indices is None:
        check_structure(A)
    b, n, m = A.batch, A.nrows, A.ncols
    ptr, col = A.ptr.long(), A.col.long()
    if ptr.dim() == 2:                       # batched CSR: make the pointers global
        nnz_b = col.shape[1]
        offs = torch.arange(b, device=ptr.device).unsqueeze(1) * nnz_b
        ptr = torch.cat([(ptr[:, :-1] + offs).reshape(-1), ptr.new_full((1,), b * nnz_b)])
        col = col.reshape(-1)
    rows = entry_rows(ptr)
    cols = col + (rows // n) * m if n else col
    vals = A.values.reshape(-1) if A.values is not None else torch.ones(col.numel(), device=ptr.device)
    A2 = torch.sparse_csr_tensor(ptr, cols, vals, (b * n, b * m))
    return A2, rows, cols


def _sddmm_gather(A: CSRView, G: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    _, rows, cols = _global_csr(A)
    p = G.shape[-1]
    G2, B2 = G.reshape(A.batch * A.nrows, p), B.reshape(A.batch * A.ncols, p)
    g = torch.empty(rows.shape, dtype=G.dtype, device=G.device)
    step = max(1, _GATHER_CHUNK_ELEMS // max(p, 1))
    for s in range(0, rows.numel(), step):
        r, c = rows[s:s + step], cols[s:s + step]
        g[s:s + step] = (G2.index_select(0, r) * B2.index_select(0, c)).sum(1)
    return g.reshape(A.col.shape)


# ------------------------------------------- grouped products (gather_mm, segment_mm)
def group_rows(idx: torch.Tensor, R: int):
    """(off (R+1,), perm (n,)), int64: the rows i grouped by relation idx[i] in [0, R),
    a stable sort (group r is perm[off[r]:off[r+1]], in increasing i)."""
    if _use_c(idx):
        off = torch.empty(R + 1, dtype=torch.int64)
        perm = torch.empty(idx.shape[0], dtype=torch.int64)
        _C.group_rows(idx.contiguous(), R, off, perm)
        return off, perm
    if idx.numel() and bool(((idx < 0) | (idx >= R)).any()):
        raise ValueError(_BAD_GROUPING)
    off = torch.zeros(R + 1, dtype=torch.int64, device=idx.device)
    torch.cumsum(torch.bincount(idx, minlength=R), 0, out=off[1:])
    return off, torch.argsort(idx, stable=True)


def grouped_mm(off: torch.Tensor, perm, a: torch.Tensor, M: torch.Tensor) -> torch.Tensor:
    """out[i] = a[i] @ M[r] for the rows i of group r (see group_rows; perm None: group r
    is the rows off[r]..off[r+1]-1); a (n, K), M (R, K, P), out (n, P)."""
    if _use_c(off, a, M):
        out = torch.empty(a.shape[0], M.shape[2], dtype=a.dtype)
        _C.grouped_mm(off, perm, _dense_for_c(a), _dense_for_c(M), out, torch.get_num_threads())
        return out
    if M.dim() != 3 or M.shape[:2] != (off.shape[0] - 1, a.shape[1]):     # as the C glue checks
        raise ValueError(f"b must have shape ({off.shape[0] - 1}, {a.shape[1]}, P), got {tuple(M.shape)}")
    lengths = _group_lengths(off, perm, a.shape[0])
    parts = torch.split(_in_group_order(a, perm), lengths)
    out = torch.cat([p @ M[r] for r, p in enumerate(parts)]) if parts else a.new_empty(0, M.shape[2])
    return out if perm is None else torch.empty_like(out).index_copy_(0, perm, out)


def grouped_mm_tn(off: torch.Tensor, perm, a: torch.Tensor, G: torch.Tensor) -> torch.Tensor:
    """out[r] = sum over the rows i of group r of a[i]^T G[i]; a (n, K), G (n, P), out (R, K, P)."""
    out = torch.empty(off.shape[0] - 1, a.shape[1], G.shape[1], dtype=a.dtype, device=a.device)
    if _use_c(off, a, G):
        _C.grouped_mm_tn(off, perm, _dense_for_c(a), _dense_for_c(G), out, torch.get_num_threads())
        return out
    if G.dim() != 2 or G.shape[0] != a.shape[0]:                          # as the C glue checks
        raise ValueError(f"grad must have shape ({a.shape[0]}, P), got {tuple(G.shape)}")
    lengths = _group_lengths(off, perm, a.shape[0])
    for r, (ap, gp) in enumerate(zip(torch.split(_in_group_order(a, perm), lengths),
                                     torch.split(_in_group_order(G, perm), lengths))):
        torch.mm(ap.t(), gp, out=out[r])
    return out


_BAD_GROUPING = ("malformed grouping: a relation index is negative or not less than the number of "
                 "relations, segment offsets do not run from 0 to the number of rows, or a row order is "
                 "not a permutation of the rows")


def _group_lengths(off: torch.Tensor, perm, n: int):
    """The group sizes of offsets off as a list, the grouping checked as the C kernels
    check it (csrc/groups_check.c)."""
    lengths = torch.diff(off).tolist()
    if off[0] != 0 or sum(lengths) != n or min(lengths, default=0) < 0:
        raise ValueError(_BAD_GROUPING)
    if perm is not None and n and (perm.shape != (n,) or bool(((perm < 0) | (perm >= n)).any())
                                   or bool((torch.bincount(perm, minlength=n) != 1).any())):
        raise ValueError(_BAD_GROUPING)
    return lengths


def _in_group_order(X: torch.Tensor, perm) -> torch.Tensor:
    return X if perm is None else X.index_select(0, perm)


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
        _lse_items(A, include_zeros, out)
    if rows is not None:
        _lse_groups(A, include_zeros, rows, by_rows=True)
    if cols is not None:
        _lse_groups(A, include_zeros, cols, by_rows=False)
    return out


def lse_grad(A: CSRView, out: torch.Tensor, G: torch.Tensor, mode: str, transposed: bool) -> torch.Tensor:
    """d(sum G * out)/d A.values for out = lse(A, mode, .., transposed): each value's
    softmax weight exp(v - lse) in its group times the group's gradient (summed over
    both groups for "both"); shaped like A.values."""
    if mode == "all":          # every row of an item carries the item's lse and gradient
        return _lse_grad(A, (out[:, None].expand(-1, A.nrows), G[:, None].expand(-1, A.nrows)), None)
    n, m = (A.ncols, A.nrows) if transposed else (A.nrows, A.ncols)
    if mode == "both":
        rows, cols = (out[1, :, :n], G[1, :, :n]), (out[0, :, :m], G[0, :, :m])
    else:
        rows, cols = ((out, G), None) if mode == "rows" else (None, (out, G))
    return _lse_grad(A, *((cols, rows) if transposed else (rows, cols)))


def lse_wsum(A: CSRView, out: torch.Tensor, u: torch.Tensor, mode: str) -> torch.Tensor:
    """s[group] = sum over the group's stored values v of u * exp(v - out[group]), shaped
    like out = lse(A, mode, .., False) (0 in the padding of "both"): the derivative of
    lse_grad w.r.t. its G, in PyTorch ops (second derivatives only)."""
    _, rows, cols = _global_csr(A)
    b, n, m = A.batch, A.nrows, A.ncols
    v, u = A.values.reshape(-1), u.reshape(-1)

    def group_sums(lse: torch.Tensor, group: torch.Tensor, count: int) -> torch.Tensor:
        w = u * (v - lse.reshape(-1)[group]).exp()
        return v.new_zeros(b * count).index_add_(0, group, w).reshape(b, count)

    if mode == "all":
        return group_sums(out, rows // max(n, 1), 1).reshape(b)
    if mode != "both":
        return group_sums(out, rows, n) if mode == "rows" else group_sums(out, cols, m)
    s = torch.zeros_like(out)
    s[1, :, :n], s[0, :, :m] = group_sums(out[1, :, :n], rows, n), group_sums(out[0, :, :m], cols, m)
    return s


def _lse_groups(view: CSRView, include_zeros: bool, out: torch.Tensor, by_rows: bool) -> None:
    """out[k, g] = lse of row (by_rows) or column g of item k of the view; out is
    (b, w) with w at least the group count, written in place."""
    if _use_c(view.values):
        args = (view.ptr, view.col, view.values, view.batch, view.nrows, view.ncols, include_zeros, out)
        if by_rows:
            _C.lse_rows(*args, None, torch.get_num_threads())
        else:
            _C.lse_cols(*args, torch.get_num_threads())
        return
    b, count = view.batch, view.nrows if by_rows else view.ncols
    _, rows, cols = _global_csr(view)
    full = view.ncols if by_rows else view.nrows
    out[:, :count] = _torch_lse(view.values.reshape(-1), rows if by_rows else cols, b * count,
                                full if include_zeros else None).reshape(b, count)


def _lse_items(view, include_zeros: bool, out: torch.Tensor) -> None:
    """out[k] = lse of the whole item k: of its row results, folded in row order."""
    rows = torch.empty(view.batch, view.nrows, dtype=out.dtype, device=out.device)
    if _use_c(view.values):
        _C.lse_rows(view.ptr, view.col, view.values, view.batch, view.nrows, view.ncols, include_zeros,
                    rows, out.view(1, -1), torch.get_num_threads())
    else:
        _lse_groups(view, include_zeros, rows, by_rows=True)
        out.copy_(torch.logsumexp(rows, dim=1) if view.nrows else torch.full_like(out, float("-inf")))


def _lse_grad(view, rows, cols) -> torch.Tensor:
    """d(sum Gr * row lse + Gc * col lse)/d values of the view, shaped like its values;
    rows and cols are (lse, grad) pairs of (b, n) and (b, m) tensors, or None."""
    if _use_c(view.values):
        g = torch.empty(1, view.values.numel(), dtype=view.values.dtype)
        arrays = [plain(t).contiguous() if pair is not None else None
                  for pair in (rows, cols) for t in (pair or (None, None))]
        _C.lse_grad(view.ptr, view.col, view.values, view.batch, view.nrows, view.ncols, *arrays, g,
                    torch.get_num_threads())
        return g.reshape(view.values.shape)
    _, r, c = _global_csr(view)
    v = view.values.reshape(-1)
    g = torch.zeros_like(v)
    for pair, group in ((rows, r), (cols, c)):
        if pair is not None:
            lse, grad = (t.reshape(-1) for t in pair)
            g += grad[group] * (v - lse[group]).exp()
    return g.reshape(view.values.shape)


def _torch_lse(values: torch.Tensor, group: torch.Tensor, ngroups: int, full) -> torch.Tensor:
    """Per group lse of values (PyTorch ops); with full, each group also holds
    full - (its values) zeros.  The same shift rule as csrc (tsgu_lse_shift)."""
    shift = torch.full((ngroups,), float("-inf"), dtype=values.dtype, device=values.device)
    shift.scatter_reduce_(0, group, values, reduce="amax")
    zeros = None
    if full is not None:
        zeros = (full - torch.bincount(group, minlength=ngroups)).to(values.dtype)
        shift = torch.where(zeros > 0, shift.clamp(min=0), shift)
    shift = torch.where(shift.isfinite(), shift, torch.zeros_like(shift))
    s = torch.zeros_like(shift).scatter_add_(0, group, (values - shift[group]).exp())
    if zeros is not None:
        s = s + torch.where(zeros > 0, zeros * (-shift).exp(), torch.zeros_like(s))   # no 0 * inf
    return shift + s.log()
