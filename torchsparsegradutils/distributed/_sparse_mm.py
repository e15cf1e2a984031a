"""The row-partitioned product :func:`dist_sparse_mm` and its autograd Function: the halo
rows of B exchanged, then the local kernels through ``_backends`` (forward: SpMM;
backward: SDDMM for A's values, the transposed SpMM with the reverse exchange for B).
"""
import torch
from torch.autograd.function import once_differentiable

from .. import _backends
from ._sparse_csr import DistSparseCSR


def dist_sparse_mm(A: DistSparseCSR, B: torch.Tensor) -> torch.Tensor:
    """This rank's rows of ``C = A @ B``, where `A` is this rank's :class:`DistSparseCSR`
    and `B` (``end - start`` x p, dense) its rows of B.  Collective: every rank of A's
    group calls it (and backward through it) together.

    Gradients: ``grad_B`` (this rank's rows of ``A^T @ G``, the halo parts summed
    into their owners) and, where ``A.values`` requires grad, the gradient of the local
    values at their stored entries (``sum_k G[i,k] B[j,k]``), never dense."""
    if not isinstance(A, DistSparseCSR):
        raise ValueError(f"A must be a DistSparseCSR, got {type(A).__name__}")
    if not isinstance(B, torch.Tensor) or B.layout is not torch.strided or B.dim() != 2:
        raise ValueError("B must be a 2D dense tensor (this rank's rows of B)")
    if B.shape[0] != A.end - A.start:
        raise ValueError(f"B must hold this rank's {A.end - A.start} rows (rows {A.start} .. {A.end - 1}); "
                         f"got {B.shape[0]}")
    if B.dtype != A.values.dtype:
        raise TypeError(f"A and B must have the same dtype, got {A.values.dtype} and {B.dtype}")
    if B.device != A.values.device:
        raise ValueError(f"A and B must be on the same device, got {A.values.device} and {B.device}")
    return DistSparseMatMul.apply(A.values, B, A)


class DistSparseMatMul(torch.autograd.Function):
    """The autograd Function behind :func:`dist_sparse_mm` (validate with it first)."""

    @staticmethod
    def forward(ctx, values, B, A):
        halo = A.exchange(B)
        Bx = torch.cat([B, halo]) if halo.shape[0] else B    # own rows, then the halo rows (p may be 0)
        view = A.view(values)
        ctx.A = A
        ctx.save_for_backward(values, Bx if ctx.needs_input_grad[0] else None)
        return _backends.spmm(view, Bx)

    @staticmethod
    @once_differentiable
    def backward(ctx, G):
        values, Bx = ctx.saved_tensors
        A = ctx.A
        view = A.view(values)
        grad_values = _backends.sddmm(view, G, Bx) if ctx.needs_input_grad[0] else None
        grad_B = A.exchange_back(_backends.spmm_t(view, G)) if ctx.needs_input_grad[1] else None
        return grad_values, grad_B, None
