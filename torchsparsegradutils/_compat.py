"""linalg_solve_triangular_compat: one triangular-solve entry for dense and sparse matrices.

``torch.linalg.solve_triangular`` takes only strided matrices; sparse CSR ones
still need the deprecated ``torch.triangular_solve`` (pytorch#87358), whose
deprecation warning is silenced here, in the one place that calls it.
"""
import warnings

import torch


def linalg_solve_triangular_compat(A: torch.Tensor, B: torch.Tensor, *, upper: bool,
                                   unitriangular: bool = False, transpose: bool = False) -> torch.Tensor:
    """``X`` with ``A X = B`` (``A^T X = B`` with ``transpose``) for a triangular ``A``.

    Strided ``A`` goes to ``torch.linalg.solve_triangular``, sparse ``A`` to
    ``torch.triangular_solve``.

    >>> A = torch.tensor([[2.0, 0.0], [1.0, 4.0]])
    >>> linalg_solve_triangular_compat(A, torch.tensor([[2.0], [9.0]]), upper=False)
    tensor([[1.],
            [2.]])
    """
    if A.layout == torch.strided:
        if transpose:
            A, upper = A.transpose(-2, -1), not upper
        return torch.linalg.solve_triangular(A, B, upper=upper, unitriangular=unitriangular)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"torch\.triangular_solve is deprecated", category=UserWarning)
        return torch.triangular_solve(B, A, upper=upper, transpose=transpose, unitriangular=unitriangular).solution
