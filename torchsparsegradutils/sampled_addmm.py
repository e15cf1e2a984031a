"""sampled_addmm: ``beta * A + alpha * (X @ Y)`` evaluated only at A's stored entries.

The product at the pattern is an SDDMM, ``p[e] = dot(X[i, :], Y[:, j])`` for every
stored entry ``e = (i, j)``: _backends.sddmm (csrc/sddmm.c on CPU) reads X's rows
and the rows of ``Y^T`` (``Y.mT`` is a free view when Y is itself a transpose, as
``W.t()``; otherwise a copy of Y's k x m, never anything of size nnz x k; the
eager Function makes it once for the forward and grad_X, the custom op, which
saves the view so that an edit of Y in place is caught, in each).  Its
gradients are the sparse products of the pattern holding G = dL/d(result values):
``grad_X = alpha * G @ Y^T`` (spmm) and ``grad_Y = alpha * X^T @ G`` (spmm_t, as
``(G^T @ X)^T``), and ``grad_A = beta * G`` at the pattern: no dense n x m and no
nnz x k temporary.  A SparseCSR goes through the custom operator tsgu::sddmm
(_ops/products.py), which torch.compile traces and which is differentiable to any order;
a torch sparse tensor through the autograd Function SampledAddmm, run eagerly.
"""
from typing import Union

import torch
from torch import Tensor

from ._core.sparse_csr import SparseCSR
from ._core.validate import SparseSpec
from ._ops.sampled import run_sampled_addmm

__all__ = ["sampled_addmm"]

SPEC = SparseSpec(
    "sampled_addmm", (torch.sparse_coo, torch.sparse_csr), (2, 3),
    not_sparse=(ValueError, "{name}: A must be a sparse tensor or a SparseCSR, got {got}"),
    bad_layout=(ValueError, "{name}: A must be a sparse COO or CSR tensor or a SparseCSR, got layout {got}{hint}"),
    bad_rank=(ValueError, "{name}: A must be 2-D (n, m) or batched 3-D (b, n, m), got {got}-D"),
    hybrid=(ValueError, "{name}: A must have no dense dimensions (hybrid sparse tensors are not supported), "
                        "got {got}"),
    heads=True, dense_hint="; for a dense A use torch.addmm")   # dtypes: checked with X's and Y's


def sampled_addmm(A: Union[Tensor, SparseCSR], X: Tensor, Y: Tensor, beta: float = 1.0,
                  alpha: float = 1.0) -> Union[Tensor, SparseCSR]:
    r"""``beta * A + alpha * (X @ Y)`` at A's stored entries only, on A's pattern.

    PyTorch's :func:`torch.sparse.sampled_addmm` contract, for every layout, with
    gradients for A, X and Y that never densify: ``out[i, j] = beta * A[i, j] +
    alpha * sum_t X[i, t] * Y[t, j]`` for each stored ``(i, j)``; nothing else of
    ``X @ Y`` is computed.  (The scores of graph attention, ``q_i . k_j`` on the
    edges, are ``sampled_addmm(A, Q, K.mT, beta=0)``.)

    Parameters
    ----------
    A : sparse COO (coalesced first, as PyTorch does) or CSR tensor ``(n, m)``, or
        batched ``(b, n, m)`` (batched CSR, or COO with three sparse dims: each item
        with its own nnz), no dense dimensions; or a
        :class:`~torchsparsegradutils.SparseCSR` (which ``torch.compile`` traces).
        Multi-head: a 2-D ``SparseCSR`` whose ``values`` are ``(nnz, H)`` takes
        ``X`` ``(H, n, k)`` and ``Y`` ``(H, k, m)`` and gives values ``(nnz, H)``,
        head ``h`` being ``beta * values[:, h] + alpha * (X[h] @ Y[h])`` at the
        pattern.  ``(nnz, H)`` is the layout of the edge scores that
        :func:`sparse_softmax` takes head by head (and PyG's GAT holds); ``X`` and
        ``Y`` are head-major so that each head's product is one batch item of the
        kernels, reading contiguous rows of ``X[h]`` and of ``Y[h]^T``.
    X : dense ``(n, k)`` (``(b, n, k)`` for a batched A), A's dtype and device.
    Y : dense ``(k, m)`` (``(b, k, m)``).  Read as the rows of ``Y^T``: a ``Y``
        that is a transpose (``W.t()``) is read in place, another is copied once
        (k x m).
    beta, alpha : real numbers.  With ``beta == 0`` A's values are ignored (NaN or
        inf in them do not propagate), as PyTorch does.

    Returns
    -------
    A sparse tensor in A's layout on A's pattern (an uncoalesced COO's coalesced
    pattern), or a :class:`SparseCSR` for a ``SparseCSR``; differentiable w.r.t.
    A (or its values), X and Y.

    Raises
    ------
    ValueError
        A not a sparse COO/CSR tensor or SparseCSR, X or Y not dense, ranks or shapes
        that do not fit, devices that differ, malformed sparse structure.
    TypeError
        A dtype other than float32/float64, dtypes that differ, beta or alpha not a
        real number.

    Examples
    --------
    >>> A = torch.tensor([[1.0, 0.0], [0.0, 2.0]]).to_sparse_csr()
    >>> X, Y = torch.ones(2, 3), torch.ones(3, 2)
    >>> sampled_addmm(A, X, Y, beta=0.5).to_dense()
    tensor([[3.5000, 0.0000],
            [0.0000, 4.0000]])
    """
    return run_sampled_addmm(SPEC, A, X, Y, beta, alpha)
