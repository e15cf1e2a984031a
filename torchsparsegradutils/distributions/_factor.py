"""The sparse factor ``F`` of :class:`~torchsparsegradutils.distributions.SparseMultivariateNormal`
as stored entries: its checks (a square sparse COO/CSR of loc's size and dtype, lower
triangular) and where its entries sit (``_Pattern``, built once), with what is read
from them in O(nnz): the stored diagonal and the rows' weighted sums of squares.
"""
from typing import NamedTuple

import torch

from .._core.intake import checked_view
from .._core.view import entry_rows


class _Pattern(NamedTuple):
    """Where F's stored entries sit, in the order of ``F.values()`` flattened:
    ``row`` (item * n + row, as a flat row number), ``item_col`` (item * n + column),
    and the entries on the diagonal (``diag``: their positions, ``diag_row``: their
    flat rows).  Built once per distribution (the pattern of F is fixed)."""

    row: torch.Tensor
    item_col: torch.Tensor
    diag: torch.Tensor
    diag_row: torch.Tensor

    @staticmethod
    def of(F: torch.Tensor) -> "_Pattern":
        n = F.shape[-1]
        if F.layout == torch.sparse_coo:
            idx = F.indices()
            base = idx[0] * n if F.dim() == 3 else 0
            row, item_col = base + idx[-2], base + idx[-1]
        else:
            crow, col = F.crow_indices(), F.col_indices()
            row = entry_rows(crow)
            item_col = col.long() + (torch.arange(col.shape[0], device=col.device).unsqueeze(1) * n
                                     if F.dim() == 3 else 0)
            item_col = item_col.reshape(-1)
        diag = torch.nonzero(row == item_col).reshape(-1)
        return _Pattern(row, item_col, diag, row[diag])


def _factor_diagonal(F: torch.Tensor, values: torch.Tensor, pattern: _Pattern) -> torch.Tensor:
    """The stored diagonal of F (values ``values``) as (n,) or (B, n), zeros where
    none is stored; O(n) once the pattern is known."""
    d = values.reshape(-1)[pattern.diag]
    rows = F.shape[:-1].numel()
    if d.numel() == rows:               # every diagonal entry stored (distinct, in row order)
        return d.reshape(F.shape[:-1])
    return d.new_zeros(rows).index_add(0, pattern.diag_row, d).reshape(F.shape[:-1])


def _row_square_sums(F: torch.Tensor, values: torch.Tensor, pattern: _Pattern, weight=None) -> torch.Tensor:
    """``sum_j F_ij^2 w_j`` for every row i, (n,) or (B, n); O(nnz) per set of column
    weights ``weight`` ((n,) or (B', n), broadcasting against F's batch)."""
    sq = values.reshape(-1).square()
    if weight is not None and F.shape[:-2].numel() == 1:     # one item: every set of weights meets it
        sq = sq * weight[..., pattern.item_col]
        return sq.new_zeros(*sq.shape[:-1], F.shape[-1]).index_add(-1, pattern.row, sq)
    if weight is not None:
        sq = sq * weight.expand(F.shape[:-1]).reshape(-1)[pattern.item_col]
    return sq.new_zeros(F.shape[:-1].numel()).index_add(0, pattern.row, sq).reshape(F.shape[:-1])


def _check_factor(name: str, F, n: int, dtype) -> torch.Tensor:
    if not isinstance(F, torch.Tensor) or F.layout not in (torch.sparse_coo, torch.sparse_csr):
        layout = F.layout if isinstance(F, torch.Tensor) else type(F).__name__
        raise ValueError(f"{name} must be sparse COO or CSR, instead of {layout}")
    if F.dim() < 2:
        raise ValueError(f"{name} must be at least two-dimensional, with optional leading batch dimension")
    if F.dim() > 3:
        raise ValueError(f"{name} can only have 1 batch dimension, but has {F.dim() - 2}")
    if F.shape[-1] != F.shape[-2] or F.shape[-1] != n:
        raise ValueError(f"{name} must be square with the event size of loc ({n}), got shape {tuple(F.shape)}")
    if F.dtype != dtype:
        raise ValueError(f"{name} must have the dtype of loc ({dtype}), got {F.dtype}")
    checked_view(F.detach())          # its structure, before coalesce() or any index arithmetic reads it
    if F.layout == torch.sparse_coo and not F.is_coalesced():
        F = F.coalesce()
    return F


def _check_lower(name: str, pattern: _Pattern) -> None:
    """O(nnz): no stored entry above the diagonal."""
    if bool((pattern.item_col > pattern.row).any()):
        raise ValueError(f"{name} must be lower triangular: it stores an entry above the diagonal")
