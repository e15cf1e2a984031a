"""The ops in PyTorch's own operations: for devices without kernels of ours (CUDA
where our kernels are not built or do not cover the op, and any other device),
with the meaning of the C kernels and their errors, and never a dense n x m matrix.

A batch is taken as one block-diagonal 2D matrix (global_csr), built by index
arithmetic.  Errors carry the C kernels' messages (STATUS).  16-bit values are computed in float32 and rounded once, as the
kernels do (PyTorch's sparse CUDA ops do not take bfloat16).
"""
import warnings

import torch

from .._core.intake import check_structure
from .._core.native import STATUS
from .._core.torch_sparse import coo_tensor, csr_tensor
from .._core.view import CSRView, entry_rows

# Entries per chunk of the gather-based SDDMM: bounds its temporaries to about
# this many elements times p, instead of nnz times p.
_GATHER_CHUNK_ELEMS = 1 << 24

_HALF = (torch.float16, torch.bfloat16)


def global_csr(A: CSRView):
    """A as one block-diagonal 2D CSR matrix of (b*n) x (b*m), built from index
    arithmetic alone, with the global row and column of every entry: the way of every
    op here, so a structure not checked yet (one from CSR arrays; a COO tensor's was
    checked as its view was made) is checked here, before PyTorch's sparse ops, which
    trust it, read it."""
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
    A2 = csr_tensor(ptr, cols, vals, (b * n, b * m))
    return A2, rows, cols


def global_matrix(A: CSRView) -> torch.Tensor:
    """global_csr's matrix alone: for an unbatched A, A's own arrays, with no pass over
    its entries."""
    if A.ptr.dim() == 2 or A.batch != 1:
        return global_csr(A)[0]
    if A.coo_indices is None:
        check_structure(A)
    vals = A.values.reshape(-1) if A.values is not None else torch.ones(A.col.numel(), device=A.ptr.device)
    return csr_tensor(A.ptr.long(), A.col.long(), vals, (A.nrows, A.ncols))


def _columns_increase(ptr: torch.Tensor, col: torch.Tensor) -> bool:
    """Whether the columns of every row of (ptr, col) increase: one pass, one synchronisation."""
    nnz = col.numel()
    if nnz < 2:
        return True
    starts = torch.zeros(nnz + 1, dtype=torch.bool, device=col.device)
    starts[ptr] = True                          # entry e opens a row: e and e - 1 may descend
    return not bool(((col[1:] <= col[:-1]) & ~starts[1:nnz]).any())


# ---------------------------------------------------------------- products (sparse_mm)
def spmm(A: CSRView, B: torch.Tensor, mean: bool = False) -> torch.Tensor:
    """C = A @ B for every batch item (with mean: (D^-1 A) @ B, D the rows' entry counts)."""
    if B.dtype in _HALF:
        return spmm(A._replace(values=A.values.float()), B.float(), mean).to(B.dtype)
    p = B.shape[-1]
    A2 = global_matrix(_row_mean(A) if mean else A)
    C = torch.sparse.mm(A2, B.reshape(A.batch * A.ncols, p))
    return C.reshape((A.batch, A.nrows, p) if B.dim() == 3 else (A.nrows, p))


def spmm_t(A: CSRView, G: torch.Tensor, mean: bool = False) -> torch.Tensor:
    """A^T @ G for every batch item (with mean: (D^-1 A)^T @ G)."""
    if G.dtype in _HALF:
        return spmm_t(A._replace(values=A.values.float()), G.float(), mean).to(G.dtype)
    p = G.shape[-1]
    A2, rows, cols = global_csr(_row_mean(A) if mean else A)
    At = coo_tensor(torch.stack([cols, rows]), A2.values(), (A.batch * A.ncols, A.batch * A.nrows))
    out = torch.sparse.mm(At, G.reshape(A.batch * A.nrows, p))
    return out.reshape((A.batch, A.ncols, p) if G.dim() == 3 else (A.ncols, p))


def sddmm(A: CSRView, G: torch.Tensor, B: torch.Tensor, mean: bool = False) -> torch.Tensor:
    """g[e] = dot(G[k][i,:], B[k][j,:]) at every stored entry, shaped like A.col (with
    mean, divided by row i's entry count); by gathering rows of G and B in chunks of
    entries."""
    if G.dtype in _HALF:
        return sddmm(A, G.float(), B.float(), mean).to(G.dtype)
    A2, rows, cols = global_csr(A)
    p = G.shape[-1]
    G2, B2 = G.reshape(A.batch * A.nrows, p), B.reshape(A.batch * A.ncols, p)
    g = torch.empty(rows.shape, dtype=G.dtype, device=G.device)
    step = max(1, _GATHER_CHUNK_ELEMS // max(p, 1))
    for s in range(0, rows.numel(), step):
        r, c = rows[s:s + step], cols[s:s + step]
        g[s:s + step] = (G2.index_select(0, r) * B2.index_select(0, c)).sum(1)
    if mean:
        g /= A2.crow_indices().diff()[rows]
    return g.reshape(A.col.shape)


def _row_mean(A: CSRView) -> CSRView:
    """D^-1 A: every value divided by the number of entries of its row."""
    A2, rows, _ = global_csr(A)
    return A._replace(values=(A2.values() / A2.crow_indices().diff()[rows]).reshape(A.values.shape))


# ------------------------------------------------- amax / amin (sparse_mm's reduce)
def spmm_arg(A: CSRView, B: torch.Tensor, is_min: bool, need_arg: bool):
    """(C, arg) as cpu.spmm_arg gives them (PyTorch's tie and NaN rule: the first entry
    of a tie, the last NaN product), by the scatter formulation: the nnz x p products,
    scatter_reduce'd by row, then the entry that gives each extreme."""
    if B.dtype in _HALF:
        C, arg = spmm_arg(A._replace(values=A.values.float()), B.float(), is_min, need_arg)
        return C.to(B.dtype), arg
    A2, rows, cols = global_csr(A)
    ptr = A2.crow_indices()
    R, p, nnz = A.batch * A.nrows, B.shape[-1], rows.numel()
    P = A2.values().unsqueeze(1) * B.reshape(A.batch * A.ncols, p).index_select(0, cols)
    idx = rows.unsqueeze(1).expand(-1, p)
    start = float("inf") if is_min else float("-inf")
    best = P.new_full((R, p), start).scatter_reduce_(0, idx, P, "amin" if is_min else "amax")
    empty = (ptr[1:] == ptr[:-1]).unsqueeze(1)
    shape = (A.batch, A.nrows, p) if B.dim() == 3 else (A.nrows, p)
    arg = None
    if need_arg:
        e = torch.arange(nnz, device=P.device).unsqueeze(1).expand(-1, p)
        first = e.new_full((R, p), nnz).scatter_reduce_(0, idx, e.masked_fill(P != best[rows], nnz), "amin")
        last_nan = e.new_full((R, p), -1).scatter_reduce_(0, idx, e.masked_fill(~P.isnan(), -1), "amax")
        pick = torch.where(best.isnan(), last_nan, first) - ptr[:-1].unsqueeze(1)
        arg = pick.masked_fill(best == start, -1).to(torch.int32).reshape(shape)   # no entry taken
    return best.masked_fill(empty, 0).reshape(shape), arg


def _arg_entries(A2: torch.Tensor, arg: torch.Tensor):
    """(r, t, e) for the output elements (r, t) whose arg names an entry, e its flat
    index; ValueError where an arg names no entry of its row (as the C kernels)."""
    ptr = A2.crow_indices()
    arg = arg.reshape(ptr.numel() - 1, arg.shape[-1]).long()
    if bool(((arg < -1) | (arg >= (ptr[1:] - ptr[:-1]).unsqueeze(1))).any()):
        raise ValueError(STATUS["EARG"])
    r, t = (arg >= 0).nonzero(as_tuple=True)
    return r, t, ptr[r] + arg[r, t]


def spmm_t_arg(A: CSRView, arg: torch.Tensor, G: torch.Tensor) -> torch.Tensor:
    """As cpu.spmm_t_arg."""
    if G.dtype in _HALF:
        return spmm_t_arg(A._replace(values=A.values.float()), arg, G.float()).to(G.dtype)
    A2, _, cols = global_csr(A)
    r, t, e = _arg_entries(A2, arg)
    p = G.shape[-1]
    out = G.new_zeros(A.batch * A.ncols, p)
    out.index_put_((cols[e], t), A2.values()[e] * G.reshape(A.batch * A.nrows, p)[r, t], accumulate=True)
    return out.reshape((A.batch, A.ncols, p) if G.dim() == 3 else (A.ncols, p))


def sddmm_arg(A: CSRView, arg: torch.Tensor, G: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """As cpu.sddmm_arg."""
    if G.dtype in _HALF:
        return sddmm_arg(A, arg, G.float(), B.float()).to(G.dtype)
    A2, _, cols = global_csr(A)
    r, t, e = _arg_entries(A2, arg)
    p = G.shape[-1]
    g = G.new_zeros(cols.numel())
    G2, B2 = G.reshape(A.batch * A.nrows, p), B.reshape(A.batch * A.ncols, p)
    g.index_put_((e,), G2[r, t] * B2[cols[e], t], accumulate=True)
    return g.reshape(A.col.shape)


def gather_arg(A: CSRView, arg: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
    """out[k][i,t] = A.val[e] * X[k][A.col[e],t] for e the arg entry of (k, i, t), 0
    where there is none: spmm_arg's output as a function of A's values and X with arg
    fixed (its derivatives are sddmm_arg and spmm_t_arg; for second derivatives only)."""
    if X.dtype in _HALF:
        return gather_arg(A._replace(values=A.values.float()), arg, X.float()).to(X.dtype)
    A2, _, cols = global_csr(A)
    r, t, e = _arg_entries(A2, arg)
    p = X.shape[-1]
    out = X.new_zeros(A.batch * A.nrows, p)
    out[r, t] = A2.values()[e] * X.reshape(A.batch * A.ncols, p)[cols[e], t]
    return out.reshape((A.batch, A.nrows, p) if X.dim() == 3 else (A.nrows, p))


# ------------------------------------------------------------------------- solves
# ------------------------------------------------------------- sparse @ sparse (sparse_mm)
# Every product A[i,j] B[j,c] is an index pair (e, f) of A's and B's entries: O(products)
# temporaries (no dense matrix), on any device.
def _product_pairs(A: CSRView, B: CSRView):
    """(e, f, row, col): for each product of C = A @ B, its entries e of A and f of B
    (flat indices), C's global row k*n + i and its column c in the item."""
    _, rows_a, cols_a = global_csr(A)          # cols_a = k*l + j: the global row of B
    B2, _, cols_b = global_csr(B)
    ptr_b = B2.crow_indices()
    start, counts = ptr_b[cols_a], ptr_b[cols_a + 1] - ptr_b[cols_a]
    e = torch.repeat_interleave(torch.arange(counts.numel(), device=counts.device), counts)
    first = torch.cumsum(counts, 0) - counts               # each e's first pair
    f = torch.arange(e.numel(), device=e.device) - first[e] + start[e]
    row = rows_a[e]
    col = cols_b[f] - (row // A.nrows) * B.ncols if A.nrows else cols_b[f]
    return e, f, row, col


def spgemm(A: CSRView, B: CSRView, coo: bool = False):
    """(ptr, index, values) of C = A @ B for every batch item, as the C kernels give them."""
    e, f, row, col = _product_pairs(A, B)
    m = B.ncols
    key, where = torch.unique(row * m + col, return_inverse=True)          # sorted: by row, then column
    a, b = A.values.reshape(-1), B.values.reshape(-1)
    wide = torch.float32 if a.dtype in _HALF else a.dtype
    values = torch.zeros(key.numel(), dtype=wide, device=a.device).index_add_(0, where, a[e].to(wide) * b[f].to(wide))
    rows, cols = (key // m, key % m) if m else (key, key)
    ptr = torch.cat([rows.new_zeros(1), torch.cumsum(torch.bincount(rows, minlength=A.batch * A.nrows), 0)])
    if coo:
        n = A.nrows
        cols = torch.stack([rows // n, rows % n, cols] if len(A.shape) == 3 else [rows, cols])
    return ptr, cols, values.to(a.dtype)


def spgemm_csr(A: CSRView, B: CSRView, coo: bool = False):
    """spgemm through PyTorch's CSR @ CSR of the block-diagonal forms (cuSPARSE on CUDA:
    the forward where it is faster than ours); 16-bit values through spgemm (PyTorch's
    products take no 16-bit CSR).  Every product's position is an entry, as spgemm's,
    and each row's columns increase (sorted here where PyTorch's product leaves them
    unsorted)."""
    if A.values.dtype in _HALF:
        return spgemm(A, B, coo)
    A2, B2 = global_matrix(A), global_matrix(B)
    C2 = torch.sparse.mm(A2, B2) if A2.shape[0] and B2.shape[1] else \
        csr_tensor(torch.zeros(A2.shape[0] + 1, dtype=torch.int64, device=A2.device),
                   torch.zeros(0, dtype=torch.int64, device=A2.device), A2.values()[:0], (A2.shape[0], B2.shape[1]))
    ptr, col, values = C2.crow_indices().long(), C2.col_indices().long(), C2.values()
    if not _columns_increase(ptr, col):                             # PyTorch's CPU product leaves rows unsorted
        order = torch.argsort(entry_rows(ptr) * B2.shape[1] + col)
        col, values = col.index_select(0, order), values.index_select(0, order)
    if len(A.shape) == 2:
        return ptr, torch.stack([entry_rows(ptr), col]) if coo else col, values
    n, m = A.nrows, B.ncols
    rows = entry_rows(ptr)
    k = rows // n if n else rows
    col = col - k * m
    if coo:
        col = torch.stack([k, rows - k * n, col])
    return ptr, col, values


def _grad_at(G, row: torch.Tensor, col: torch.Tensor, m: int) -> torch.Tensor:
    """G[row, col] for a dense G ((b, n, m) or (n, m)) or a CSRView (zero where it stores none)."""
    if not isinstance(G, CSRView):
        return G.reshape(-1, m)[row, col]
    _, g_rows, g_cols = global_csr(G)
    stored = g_rows * m + (g_cols - (g_rows // G.nrows) * m if G.nrows else g_cols)
    wanted = row * m + col
    if stored.numel() == 0:
        return G.values.new_zeros(wanted.shape)
    at = torch.searchsorted(stored, wanted).clamp_(max=stored.numel() - 1)
    return torch.where(stored[at] == wanted, G.values.reshape(-1)[at], G.values.new_zeros(()))


def spgemm_grad(A: CSRView, B: CSRView, G, need_a: bool, need_b: bool):
    """(grad_A, grad_B) of A @ B w.r.t. A's and B's values, shaped like A.col and B.col
    (None where not needed)."""
    e, f, row, col = _product_pairs(A, B)
    a, b = A.values.reshape(-1), B.values.reshape(-1)
    wide = torch.float32 if a.dtype in _HALF else a.dtype
    g = _grad_at(G, row, col, B.ncols).to(wide)
    ga = gb = None
    if need_a:
        ga = torch.zeros(a.numel(), dtype=wide, device=a.device).index_add_(0, e, b[f].to(wide) * g)
        ga = ga.to(a.dtype).reshape(A.col.shape)
    if need_b:
        gb = torch.zeros(b.numel(), dtype=wide, device=a.device).index_add_(0, f, a[e].to(wide) * g)
        gb = gb.to(a.dtype).reshape(B.col.shape)
    return ga, gb


def triangular_diagonal(A: CSRView, rows: torch.Tensor, cols: torch.Tensor, upper: bool, unitriangular: bool):
    """The checks of a triangular A's structure, the kernel's errors (ValueError): an
    entry on the wrong side, a diagonal entry stored with unitriangular, or a row
    without one otherwise.  Returns the flat positions of the diagonal entries, one
    per global row in row order (None with unitriangular).  rows, cols: global_csr's."""
    n = A.nrows
    i, j = rows % n if n else rows, cols % n if n else cols
    if bool((j < i).any() if upper else (j > i).any()):
        raise ValueError(STATUS["ETRI_SIDE"])
    on_diag = i == j
    if unitriangular:
        if bool(on_diag.any()):
            raise ValueError(STATUS["EDIAG_UNIT"])
        return None
    diag = torch.nonzero(on_diag).squeeze(1)
    if diag.numel() != A.batch * n:
        raise ValueError(STATUS["EDIAG_ZERO"])
    return diag


def check_diagonal(values: torch.Tensor, diag: torch.Tensor) -> None:
    """A zero among the diagonal entries (values at triangular_diagonal's positions) is
    the kernel's error."""
    if bool((values.index_select(0, diag) == 0).any()):
        raise ValueError(STATUS["EDIAG_ZERO"])


def trisolve(A: CSRView, B: torch.Tensor, upper: bool, unitriangular: bool, transpose: bool) -> torch.Tensor:
    """X = A^{-1} B (or A^{-T} B) through PyTorch's sparse triangular solve on the
    block-diagonal 2D form (cuSPARSE serves it on CUDA), after the kernel's structure
    checks in torch ops, so both paths raise the same errors."""
    A2, rows, cols = global_csr(A)
    n, p = A.nrows, B.shape[-1]
    diag = triangular_diagonal(A, rows, cols, upper, unitriangular)
    if diag is not None:
        check_diagonal(A2.values(), diag)
    if A.batch * n == 0 or p == 0:
        return B.detach().clone()
    # torch.linalg.solve_triangular takes only strided matrices: sparse ones still
    # need the deprecated torch.triangular_solve (pytorch#87358)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"torch\.triangular_solve is deprecated", category=UserWarning)
        X = torch.triangular_solve(B.detach().reshape(A.batch * n, p), A2.detach(), upper=upper,
                                   transpose=transpose, unitriangular=unitriangular).solution
    return X.reshape(B.shape)


# ------------------------------------------- grouped products (gather_mm, segment_mm)
def group_rows(idx: torch.Tensor, R: int):
    """(off, perm) as cpu.group_rows gives them."""
    if idx.numel() and bool(((idx < 0) | (idx >= R)).any()):
        raise ValueError(STATUS["EGROUP"])
    off = torch.zeros(R + 1, dtype=torch.int64, device=idx.device)
    torch.cumsum(torch.bincount(idx, minlength=R), 0, out=off[1:])
    return off, torch.argsort(idx, stable=True)


def grouped_mm(off: torch.Tensor, perm, a: torch.Tensor, M: torch.Tensor) -> torch.Tensor:
    """out[i] = a[i] @ M[r] for the rows i of group r (perm None: group r is the rows
    off[r]..off[r+1]-1)."""
    if M.dim() != 3 or M.shape[:2] != (off.shape[0] - 1, a.shape[1]):     # as the C glue checks
        raise ValueError(f"b must have shape ({off.shape[0] - 1}, {a.shape[1]}, P), got {tuple(M.shape)}")
    lengths = _group_lengths(off, perm, a.shape[0])        # checked before perm is read through
    parts = torch.split(_in_group_order(a, perm), lengths)
    out = torch.cat([p @ M[r] for r, p in enumerate(parts)]) if parts else a.new_empty(0, M.shape[2])
    return out if perm is None else torch.empty_like(out).index_copy_(0, perm, out)


def grouped_mm_tn(off: torch.Tensor, perm, a: torch.Tensor, G: torch.Tensor) -> torch.Tensor:
    """out[r] = sum over the rows i of group r of a[i]^T G[i]."""
    if G.dim() != 2 or G.shape[0] != a.shape[0]:                          # as the C glue checks
        raise ValueError(f"grad must have shape ({a.shape[0]}, P), got {tuple(G.shape)}")
    out = torch.empty(off.shape[0] - 1, a.shape[1], G.shape[1], dtype=a.dtype, device=a.device)
    lengths = _group_lengths(off, perm, a.shape[0])
    for r, (ap, gp) in enumerate(zip(torch.split(_in_group_order(a, perm), lengths),
                                     torch.split(_in_group_order(G, perm), lengths))):
        torch.mm(ap.t(), gp, out=out[r])
    return out


def _group_lengths(off: torch.Tensor, perm, n: int):
    """The group sizes of offsets off as a list, the grouping checked as the C kernels
    check it (csrc/groups_check.c)."""
    lengths = torch.diff(off).tolist()
    if off[0] != 0 or sum(lengths) != n or min(lengths, default=0) < 0:
        raise ValueError(STATUS["EGROUP"])
    if perm is not None and n and (perm.shape != (n,) or bool(((perm < 0) | (perm >= n)).any())
                                   or bool((torch.bincount(perm, minlength=n) != 1).any())):
        raise ValueError(STATUS["EGROUP"])
    return lengths


def _in_group_order(X: torch.Tensor, perm) -> torch.Tensor:
    return X if perm is None else X.index_select(0, perm)


# ------------------------------------------------- log-sum-exp (sparse_logsumexp)
def lse_groups(view: CSRView, include_zeros: bool, out: torch.Tensor, by_rows: bool) -> None:
    """As cpu.lse_groups."""
    b, count = view.batch, view.nrows if by_rows else view.ncols
    _, rows, cols = global_csr(view)
    full = view.ncols if by_rows else view.nrows
    out[:, :count] = _torch_lse(view.values.reshape(-1), rows if by_rows else cols, b * count,
                                full if include_zeros else None).reshape(b, count)


def lse_items(view: CSRView, include_zeros: bool, out: torch.Tensor) -> None:
    """As cpu.lse_items."""
    rows = torch.empty(view.batch, view.nrows, dtype=out.dtype, device=out.device)
    lse_groups(view, include_zeros, rows, by_rows=True)
    out.copy_(torch.logsumexp(rows, dim=1) if view.nrows else torch.full_like(out, float("-inf")))


def lse_grad(view: CSRView, rows, cols) -> torch.Tensor:
    """As cpu.lse_grad."""
    _, r, c = global_csr(view)
    v = view.values.reshape(-1)
    g = torch.zeros_like(v)
    for pair, group in ((rows, r), (cols, c)):
        if pair is not None:
            lse, grad = (t.reshape(-1) for t in pair)
            g += grad[group] * (v - lse[group]).exp()
    return g.reshape(view.values.shape)


def lse_wsum(A: CSRView, out: torch.Tensor, u: torch.Tensor, mode: str) -> torch.Tensor:
    """s[group] = sum over the group's stored values v of u * exp(v - out[group]), shaped
    like out = lse(A, mode, .., False) (0 in the padding of "both"): the derivative of
    lse_grad w.r.t. its G (second derivatives only, on every device)."""
    _, rows, cols = global_csr(A)
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


def _torch_lse(values: torch.Tensor, group: torch.Tensor, ngroups: int, full) -> torch.Tensor:
    """Per group lse of values; with full, each group also holds full - (its values)
    zeros.  The same shift rule as csrc (tsgu_lse_shift)."""
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


# ------------------------------------- softmax (sparse_softmax, sparse_log_softmax)
def _groups(A: CSRView, by_rows: bool):
    """(group of each entry, number of groups): the global row or column."""
    _, rows, cols = global_csr(A._replace(values=None))
    return (rows, A.batch * A.nrows) if by_rows else (cols, A.batch * A.ncols)


def softmax(A: CSRView, by_rows: bool, log: bool) -> torch.Tensor:
    """As cpu.softmax: the group's max M (not clamped: a group holding +inf, or only
    -inf, is NaN throughout), its sum S of exp(v - M), then (v - M) - log S (its
    exp); values (nnz,) or (nnz, H)."""
    v = A.values
    if v.dtype in _HALF:
        return softmax(A._replace(values=v.float()), by_rows, log).to(v.dtype)
    group, count = _groups(A, by_rows)
    v = _by_entry(v, A.col)
    at = group.unsqueeze(1).expand(v.shape)
    mx = v.new_full((count, v.shape[1]), float("-inf")).scatter_reduce_(0, at, v, "amax")
    shifted = v - mx[group]
    d = shifted - v.new_zeros(mx.shape).index_add_(0, group, shifted.exp()).log()[group]
    return (d if log else d.exp()).reshape(A.values.shape)


def softmax_grad(A: CSRView, y: torch.Tensor, g: torch.Tensor, by_rows: bool, log: bool) -> torch.Tensor:
    """As cpu.softmax_grad."""
    if y.dtype in _HALF:
        return softmax_grad(A, y.float(), g.float(), by_rows, log).to(y.dtype)
    g = g.to(y.dtype)
    if log:
        return g - y.exp() * group_sum(A, g, by_rows)
    return y * (g - group_sum(A, g * y, by_rows))


def group_sum(A: CSRView, x: torch.Tensor, by_rows: bool) -> torch.Tensor:
    """S(x)[e] = the sum of x over e's group (row or column), shaped like x (each head
    on its own for an (nnz, H) x)."""
    group, count = _groups(A, by_rows)
    flat = _by_entry(x, A.col)
    return flat.new_zeros(count, flat.shape[1]).index_add_(0, group, flat).index_select(0, group).reshape(x.shape)


def _by_entry(x: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
    """x, one value per stored entry (shaped like col) or H (col's shape + (H,)), as
    (nnz, 1) or (nnz, H)."""
    return x.reshape(-1, x.shape[-1] if x.dim() > col.dim() else 1)


# ------------------------------------------------------ graph attention (graph_attention)
# As cpu.gat / gat_grad, by gathers and index_add over the entries.  These build
# (nnz, H, F) temporaries (the gathered rows of x and of G), and the dropout draw
# (nnz, H) int64 ones: CUDA without kernels of ours pays that memory; the C kernels on
# CPU do not.
def _signed(c: int) -> int:
    return c - 2**64 if c >= 2**63 else c


_GOLDEN, _MIX1, _MIX2 = _signed(0x9E3779B97F4A7C15), _signed(0xBF58476D1CE4E5B9), _signed(0x94D049BB133111EB)


def _shifted(z: torch.Tensor, k: int) -> torch.Tensor:
    """z >> k of an int64 taken as unsigned (a logical shift)."""
    return (z >> k) & ((1 << (64 - k)) - 1)


def gat_dropped(seed: torch.Tensor, nnz: int, heads: int, drop: int) -> torch.Tensor:
    """bool (nnz, heads): True where the draw of element q = e*heads + h, SplitMix64's
    finaliser of seed + (q+1) * golden ratio (int64 arithmetic wraps as uint64), has its
    top 24 bits below drop: csrc/tsgu_gat.h's tsgu_gat_draw, bit for bit."""
    q = torch.arange(1, nnz * heads + 1, dtype=torch.int64, device=seed.device)
    z = seed.reshape(()) + q * _GOLDEN
    z = (z ^ _shifted(z, 30)) * _MIX1
    z = (z ^ _shifted(z, 27)) * _MIX2
    return (_shifted(z ^ _shifted(z, 31), 40) < drop).reshape(nnz, heads)


def _gat_scores(A: CSRView, s: torch.Tensor, d: torch.Tensor, e):
    """(rows, cols, z): each entry's row and column, and z = s[j] + d[i] (+ e) (nnz, H)."""
    _, rows, cols = global_csr(A._replace(values=None))
    z = s.index_select(0, cols) + d.index_select(0, rows)
    return rows, cols, z if e is None else z + e


def _gat_weights(alpha: torch.Tensor, seed, drop: int, scale: float) -> torch.Tensor:
    """alpha with dropout: 0 where dropped, times scale elsewhere."""
    if not drop:
        return alpha
    return torch.where(gat_dropped(seed, *alpha.shape, drop), 0.0, alpha * scale)


def gat(A: CSRView, x: torch.Tensor, s: torch.Tensor, d: torch.Tensor, e, seed, drop: int, scale: float,
        slope: float):
    """As cpu.gat: the softmax of each row's scores, then the weighted rows of x."""
    rows, cols, z = _gat_scores(A, s, d, e)
    alpha = softmax(A._replace(values=torch.nn.functional.leaky_relu(z, slope)), True, False)
    w = _gat_weights(alpha, seed, drop, scale)
    out = x.new_zeros(A.nrows, *x.shape[1:]).index_add_(0, rows, w.unsqueeze(-1) * x.index_select(0, cols))
    return out, alpha


def gat_grad(A: CSRView, x: torch.Tensor, s: torch.Tensor, d: torch.Tensor, e, seed, drop: int, scale: float,
             slope: float, alpha: torch.Tensor, G: torch.Tensor, galpha):
    """As cpu.gat_grad."""
    rows, cols, z = _gat_scores(A, s, d, e)
    Gi = G.index_select(0, rows)
    ga = _gat_weights((Gi * x.index_select(0, cols)).sum(-1), seed, drop, scale)
    if galpha is not None:
        ga = ga + galpha
    c = alpha.new_zeros(A.nrows, alpha.shape[1]).index_add_(0, rows, alpha * ga)
    ge = alpha * (ga - c.index_select(0, rows))
    dz = torch.where(z > 0, ge, slope * ge)
    gd = torch.zeros_like(d).index_add_(0, rows, dz)
    gs = torch.zeros_like(s).index_add_(0, cols, dz)
    gx = torch.zeros_like(x).index_add_(0, cols, _gat_weights(alpha, seed, drop, scale).unsqueeze(-1) * Gi)
    return gx, gs, gd, dz
