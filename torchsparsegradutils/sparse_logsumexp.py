"""sparse_logsumexp and sparse_bidir_logsumexp: log-sum-exp over the stored values
of a sparse matrix (or a batch of them), by rows, by columns, both, or whole.

Every layout is read as a CSR view without copies (COO coalesced first; CSC as
the CSR view of its transpose, rows and columns swapped).  On CPU the kernels
are csrc/lse_rows.c (per row, and per whole item), csrc/lse_cols.c (per column,
no transpose, no atomics) and csrc/lse_grad.c (the values gradient
``G[group] * exp(v - lse[group])`` written straight into place), called through
_backends.lse / lse_grad.  Other devices (CUDA) take the same steps through PyTorch
scatter ops.  A SparseCSR input goes through the custom operators tsgu::lse and
tsgu::lse_grad (_ops/lse.py), which torch.compile traces; a torch sparse tensor through
the autograd Function SparseLogSumExp, run eagerly.
"""
from typing import Literal, Sequence, Union

import torch
from torch import Tensor

from ._core.validate import SUPPORTED_DTYPES, SparseSpec
from ._ops.lse import _bidir_2d, _bidir_batched  # noqa: F401  (the published release's tests import them from here)
from ._ops.lse import run_bidir_logsumexp, run_logsumexp

__all__ = ["sparse_logsumexp", "sparse_bidir_logsumexp"]

_NOT_2D_OR_3D = (NotImplementedError, "{name} supports 2-D or batched 3-D sparse tensors, got {got}")
SPEC = SparseSpec(
    "sparse_logsumexp", (torch.sparse_coo, torch.sparse_csr, torch.sparse_csc), (2, 3),
    not_sparse=_NOT_2D_OR_3D,
    bad_layout=(NotImplementedError, "{name} supports sparse COO, CSR and CSC tensors, got layout {got}"),
    bad_rank=_NOT_2D_OR_3D,
    hybrid=(ValueError, "{name} requires a sparse tensor with no dense dimensions, got {got}"),
    dtypes=SUPPORTED_DTYPES, bad_dtype=(TypeError, "{name} supports {dtypes} values, got {got}"), rank_first=True)
BIDIR_SPEC = SPEC._replace(name="sparse_bidir_logsumexp")


def sparse_logsumexp(input: Tensor, dim: Union[int, Sequence[int]], keepdim: bool = False,
                     include_zeros: bool = True) -> Tensor:
    r"""Log-sum-exp of a sparse tensor along ``dim``, with :func:`torch.logsumexp`'s shapes.

    Parameters
    ----------
    input : sparse COO, CSR or CSC tensor, ``(r, c)`` or batched ``(b, r, c)`` (each
        slice reduced on its own), float32 or float64, no dense dimensions; or a
        :class:`~torchsparsegradutils.SparseCSR`, which ``torch.compile`` traces (a
        torch sparse tensor breaks the graph there and runs eagerly).
    dim : int or sequence of ints.  2-D: ``1`` (one value per row), ``0`` (one per
        column) or ``[0, 1]`` (a scalar).  3-D: from ``{1, 2}``; the batch axis
        cannot be reduced.  Negative dims count from the end.
    keepdim : keep the reduced dimensions with size 1.
    include_zeros : ``True``: every absent entry counts as a stored 0 (adds
        ``exp(0)``), matching ``torch.logsumexp(input.to_dense(), dim)``.
        ``False``: absent entries are -inf; a group without stored values gives -inf.

    Returns
    -------
    Dense tensor.  Differentiable w.r.t. the stored values: the gradient of a
    value is its softmax weight ``exp(v - lse)`` times the gradient of its group,
    returned on the input's pattern (an uncoalesced COO's on the coalesced one;
    a ``SparseCSR``'s to its ``values``).  With a ``SparseCSR`` the gradient is
    itself differentiable (``create_graph=True``: second derivatives); a torch
    sparse tensor's is not (its backward with ``create_graph=True`` raises
    ``RuntimeError``).

    Raises
    ------
    NotImplementedError
        A layout other than COO/CSR/CSC, a rank other than 2 or 3, or a batched
        input with the batch axis in ``dim``.
    ValueError
        A hybrid sparse tensor (dense dimensions); malformed sparse structure.
    TypeError
        Values other than float32/float64.
    IndexError / RuntimeError
        ``dim`` out of range / empty or repeated, as :func:`torch.logsumexp`.

    Examples
    --------
    >>> A = torch.tensor([[0.0, 2.0], [1.0, 0.0]]).to_sparse()
    >>> sparse_logsumexp(A, dim=1, include_zeros=False)          # absent entries are -inf
    tensor([2., 1.])
    >>> torch.allclose(sparse_logsumexp(A, dim=1), torch.logsumexp(A.to_dense(), dim=1))
    True
    """
    return run_logsumexp(SPEC, input, dim, keepdim, include_zeros)

def sparse_bidir_logsumexp(input: Tensor, keepdim: bool = False, include_zeros: bool = True,
                           output_layout: Literal["tuple", "padded", "nested"] = "tuple"):
    r"""Column-wise and row-wise log-sum-exp of a sparse tensor in one call.

    For a 2-D input equal to ``(sparse_logsumexp(input, 0), sparse_logsumexp(input, 1))``;
    for a batched ``(b, r, c)`` input to the reductions over dims 1 and 2.

    Parameters
    ----------
    input, include_zeros : as for :func:`sparse_logsumexp`.
    keepdim : keep the reduced dimension (``output_layout="tuple"`` only).
    output_layout : ``"tuple"``: ``(col_lse, row_lse)``, column result first, shapes
        ``(c,)``, ``(r,)`` (batched ``(b, c)``, ``(b, r)``).  ``"padded"``: one tensor
        ``(2, G)`` (batched ``(2, b, G)``), ``G = max(r, c)``, ``[0]`` the column and
        ``[1]`` the row result, each padded with -inf; the tuple's tensors are views
        of it.  ``"nested"``: ``torch.nested.as_nested_tensor([col_lse, row_lse])``.

    Returns
    -------
    A tuple of two dense tensors, or one tensor, as ``output_layout`` says.  Each
    stored value's gradient sums its row's and its column's softmax terms.

    Raises
    ------
    As :func:`sparse_logsumexp`, and ``ValueError`` for an unknown
    ``output_layout`` or ``keepdim=True`` with a layout other than ``"tuple"``.

    Examples
    --------
    >>> A = torch.tensor([[0.0, 2.0], [1.0, 0.0]]).to_sparse()
    >>> cols, rows = sparse_bidir_logsumexp(A, include_zeros=False)
    >>> cols, rows
    (tensor([1., 2.]), tensor([2., 1.]))
    """
    return run_bidir_logsumexp(BIDIR_SPEC, input, keepdim, include_zeros, output_layout)
