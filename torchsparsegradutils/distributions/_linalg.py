"""Products and solves with the sparse factor ``F`` on batches of vectors, each through
one call of a sparse kernel: ``op(F, .)`` on every vector (``_batch_sparse_mv``),
``F^T x`` without forming ``F^T`` (``_transposed_mv``) and the column norms of ``L^{-1}``
(``_inverse_factor_column_norms``, the precision forms' variance).
"""
import torch

from .._core.intake import as_csr
from .._ops.products import spmm_t
from ..sparse_solve import sparse_triangular_solve

# identity columns per block when the precision forms' variance solves L X = E
_VARIANCE_BLOCK_ELEMS = 1 << 22


def _batch_sparse_mv(op, bmat, bvec, **kwargs):
    """``op(bmat, .)`` applied to every vector in ``bvec``.

    ``bmat`` ``(n, m)`` takes ``bvec`` ``(..., m)``; a batched ``bmat``
    ``(B, n, m)`` takes ``(..., B, m)`` (item ``b`` of the matrix meets vectors
    ``[..., b, :]``), and a batch of one, ``(1, n, m)``, any ``(..., m)`` (its one
    item broadcasts, as in torch.distributions).  The vectors are gathered into
    the columns of one dense operand, so ``op`` (``sparse_mm``,
    ``sparse_triangular_solve`` with its keyword arguments) runs once.  Returns
    ``(..., n)`` or ``(..., B, n)``.

    >>> import torch
    >>> from torchsparsegradutils import sparse_mm
    >>> A = torch.tensor([[2., 0.], [1., 3.]]).to_sparse_csr()
    >>> _batch_sparse_mv(sparse_mm, A, torch.tensor([[1., 1.], [0., 1.]]))
    tensor([[2., 4.],
            [0., 3.]])
    """
    if bmat.dim() == 2 and bvec.dim() >= 1:
        lead, m = bvec.shape[:-1], bvec.shape[-1]
        out = op(bmat, bvec.reshape(-1, m).t(), **kwargs)            # (n, K)
        return out.t().reshape(*lead, out.shape[0])
    if bmat.dim() == 3 and bmat.shape[0] == 1 and bvec.dim() >= 1:
        lead, m = bvec.shape[:-1], bvec.shape[-1]
        out = op(bmat, bvec.reshape(1, -1, m).transpose(1, 2), **kwargs)    # (1, n, K)
        return out[0].t().reshape(*lead, out.shape[1])
    if bmat.dim() == 3 and bvec.dim() >= 2 and bvec.shape[-2] == bmat.shape[0]:
        lead, (b, m) = bvec.shape[:-2], bvec.shape[-2:]
        out = op(bmat, bvec.reshape(-1, b, m).permute(1, 2, 0), **kwargs)   # (B, n, K)
        return out.permute(2, 0, 1).reshape(*lead, b, out.shape[1])
    raise ValueError(f"Invalid dimensions for bmat and bvec: a (n, m) matrix takes (..., m) vectors and a "
                     f"(B, n, m) one (..., B, m), got {tuple(bmat.shape)} and {tuple(bvec.shape)}")


def _transposed_mv(F: torch.Tensor, values: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``F^T x`` for every vector of x (as in :func:`_batch_sparse_mv`), differentiable
    w.r.t. F's ``values`` and x, without forming F^T."""
    view = as_csr(F.detach())
    return _batch_sparse_mv(lambda A, Y: spmm_t(view, values, Y), F, x)


def _inverse_factor_column_norms(F: torch.Tensor, D) -> torch.Tensor:
    """``sum_k (L^{-1})_{ki}^2 (/ D_k)`` for every i: the diagonal of
    ``L^{-T} (D^{-1}) L^{-1}`` (``L = F``, or ``I + F`` where the diagonal ``D`` is
    given), by solves with blocks of identity columns."""
    n = F.shape[-1]
    batch = F.shape[:-2]
    k = max(1, min(n, _VARIANCE_BLOCK_ELEMS // max(n, 1)))
    parts = []
    for s in range(0, n, k):
        w = min(k, n - s)
        E = torch.zeros(n, w, dtype=F.dtype, device=F.device)
        E[torch.arange(s, s + w), torch.arange(w)] = 1
        X = sparse_triangular_solve(F, E.expand(*batch, n, w).contiguous(), upper=False,
                                    unitriangular=D is not None)          # columns s..s+w of L^{-1}
        sq = X.square()
        if D is not None:
            sq = sq / D.unsqueeze(-1)
        parts.append(sq.sum(-2))
    return torch.cat(parts, -1) if parts else F.values().new_zeros(*batch, 0)
