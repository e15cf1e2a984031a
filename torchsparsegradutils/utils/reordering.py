"""Orderings for locality: the reverse Cuthill-McKee ordering of a sparse matrix's graph
(csrc/rcm.c) and the permutation of a sparse matrix's rows and columns that applies one.

A matrix whose graph has locality (a mesh, a banded or geometric graph) but whose nodes
are numbered in no useful order has its entries everywhere; reordered, they lie near
the diagonal, so a product gathers the dense rows of nearby nodes, which share cache
lines.  A uniformly random graph has no locality for an ordering to find.
"""
from typing import Optional

import torch
from torch import Tensor

from .._core.intake import checked_view
from .._core.torch_sparse import coo_tensor, csc_tensor, csr_tensor
from .._core.validate import eager_only
from .._ops.order import rcm
from .utils import _compress_row_indices, _rows_of, _sort_coo_indices

__all__ = ["reverse_cuthill_mckee", "sparse_permute"]

_LAYOUTS = (torch.sparse_coo, torch.sparse_csr, torch.sparse_csc)


def _check_matrix(A, name: str) -> None:
    if not isinstance(A, Tensor) or A.layout not in _LAYOUTS:
        got = type(A).__name__ if not isinstance(A, Tensor) else str(A.layout)
        raise TypeError(f"{name} takes a sparse COO, CSR or CSC tensor, got {got}")
    if A.dim() != 2 or A.dense_dim() != 0:
        raise ValueError(f"{name} takes a 2D sparse matrix without dense dimensions, got shape {tuple(A.shape)}"
                         f" with {A.dense_dim()} dense dimensions")


def _checked_pattern(A: Tensor):
    """(ptr, col): A's CSR arrays (a CSC A's: those of A^T, the same graph), its indices
    checked first, in C on CPU (ValueError)."""
    A = A.detach()
    if A.layout == torch.sparse_csc:
        A = csr_tensor(A.ccol_indices(), A.row_indices(), A.values(), (A.shape[1], A.shape[0]))
    view = checked_view(A)
    return view.ptr, view.col


@eager_only      # torch sparse tensors: a graph break under torch.compile
def reverse_cuthill_mckee(A: Tensor, symmetric_mode: bool = False) -> Tensor:
    r"""The reverse Cuthill-McKee ordering of a square sparse matrix's graph, as
    :func:`scipy.sparse.csgraph.reverse_cuthill_mckee` computes one.

    The graph has an edge between ``i`` and ``j`` for each stored entry ``A[i, j]`` or
    ``A[j, i]`` off the diagonal (with ``symmetric_mode``, for each ``A[i, j]``: ``A``
    is taken to be symmetric, which spares its transpose).  Each connected component is
    numbered by a breadth-first search from a pseudo-peripheral node (George and Liu),
    taking each node's neighbours in increasing degree; reversed, that numbering is the
    ordering.  It puts the entries near the diagonal (a small bandwidth and profile)
    wherever the graph allows.  Only the pattern is read: values are ignored, and
    stored zeros count as entries.

    Parameters
    ----------
    A : Tensor
        Sparse COO, CSR or CSC, shape ``(n, n)``, int32 or int64 indices, any dtype.
    symmetric_mode : bool
        Take ``A``'s pattern as symmetric.  For a non-symmetric ``A`` the result is
        still a permutation, of the graph of ``A``'s entries alone.

    Returns
    -------
    Tensor
        ``perm``, int64 of shape ``(n,)`` on ``A``'s device: node ``perm[k]`` goes to
        position ``k``, so ``sparse_permute(A, perm)`` is ``A[perm][:, perm]``.
        Deterministic: the same ordering on every device and thread count (computed in
        C on the CPU; a CUDA ``A``'s pattern is copied there).

    Raises
    ------
    TypeError
        ``A`` is not a sparse COO, CSR or CSC tensor.
    ValueError
        ``A`` is not square and 2D, has dense dimensions, or malformed indices.

    Examples
    --------
    >>> import torch
    >>> from torchsparsegradutils.utils import reverse_cuthill_mckee, sparse_permute
    >>> path = torch.tensor([[0, 3, 1], [3, 1, 2]])     # the path 0 - 3 - 1 - 2
    >>> A = torch.sparse_coo_tensor(path, torch.ones(3), (4, 4))
    >>> perm = reverse_cuthill_mckee(A)
    >>> perm
    tensor([2, 1, 3, 0])
    >>> sparse_permute(A, perm).to_dense()                # its entries next to the diagonal
    tensor([[0., 0., 0., 0.],
            [1., 0., 0., 0.],
            [0., 1., 0., 0.],
            [0., 0., 1., 0.]])
    """
    _check_matrix(A, "reverse_cuthill_mckee")
    n = A.shape[0]
    if A.shape[1] != n:
        raise ValueError(f"reverse_cuthill_mckee takes a square matrix, got shape {tuple(A.shape)}")
    ptr, col = _checked_pattern(A)
    return rcm(ptr, col, n, bool(symmetric_mode))


@eager_only
def sparse_permute(A: Tensor, perm: Tensor, col_perm: Optional[Tensor] = None) -> Tensor:
    r"""``A[perm][:, col_perm]`` of a sparse matrix: ``out[k, l] = A[perm[k], col_perm[l]]``.

    In ``A``'s layout and index dtype, its entries sorted (a COO result is coalesced),
    values differentiable with respect to ``A``'s.  With ``col_perm`` left out, the
    rows' permutation permutes the columns too (``P A P^T``, ``A`` square), as an
    ordering of :func:`reverse_cuthill_mckee` is applied.  A product then follows as
    ``(A @ X)[perm] = sparse_permute(A, perm) @ X[perm]``.

    Parameters
    ----------
    A : Tensor
        Sparse COO, CSR or CSC, shape ``(n, m)``.
    perm : Tensor
        int32 or int64 of shape ``(n,)``, a permutation of ``0 .. n-1``.
    col_perm : Tensor, optional
        The same for the columns, shape ``(m,)``; ``perm`` where left out.

    Raises
    ------
    TypeError
        ``A`` is not a sparse COO, CSR or CSC tensor, or a permutation is not an
        integer tensor.
    ValueError
        ``A`` is not 2D or has dense dimensions, a permutation has the wrong length or
        is not one (an index out of range or repeated), ``col_perm`` is left out of a
        non-square ``A``, or ``A``'s indices are malformed.

    Examples
    --------
    >>> import torch
    >>> from torchsparsegradutils.utils import sparse_permute
    >>> A = torch.tensor([[1., 0., 2.], [0., 3., 0.]]).to_sparse_csr()
    >>> sparse_permute(A, torch.tensor([1, 0]), torch.tensor([2, 0, 1])).to_dense()
    tensor([[0., 0., 3.],
            [2., 1., 0.]])
    """
    _check_matrix(A, "sparse_permute")
    n, m = A.shape
    if col_perm is None:
        if n != m:
            raise ValueError(f"sparse_permute of a non-square A (shape {tuple(A.shape)}) needs col_perm")
        col_perm = perm
    inv_r, inv_c = _inverse(perm, n, "perm", A.device), _inverse(col_perm, m, "col_perm", A.device)
    _checked_pattern(A)              # before any index of A is read through
    if A.layout == torch.sparse_coo:
        A = A.coalesce()
        row, col = A.indices()
    elif A.layout == torch.sparse_csr:
        row, col = _rows_of(A.crow_indices()), A.col_indices()
    else:
        row, col = A.row_indices(), _rows_of(A.ccol_indices())
    itype = col.dtype
    row, col = inv_r[row], inv_c[col]
    major, minor, count = (col, row, m) if A.layout == torch.sparse_csc else (row, col, n)
    keys, order = _sort_coo_indices(torch.stack([major, minor]))
    values = A.values()[order]
    if A.layout == torch.sparse_coo:
        return coo_tensor(keys.to(itype), values, (n, m), is_coalesced=True)
    ptr = _compress_row_indices(keys[0], count).to(itype)
    if A.layout == torch.sparse_csr:
        return csr_tensor(ptr, keys[1].to(itype), values, (n, m))
    return csc_tensor(ptr, keys[1].to(itype), values, (n, m))


def _inverse(perm, n: int, name: str, device) -> Tensor:
    """inv with inv[perm[k]] = k, int64 on device, after checking that perm is a
    permutation of 0 .. n-1."""
    if not isinstance(perm, Tensor) or perm.dtype not in (torch.int32, torch.int64):
        got = perm.dtype if isinstance(perm, Tensor) else type(perm).__name__
        raise TypeError(f"{name} must be an int32 or int64 tensor, got {got}")
    if perm.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},), got {tuple(perm.shape)}")
    perm = perm.to(device=device, dtype=torch.int64)
    if n and (bool((perm < 0).any()) or bool((perm >= n).any())
              or bool((torch.bincount(perm, minlength=n) != 1).any())):
        raise ValueError(f"{name} must be a permutation of 0 .. {n - 1}: an index out of range or repeated")
    return torch.empty_like(perm).scatter_(0, perm, torch.arange(n, device=device))
