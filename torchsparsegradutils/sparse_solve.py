"""Solves with a sparse A whose gradient w.r.t. A stays sparse.

sparse_triangular_solve: substitution in C (csrc/trisolve.c) on the CPU, a sync-free
                         Triton kernel on CUDA (_backends/triton/trisolve.py), forward
                         and backward.
sparse_generic_solve:    any iterative solver (default MINRES), backward by the
                         adjoint solve, differentiable again (create_graph=True).
"""
from typing import Callable, Optional

import torch

from ._core.validate import SUPPORTED_DTYPES, ProductSpec, SystemSpec
from ._ops.solve import SparseGenericSolve, run_generic_solve  # noqa: F401  (SparseGenericSolve: the published name)
from ._ops.trisolve import SparseTriangularSolve, run_trisolve  # noqa: F401  (the published name)
from .utils.minres import minres

TRIANGULAR = ProductSpec("sparse_triangular_solve", SUPPORTED_DTYPES, rows=-2, square=True)
GENERIC = SystemSpec("sparse_generic_solve")


def sparse_triangular_solve(A, B: torch.Tensor, upper: bool = True,
                            unitriangular: bool = False, transpose: bool = False) -> torch.Tensor:
    r"""Solve ``A X = B`` (or ``A^T X = B``) for a sparse triangular ``A``; the gradient w.r.t. ``A`` is sparse.

    API-compatible with the published ``torchsparsegradutils.sparse_triangular_solve``.

    Parameters
    ----------
    A : sparse COO or CSR tensor, shape ``(n, n)`` or batched ``(b, n, n)``, float32 or float64,
        or a :class:`~torchsparsegradutils.SparseCSR` (traced by ``torch.compile``; the
        gradient goes to its values).
        Triangular: entries only on and above (``upper=True``) or on and below the diagonal.
    B : dense tensor, shape ``(n, p)`` or ``(b, n, p)``, A's dtype and device.
    upper : bool
        ``A`` is upper (default) or lower triangular.
    unitriangular : bool
        The diagonal is implicit ones; ``A`` must then store no diagonal entry.
    transpose : bool
        Solve ``A^T X = B`` instead (``A^T`` is never built).

    Returns
    -------
    Dense ``X`` shaped like ``B``.

    Gradients
    ---------
    With ``G = dL/dX`` and ``M = A`` (or ``A^T`` with ``transpose``):
    ``grad_B = M^{-T} G`` (one more triangular solve) and
    ``grad_M = -grad_B X^T``, evaluated only at ``A``'s stored positions, so
    ``grad_A`` is a sparse tensor in A's layout and no n x n matrix is formed.
    On CPU both directions run in C; on other devices through
    ``torch.triangular_solve`` with a CSR matrix.  Differentiable once for a torch
    sparse ``A`` (a backward with ``create_graph=True`` raises ``RuntimeError``);
    a ``SparseCSR`` gives second derivatives.

    Raises
    ------
    ValueError
        Non-tensor inputs; ranks not both 2D / both 3D; A not COO/CSR or B not
        strided; A not square; mismatched rows or batch sizes; different devices;
        malformed indices; an entry on the wrong side of the diagonal; a zero or
        missing diagonal entry (A singular); a stored diagonal with
        ``unitriangular=True``.
    TypeError
        Values not float32/float64, or A and B of different dtypes.

    Examples
    --------
    >>> L = torch.tensor([[2.0, 0.0], [1.0, 4.0]]).to_sparse_csr()
    >>> sparse_triangular_solve(L, torch.tensor([[2.0], [9.0]]), upper=False)
    tensor([[1.],
            [2.]])
    """
    return run_trisolve(TRIANGULAR, A, B, upper, unitriangular, transpose)


def sparse_generic_solve(A: torch.Tensor, B: torch.Tensor, solve: Optional[Callable[..., torch.Tensor]] = None,
                         transpose_solve: Optional[Callable[..., torch.Tensor]] = None,
                         **kwargs) -> torch.Tensor:
    r"""Solve ``A X = B`` with a pluggable (iterative) solver; the gradient w.r.t. ``A`` is sparse.

    API-compatible with the published ``torchsparsegradutils.sparse_generic_solve``.

    Parameters
    ----------
    A : sparse COO or CSR tensor ``(n, n)``, nonsingular.
    B : dense ``(n,)`` or ``(n, k)``.
    solve : callable ``solve(A, B, **kwargs) -> X`` solving ``A X = B``, given a
        detached ``A``.  Default :func:`~torchsparsegradutils.utils.minres`
        (symmetric ``A``).  Others: ``linear_cg`` (SPD), ``bicgstab`` (general).
    transpose_solve : callable ``transpose_solve(A, G, **kwargs) -> Y`` solving
        ``A^T Y = G`` (it is given ``A``, not ``A^T``).  Default: MINRES on ``A``
        itself when ``solve`` is also defaulted (``A`` symmetric), otherwise
        ``solve`` applied to a sparse ``A^T``.
    **kwargs : passed to both solvers (tolerances, ``settings=...``).

    Returns
    -------
    ``X`` shaped like ``B``.

    Gradients
    ---------
    ``grad_B = A^{-T} G`` by the adjoint solve and ``grad_A = -grad_B X^T`` only
    at A's stored positions (a sampled product; no n x n matrix).  The backward
    is itself differentiable, so ``create_graph=True`` gives second derivatives
    and Hessian-vector products w.r.t. ``A`` and ``B``.  For second derivatives
    w.r.t. a leaf ``values`` tensor, build ``A`` with
    :func:`torchsparsegradutils.sparse_csr_tensor` or
    :func:`torchsparsegradutils.sparse_coo_tensor`: PyTorch's own
    ``torch.sparse_coo_tensor`` backward into its values is not differentiable again.

    Raises
    ------
    ValueError
        Non-tensor inputs; A not 2D or not square; B not 1D/2D; mismatched rows;
        different devices.
    TypeError
        A not COO/CSR, B not strided, values not float32/float64.
    """
    return run_generic_solve(GENERIC, A, B, solve, transpose_solve, minres, kwargs)   # MINRES: A symmetric
