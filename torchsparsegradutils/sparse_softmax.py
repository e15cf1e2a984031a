"""sparse_softmax and sparse_log_softmax: softmax over the stored entries of each row
(or column) of a sparse matrix, or of each item of a batch, absent entries left out.

Every layout is read as a CSR view (COO coalesced first, as torch.sparse.softmax does;
CSC as the CSR view of its transpose, rows and columns swapped).  On CPU the kernels
are csrc/softmax_rows.c (max, shifted sum of exps and output, row by row) and
csrc/softmax_grad.c (``y * (g - sum g*y)``, or ``g - exp(y) * sum g`` for the log),
called through _backends.softmax / softmax_grad; a COO tensor's rows through
csrc/softmax_coo.c (_backends.softmax_tensor), which checks its indices, builds the view's
row pointers and takes the softmax in one pass; columns through csrc/softmax_cols.c and
csrc/softmax_cols_grad.c, with no transpose (each thread owns a range of the columns and
streams the entries in row order).  Other devices take the same steps through PyTorch
scatter ops.  A SparseCSR input goes through the custom operators tsgu::softmax and
tsgu::softmax_grad (_ops/softmax.py), which torch.compile traces and which are differentiable
to any order; a torch sparse tensor through the autograd Function SparseSoftmax, run
eagerly.
"""
from typing import Union

import torch
from torch import Tensor

from ._core.sparse_csr import SparseCSR
from ._core.validate import HALF_DTYPES, SUPPORTED_DTYPES, SparseSpec
from ._ops.softmax import DimensionError, run_softmax  # noqa: F401  (DimensionError: raised for dim)

__all__ = ["sparse_softmax", "sparse_log_softmax"]

SPEC = SparseSpec(
    "sparse_softmax", (torch.sparse_coo, torch.sparse_csr, torch.sparse_csc), (2, 3),
    not_sparse=(ValueError, "{name} takes a sparse tensor or a SparseCSR, got {got}"),
    bad_layout=(ValueError, "{name} takes a sparse COO, CSR or CSC tensor or a SparseCSR, got layout {got}{hint}"),
    bad_rank=(ValueError, "{name} takes a 2-D (n, m) or batched 3-D (b, n, m) sparse tensor, got {got}-D"),
    hybrid=(ValueError, "{name} takes a sparse tensor with no dense dimensions, got {got}"),
    dtypes=HALF_DTYPES + SUPPORTED_DTYPES, bad_dtype=(TypeError, "{name} supports {dtypes} values, got {got}"),
    heads=True, dense_hint="; for a dense tensor use torch.softmax")
LOG_SPEC = SPEC._replace(name="sparse_log_softmax")


def sparse_softmax(A: Union[Tensor, SparseCSR], dim: int = -1) -> Union[Tensor, SparseCSR]:
    r"""Softmax over the stored entries of each row (``dim=-1``) or column (``dim=-2``).

    ``y[i, j] = exp(A[i, j]) / sum_k exp(A[i, k])`` with ``k`` running over row ``i``'s
    stored entries only (absent entries are left out, not zeros): a masked softmax on
    A's pattern, as :func:`torch.sparse.softmax`.  A row without entries stays empty.

    Parameters
    ----------
    A : sparse COO, CSR or CSC tensor, ``(n, m)`` or batched ``(b, n, m)`` (COO with
        three sparse dims, or batched CSR), no dense dimensions; or a
        :class:`~torchsparsegradutils.SparseCSR`, which ``torch.compile`` traces.
        float16, bfloat16 (computed in float32, rounded once), float32 or float64.
        Multi-head: a ``SparseCSR`` whose ``values`` are ``(nnz, H)`` (``col_indices``'
        shape + ``(H,)``, the edge scores of H attention heads, as PyG's GAT holds
        them) takes the softmax of each head on its own, in one kernel call.
    dim : ``-1`` (each row) or ``-2`` (each column); for a 2-D ``A`` also ``1`` / ``0``,
        for a batched one ``2`` / ``1``.  The batch axis cannot be chosen.

    Returns
    -------
    A sparse tensor on A's pattern in A's layout (an uncoalesced COO's result is on the
    coalesced pattern, its duplicates summed first, as :func:`torch.sparse.softmax`),
    or a :class:`SparseCSR` for a ``SparseCSR``.  Differentiable w.r.t. A's values:
    the gradient comes back on A's pattern, never dense (with a ``SparseCSR``, to its
    ``values``, and differentiable again: second derivatives; a torch sparse tensor's
    backward with ``create_graph=True`` raises RuntimeError).

    Raises
    ------
    ValueError
        A dense tensor or a layout other than COO/CSR/CSC, a rank other than 2 or 3, a
        hybrid tensor, ``dim`` naming the batch axis, malformed sparse structure.
    IndexError / ValueError
        ``dim`` out of range (an error that is both).
    TypeError
        Values of another dtype, a ``dim`` that is not an int.

    Examples
    --------
    >>> A = torch.tensor([[0.0, 2.0, 2.0], [1.0, 0.0, 0.0]]).to_sparse()
    >>> sparse_softmax(A).to_dense()      # the absent entries take no share
    tensor([[0.0000, 0.5000, 0.5000],
            [1.0000, 0.0000, 0.0000]])
    """
    return run_softmax(SPEC, A, dim, False)


def sparse_log_softmax(A: Union[Tensor, SparseCSR], dim: int = -1) -> Union[Tensor, SparseCSR]:
    r"""Log-softmax over the stored entries of each row (``dim=-1``) or column (``dim=-2``).

    ``y[i, j] = A[i, j] - log sum_k exp(A[i, k])``, ``k`` over row ``i``'s stored entries,
    as :func:`torch.sparse.log_softmax`.  Arguments, result and errors as
    :func:`sparse_softmax`.

    Examples
    --------
    >>> A = torch.tensor([[0.0, 2.0, 2.0], [1.0, 0.0, 0.0]]).to_sparse()
    >>> sparse_log_softmax(A).values()
    tensor([-0.6931, -0.6931,  0.0000])
    """
    return run_softmax(LOG_SPEC, A, dim, True)

