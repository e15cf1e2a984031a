"""linalg_solve_triangular_compat: one triangular-solve entry for dense and sparse matrices,
as the published release names it (its tests import it from here).

``torch.linalg.solve_triangular`` takes only strided matrices.  A sparse ``A`` goes to
:func:`~torchsparsegradutils.sparse_triangular_solve` (our kernel, which checks the
structure and keeps the gradient sparse), not to the deprecated ``torch.triangular_solve``
that the release calls.
"""
import torch

from .sparse_solve import sparse_triangular_solve


def linalg_solve_triangular_compat(A: torch.Tensor, B: torch.Tensor, *, upper: bool,
                                   unitriangular: bool = False, transpose: bool = False) -> torch.Tensor:
    """``X`` with ``A X = B`` (``A^T X = B`` with ``transpose``) for a triangular ``A``.

    >>> A = torch.tensor([[2.0, 0.0], [1.0, 4.0]])
    >>> linalg_solve_triangular_compat(A, torch.tensor([[2.0], [9.0]]), upper=False)
    tensor([[1.],
            [2.]])
    >>> linalg_solve_triangular_compat(A.to_sparse_csr(), torch.tensor([[2.0], [9.0]]), upper=False)
    tensor([[1.],
            [2.]])
    """
    if A.layout == torch.strided:
        if transpose:
            A, upper = A.transpose(-2, -1), not upper
        return torch.linalg.solve_triangular(A, B, upper=upper, unitriangular=unitriangular)
    return sparse_triangular_solve(A, B, upper=upper, unitriangular=unitriangular, transpose=transpose)
