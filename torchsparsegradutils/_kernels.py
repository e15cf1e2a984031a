"""Typed wrappers around the C kernels, one per kernel, on a CSRView.

CPU tensors go to torchsparsegradutils._C.  Other devices (CUDA) go through
PyTorch's own ops with the same meaning and, like the kernels, never build a
dense n x m matrix: until CUDA kernels of our own exist, this is their path.
"""
import torch

from . import _C
from ._csr import CSRView, entry_rows, plain

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


def _dense_for_c(X: torch.Tensor) -> torch.Tensor:
    """X as the kernels read a dense operand: plain (see _csr.plain), with
    unit-stride rows (any row and batch stride is fine), copied only if needed."""
    X = plain(X)
    return X if X.size(-1) <= 1 or X.stride(-1) == 1 else X.contiguous()


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
        A2, _, _ = _global_csr(A)
        C = torch.sparse.mm(A2, B.reshape(A.batch * A.ncols, p))
        return C.reshape(out_shape)
    C = torch.empty(out_shape, dtype=B.dtype)
    _C.spmm(A.ptr, A.col, plain(A.values), A.batch, A.nrows, A.ncols, _dense_for_c(B), C,
            torch.get_num_threads())
    return C


def spmm_t(A: CSRView, G: torch.Tensor) -> torch.Tensor:
    """A^T @ G for every batch item, without atomics or a transpose: each thread
    owns a range of A's columns (see csrc/spmm_t.c)."""
    if A.rows is not None:
        out = spmm_t(A._replace(rows=None), _item_rows(G).index_select(0, A.rows))
        return out.reshape(*A.shape[:-2], A.shape[-1], G.shape[-1])
    p = G.shape[-1]
    out_shape = (A.batch, A.ncols, p) if G.dim() == 3 else (A.ncols, p)
    if not _use_c(A.values, G):
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
        return _sddmm_gather(A, G, B)
    g = torch.empty(A.col.shape, dtype=G.dtype)
    _C.sddmm(A.ptr, A.col, A.batch, A.nrows, A.ncols, _dense_for_c(G), _dense_for_c(B), g,
             torch.get_num_threads())
    return g


def _global_csr(A: CSRView):
    """A as one block-diagonal 2D CSR matrix of (b*n) x (b*m), built from index
    arithmetic alone, with the global row and column of every entry."""
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
