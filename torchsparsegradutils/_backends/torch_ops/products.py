"""Products (sparse_mm): spmm, spmm_t and sddmm, with the mean's D^-1 A."""
import torch

from ..._core.torch_sparse import coo_tensor
from ..._core.view import CSRView
from ._common import _HALF, global_csr, global_matrix

# Entries per chunk of the gather-based SDDMM: bounds its temporaries to about
# this many elements times p, instead of nnz times p.
_GATHER_CHUNK_ELEMS = 1 << 24


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
