"""Our CUDA kernels (csrc/cuda/), built where `nvcc` was found (setup.py): the
products of sparse_mm on CUDA views.

Each structure is checked once on the device and remembered with what the kernels
derive from it (_core/structures.py, cuda_structure).  The route to these kernels is
chosen in _backends/__init__.py; the ops without CUDA kernels of their own go
through torch_ops/ on CUDA tensors.  The products take `mean` as every route's do,
always False here: the route sends reduce="mean" elsewhere.
"""
import torch

from .._core.native import _C
from .._core.structures import cuda_structure, stream
from .._core.view import CSRView, dense_operand, plain


def spmm(A: CSRView, B: torch.Tensor, mean: bool = False) -> torch.Tensor:
    """A @ B for every batch item."""
    s = cuda_structure(A)
    B = dense_operand(B)
    p = B.shape[-1]
    C = torch.empty((A.batch, A.nrows, p) if B.dim() == 3 else (A.nrows, p), dtype=B.dtype, device=B.device)
    _C.cuda_spmm(s.ptr, s.col, plain(A.values).reshape(-1), None, A.batch, A.nrows, A.ncols, B, C,
                 s.plan(p, B.dtype), stream(B))
    return C


def spmm_t(A: CSRView, G: torch.Tensor, mean: bool = False) -> torch.Tensor:
    """A^T @ G for every batch item, through A's transpose pattern: no atomics."""
    tptr, trow, tperm, t = cuda_structure(A).transpose()
    G = dense_operand(G)
    p = G.shape[-1]
    out = torch.empty((A.batch, A.ncols, p) if G.dim() == 3 else (A.ncols, p), dtype=G.dtype, device=G.device)
    _C.cuda_spmm(tptr, trow, plain(A.values).reshape(-1), tperm, A.batch, A.ncols, A.nrows, G, out,
                 t.plan(p, G.dtype), stream(G))
    return out


def sddmm(A: CSRView, G: torch.Tensor, B: torch.Tensor, mean: bool = False) -> torch.Tensor:
    """dot(G[k][i,:], B[k][j,:]) at every stored entry, shaped like A.col."""
    s = cuda_structure(A)
    G, B = dense_operand(G), dense_operand(B)
    g = torch.empty(s.col.shape, dtype=G.dtype, device=G.device)
    _C.cuda_sddmm(s.ptr, s.col, s.rows(), A.batch, A.nrows, A.ncols, G, B, g, stream(G))
    return g.reshape(A.col.shape)
