"""Sparse @ sparse (sparse_mm): the product's index pairs, or PyTorch's CSR @ CSR
for the forward, and the gradients w.r.t. both operands' values."""
import torch

from ..._core import native
from ..._core.structures import cuda_columns_increase
from ..._core.torch_sparse import csr_tensor
from ..._core.view import CSRView, entry_rows
from ._common import _HALF, global_csr, global_matrix


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
    if not _columns_increase(ptr, col, B2.shape[1]):                # PyTorch's CPU product leaves rows unsorted
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


def _columns_increase(ptr: torch.Tensor, col: torch.Tensor, ncols: int) -> bool:
    """Whether the columns of every row of (ptr, col) increase: one pass, one synchronisation
    (one kernel on CUDA where ours are built)."""
    nnz = col.numel()
    if nnz < 2:
        return True
    if col.is_cuda and native.cuda_kernels():
        return cuda_columns_increase(ptr, col, ncols)
    starts = torch.zeros(nnz + 1, dtype=torch.bool, device=col.device)
    starts[ptr] = True                          # entry e opens a row: e and e - 1 may descend
    return not bool(((col[1:] <= col[:-1]) & ~starts[1:nnz]).any())
