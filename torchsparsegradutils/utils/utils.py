"""Sparse tensor helpers: identity, block diagonals and their inverse, CSR stacking, COO -> CSR
(of tensors, or of bare index arrays with the permutation that carries values along).

All of them work from index arithmetic on the stored entries (O(nnz)); none
builds a dense matrix.
"""
from typing import List, Sequence, Tuple

import torch

from .._core.view import entry_rows
from .._core.torch_sparse import coo_tensor, csr_tensor

_LAYOUTS = (torch.sparse_coo, torch.sparse_csr)


def sparse_eye(size: Tuple[int, ...], *, layout: torch.layout = torch.sparse_coo,
               values_dtype: torch.dtype = torch.float64, indices_dtype: torch.dtype = torch.int64,
               device: torch.device = torch.device("cpu"), requires_grad: bool = False) -> torch.Tensor:
    """The identity as a sparse COO or CSR tensor of shape ``(n, n)`` or ``(b, n, n)``."""
    size = tuple(int(s) for s in size)
    if len(size) not in (2, 3):
        raise ValueError(f"size must be (n, n) or (b, n, n), got {size}")
    if size[-1] != size[-2]:
        raise ValueError(f"an identity matrix is square, got size {size}")
    if layout not in _LAYOUTS:
        raise ValueError(f"layout must be torch.sparse_coo or torch.sparse_csr, got {layout}")
    if values_dtype not in (torch.float32, torch.float64):
        raise ValueError(f"values_dtype must be torch.float32 or torch.float64, got {values_dtype}")
    if indices_dtype not in (torch.int32, torch.int64):
        raise ValueError(f"indices_dtype must be torch.int32 or torch.int64, got {indices_dtype}")
    n, b = size[-1], size[0] if len(size) == 3 else None
    ar = torch.arange(n, device=device, dtype=indices_dtype)
    if layout == torch.sparse_coo:
        if b is None:
            idx = torch.stack([ar, ar])
        else:
            bi = torch.arange(b, device=device, dtype=indices_dtype).repeat_interleave(n)
            idx = torch.stack([bi, ar.repeat(b), ar.repeat(b)])
        vals = torch.ones(idx.shape[1], dtype=values_dtype, device=device)
        out = coo_tensor(idx, vals, size, is_coalesced=True)
    else:
        crow = torch.arange(n + 1, device=device, dtype=indices_dtype)
        vals = torch.ones(n, dtype=values_dtype, device=device)
        if b is not None:
            crow, ar, vals = crow.repeat(b, 1), ar.repeat(b, 1), vals.repeat(b, 1)
        out = csr_tensor(crow, ar, vals, size)
    return out.requires_grad_(requires_grad)


def _check_2d_sparse(tensors: Sequence[torch.Tensor], name: str) -> torch.layout:
    if len(tensors) == 0:
        raise ValueError(f"{name} needs at least one tensor")
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} takes sparse tensors, got {type(t).__name__}")
    layout = tensors[0].layout
    if layout not in _LAYOUTS or any(t.layout != layout for t in tensors):
        raise ValueError(f"{name}: all tensors must be in the same layout, torch.sparse_coo or torch.sparse_csr")
    for t in tensors:
        if t.dim() != 2 or t.sparse_dim() != 2 or t.dense_dim() != 0:
            raise ValueError(f"{name}: every tensor must be 2D with 2 sparse and 0 dense dimensions, "
                             f"got {t.sparse_dim()} sparse and {t.dense_dim()} dense")
    return layout


def _rows_of(crow: torch.Tensor) -> torch.Tensor:
    """The row of every entry of a 2D CSR pattern, in crow's dtype."""
    return entry_rows(crow).to(crow.dtype)


def sparse_block_diag(*sparse_tensors: torch.Tensor) -> torch.Tensor:
    """A block-diagonal sparse matrix from 2D sparse tensors, all COO or all CSR (kept in that layout)."""
    if len(sparse_tensors) == 1 and isinstance(sparse_tensors[0], (list, tuple)):
        sparse_tensors = tuple(sparse_tensors[0])
    layout = _check_2d_sparse(sparse_tensors, "sparse_block_diag")
    rows = [t.shape[0] for t in sparse_tensors]
    cols = [t.shape[1] for t in sparse_tensors]
    r_off = [sum(rows[:k]) for k in range(len(rows))]
    c_off = [sum(cols[:k]) for k in range(len(cols))]
    size = (sum(rows), sum(cols))
    if layout == torch.sparse_coo:
        parts = [t.coalesce() for t in sparse_tensors]
        idx = torch.cat([p.indices() + torch.tensor([[r], [c]], device=p.device)
                         for p, r, c in zip(parts, r_off, c_off)], dim=1)
        vals = torch.cat([p.values() for p in parts])
        return coo_tensor(idx, vals, size, is_coalesced=True)
    crows, cols_, vals, nnz = [], [], [], 0
    for k, t in enumerate(sparse_tensors):
        crow = t.crow_indices()
        crows.append(crow[(0 if k == 0 else 1):] + nnz)
        cols_.append(t.col_indices() + c_off[k])
        vals.append(t.values())
        nnz += t.values().numel()
    return csr_tensor(torch.cat(crows), torch.cat(cols_), torch.cat(vals), size)


def sparse_block_diag_split(sparse_block_diag_tensor: torch.Tensor,
                            *shapes: Tuple[int, int]) -> Tuple[torch.Tensor, ...]:
    """The blocks of a block-diagonal sparse matrix, given their shapes in order (inverse of sparse_block_diag).

    Entries outside the diagonal blocks are an error."""
    A = sparse_block_diag_tensor
    layout = _check_2d_sparse([A], "sparse_block_diag_split")
    shapes = tuple((int(s[0]), int(s[1])) for s in shapes)
    if sum(s[0] for s in shapes) != A.shape[0] or sum(s[1] for s in shapes) != A.shape[1]:
        raise ValueError(f"the block shapes {shapes} do not add up to the matrix shape {tuple(A.shape)}")
    if layout == torch.sparse_coo:
        A = A.coalesce()
        row, col, vals = A.indices()[0], A.indices()[1], A.values()
    else:
        crow = A.crow_indices()
        row, col, vals = _rows_of(crow), A.col_indices(), A.values()
    r_bounds = torch.tensor([0] + [s[0] for s in shapes], device=row.device).cumsum(0)
    c_bounds = torch.tensor([0] + [s[1] for s in shapes], device=row.device).cumsum(0)
    block = torch.bucketize(row, r_bounds[1:], right=True)
    if bool((col < c_bounds[block]).any() or (col >= c_bounds[block + 1]).any()):
        raise ValueError("the matrix has entries outside the diagonal blocks of the given shapes")
    out = []
    counts = torch.bincount(block, minlength=len(shapes)).tolist()
    starts = [0]
    for c in counts:
        starts.append(starts[-1] + c)
    for k, (nr, nc) in enumerate(shapes):
        s, e = starts[k], starts[k + 1]
        r, c, v = row[s:e] - r_bounds[k], col[s:e] - c_bounds[k], vals[s:e]
        if layout == torch.sparse_coo:
            out.append(coo_tensor(torch.stack([r, c]), v, (nr, nc), is_coalesced=True))
        else:
            crow = torch.zeros(nr + 1, dtype=A.crow_indices().dtype, device=row.device)
            crow[1:] = torch.bincount(r, minlength=nr).cumsum(0)
            out.append(csr_tensor(crow, c.to(crow.dtype), v, (nr, nc)))
    return tuple(out)


def stack_csr(tensors: List[torch.Tensor], dim: int = 0) -> torch.Tensor:
    """Stack 2D CSR tensors with the same shape and number of entries into a batched CSR tensor (b, n, m)."""
    if not isinstance(tensors, (list, tuple)):
        raise TypeError(f"stack_csr expects a list of CSR tensors, got {type(tensors).__name__}")
    if len(tensors) == 0:
        raise ValueError("Cannot stack an empty list of tensors")
    if not all(isinstance(t, torch.Tensor) and t.layout == torch.sparse_csr for t in tensors):
        raise ValueError("All tensors must be in CSR layout")
    if not all(t.dim() == 2 for t in tensors):
        raise ValueError("All tensors must be 2D")
    if not all(t.shape == tensors[0].shape for t in tensors):
        raise ValueError("All tensors must have the same shape")
    if dim != 0:
        raise ValueError("CSR tensors can only be stacked along a new leading (batch) dimension, dim=0")
    if len({t.values().numel() for t in tensors}) != 1:
        raise ValueError("batched CSR needs the same number of stored entries in every tensor")
    crow = torch.stack([t.crow_indices() for t in tensors])
    col = torch.stack([t.col_indices() for t in tensors])
    vals = torch.stack([t.values() for t in tensors])
    return csr_tensor(crow, col, vals, (len(tensors),) + tuple(tensors[0].shape))


def convert_coo_to_csr(sparse_coo_tensor: torch.Tensor) -> torch.Tensor:
    """A COO tensor ((n, m), or (b, n, m) with the same nnz per item) as CSR, keeping its index dtype."""
    A = sparse_coo_tensor
    if not isinstance(A, torch.Tensor) or A.layout != torch.sparse_coo:
        raise ValueError("convert_coo_to_csr expects a sparse COO tensor")
    if A.dim() not in (2, 3) or A.dense_dim() != 0:
        raise ValueError(f"convert_coo_to_csr expects a 2D or 3D COO tensor without dense dims, "
                         f"got shape {tuple(A.shape)}")
    A = A.coalesce()
    idx, vals = A.indices(), A.values()
    itype = idx.dtype
    n = A.shape[-2]
    if A.dim() == 2:
        crow = torch.zeros(n + 1, dtype=torch.int64, device=idx.device)
        crow[1:] = torch.bincount(idx[0], minlength=n).cumsum(0)
        return csr_tensor(crow.to(itype), idx[1].to(itype), vals, A.shape)
    b = A.shape[0]
    per = torch.bincount(idx[0], minlength=b)
    if b and bool((per != per[0]).any()):
        raise ValueError("batched CSR needs the same number of stored entries in every batch item")
    crow = torch.zeros(b, n + 1, dtype=torch.int64, device=idx.device)
    crow[:, 1:] = torch.bincount(idx[0] * n + idx[1], minlength=b * n).reshape(b, n).cumsum(1)
    k = int(per[0]) if b else 0
    return csr_tensor(crow.to(itype), idx[2].reshape(b, k).to(itype), vals.reshape(b, k), A.shape)


def _sort_coo_indices(indices: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """COO index columns ``(k, nnz)`` in lexicographic order, and the permutation that sorts them.

    Returns ``(indices[:, perm], perm)``: ``perm[e]`` is the original column of
    the e-th sorted one, so values follow as ``values[perm]``.  Stable (equal
    columns keep their order; duplicates are kept, not merged), any index dtype,
    no overflow however large the indices (one stable sort per index row).

    >>> import torch
    >>> from torchsparsegradutils.utils.utils import _sort_coo_indices
    >>> idx, perm = _sort_coo_indices(torch.tensor([[1, 0, 1], [2, 1, 0]]))
    >>> idx
    tensor([[0, 1, 1],
            [1, 0, 2]])
    >>> perm
    tensor([1, 2, 0])
    """
    if indices.dim() != 2:
        raise ValueError(f"indices must be 2D (index rows, nnz), got shape {tuple(indices.shape)}")
    perm = torch.arange(indices.shape[1], device=indices.device)
    for row in reversed(range(indices.shape[0])):  # least significant row first
        perm = perm[torch.argsort(indices[row, perm], stable=True)]
    return indices[:, perm], perm


def _compress_row_indices(row_indices: torch.Tensor, num_rows: int) -> torch.Tensor:
    """CSR row pointers ``(num_rows + 1,)`` from sorted COO row indices, in their dtype.

    >>> import torch
    >>> from torchsparsegradutils.utils.utils import _compress_row_indices
    >>> _compress_row_indices(torch.tensor([0, 0, 2, 2]), 3)
    tensor([0, 2, 2, 4])
    """
    if not isinstance(row_indices, torch.Tensor):
        raise TypeError(f"row_indices must be a torch.Tensor, got {type(row_indices).__name__}")
    if row_indices.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"row_indices must be int32 or int64, got {row_indices.dtype}")
    if row_indices.dim() != 1:
        raise ValueError(f"row_indices must be 1D, got shape {tuple(row_indices.shape)}")
    if not isinstance(num_rows, int) or num_rows < 0:
        raise ValueError(f"num_rows must be a non-negative integer, got {num_rows!r}")
    if row_indices.numel() and bool(((row_indices < 0) | (row_indices >= num_rows)).any()):
        raise ValueError(f"row_indices must lie in [0, {num_rows})")
    crow = torch.zeros(num_rows + 1, dtype=row_indices.dtype, device=row_indices.device)
    crow[1:] = torch.bincount(row_indices, minlength=num_rows).cumsum(0)
    return crow


def _demcompress_crow_indices(crow_indices: torch.Tensor, num_rows: int) -> torch.Tensor:
    """The row of every stored entry of a 2D CSR pattern (inverse of :func:`_compress_row_indices`).

    >>> import torch
    >>> from torchsparsegradutils.utils.utils import _demcompress_crow_indices
    >>> _demcompress_crow_indices(torch.tensor([0, 2, 2, 4]), 3)
    tensor([0, 0, 2, 2])
    """
    if crow_indices.dim() != 1 or crow_indices.numel() != num_rows + 1:
        raise ValueError(f"crow_indices must be 1D of length num_rows + 1 = {num_rows + 1}, "
                         f"got shape {tuple(crow_indices.shape)}")
    return _rows_of(crow_indices)


def convert_coo_to_csr_indices_values(coo_indices: torch.Tensor, num_rows: int, values=None):
    """CSR ``(crow_indices, col_indices, values_or_permutation)`` from COO index columns.

    ``coo_indices`` is ``(2, nnz)`` (row, col) or ``(3, nnz)`` (batch, row, col;
    every batch item with the same number of entries).  The columns are sorted
    (:func:`_sort_coo_indices`); the third result is ``values`` in CSR order
    when given, else the permutation ``perm`` with ``values_csr = values[perm]``
    -- the way to convert many value arrays on one fixed pattern.  Batched
    results are ``(b, num_rows + 1)``, ``(b, nnz_b)``, ``(b, nnz_b)``.

    >>> import torch
    >>> from torchsparsegradutils.utils import convert_coo_to_csr_indices_values
    >>> crow, col, vals = convert_coo_to_csr_indices_values(
    ...     torch.tensor([[2, 0, 1], [2, 1, 0]]), num_rows=3, values=torch.tensor([3.0, 1.0, 2.0]))
    >>> crow, col, vals
    (tensor([0, 1, 2, 3]), tensor([1, 0, 2]), tensor([1., 2., 3.]))
    >>> convert_coo_to_csr_indices_values(torch.tensor([[2, 0, 1], [2, 1, 0]]), num_rows=3)[2]
    tensor([1, 2, 0])
    """
    if not isinstance(coo_indices, torch.Tensor) or coo_indices.dim() != 2 or coo_indices.shape[0] not in (2, 3):
        raise ValueError("coo_indices must be a (2, nnz) [row, col] or (3, nnz) [batch, row, col] tensor")
    nnz = coo_indices.shape[1]
    if values is not None and values.shape[0] != nnz:
        raise ValueError(f"Number of values ({values.shape[0]}) does not match number of indices ({nnz})")
    if nnz and bool((coo_indices[-2] >= num_rows).any() or (coo_indices[-2] < 0).any()):
        raise ValueError(f"Row indices must lie in [0, num_rows = {num_rows})")
    idx, perm = _sort_coo_indices(coo_indices)
    out = values[perm] if values is not None else perm
    if idx.shape[0] == 2:
        return _compress_row_indices(idx[0], num_rows), idx[1], out
    batches, per = torch.unique_consecutive(idx[0], return_counts=True)
    b = batches.numel()
    if b and bool((per != per[0]).any()):
        raise ValueError("batched CSR needs the same number of stored entries in every batch item")
    k = nnz // b if b else 0
    # global row numbers (item-major), compressed once, then cut per item
    item = torch.repeat_interleave(torch.arange(b, device=idx.device), per)
    gcrow = _compress_row_indices(item * num_rows + idx[1], b * num_rows)
    starts = torch.arange(b, device=idx.device) * num_rows
    crow = gcrow[starts.unsqueeze(1) + torch.arange(num_rows + 1, device=idx.device)]
    crow = crow - (torch.arange(b, device=idx.device, dtype=crow.dtype) * k).unsqueeze(1)
    return crow, idx[2].reshape(b, k), out.reshape(b, k, *out.shape[1:])
