"""Random operands: seeded generators, random dense matrices, the same matrix as a sparse
tensor in every layout and memory arrangement, dense operands in every arrangement, and
reading a sparse tensor's entries back."""
import math
import zlib
from typing import Tuple

import torch

import torchsparsegradutils as tsgu


def seeded(*key) -> torch.Generator:
    """A generator seeded from `key`; the same seed in every process (unlike hash())."""
    return torch.Generator().manual_seed(zlib.crc32(repr(key).encode()))


def random_dense(shape, dtype=torch.float64, gen=None, *, nnz=None, density=0.4, scale=1.0, same_pattern=False,
                 empty_rows=True, seed=0):
    """A random dense (..., n, m) matrix (or batch of them), drawn from `gen` (default: a
    generator seeded with `seed`), with nonzero values where it stores an entry:

    - nnz given: exactly min(nnz, cells) nonzero standard-normal values in each (n, m)
      item, at random cells; with empty_rows (and n > 1) row 0 stays empty;
    - else: normal values times `scale` at about `density` of the cells (with
      same_pattern, the same cells in every batch item: a batched CSR needs one nnz per
      item); with empty_rows (and n, m > 2) row 1 and column 2 stay empty.
    """
    gen = torch.Generator().manual_seed(seed) if gen is None else gen
    shape = tuple(shape)
    if nnz is not None:
        out = torch.zeros(shape, dtype=dtype)
        n, m = shape[-2:]
        first = 1 if empty_rows and n > 1 else 0
        cells = (n - first) * m
        k = min(nnz, cells)
        for item in out.view(math.prod(shape[:-2]), n, m):
            pos = torch.randperm(cells, generator=gen)[:k] + first * m
            vals = torch.randn(k, generator=gen, dtype=dtype)
            item.view(-1)[pos] = torch.where(vals == 0, torch.ones_like(vals), vals)
        return out
    D = torch.randn(shape, generator=gen, dtype=torch.float64) * scale
    D = D.masked_fill(torch.rand(shape[-2:] if same_pattern else shape, generator=gen) >= density, 0.0)
    if empty_rows and shape[-2] > 2 and shape[-1] > 2:
        D[..., 1, :] = 0.0
        D[..., :, 2] = 0.0
    return D.to(dtype)


# COO layouts: the index array as coalesce() leaves it, uncoalesced (duplicates,
# shuffled), a slice of a wider buffer, column-major, every other column of a
# buffer, and one entry repeated through an expanded (stride-0) index array.
# The coalesced arrangements are built with is_coalesced=True, so the op reads
# the strided array itself.  CSR: plain, or crow/col/values as strided views.
COO_LAYOUTS = ("coo", "coo_uncoalesced", "coo_sliced", "coo_colmajor", "coo_step", "coo_expanded")
CSR_LAYOUTS = ("csr", "csr_strided")
LAYOUTS = COO_LAYOUTS + CSR_LAYOUTS
FULL_RANK_LAYOUTS = tuple(lay for lay in LAYOUTS if lay != "coo_expanded")   # one entry: singular for n > 1


def _strided(t: torch.Tensor, how: str) -> torch.Tensor:
    """t (1D or 2D) with the same values in another memory arrangement."""
    if how == "sliced":            # a prefix of a longer buffer (what coalesce() returns)
        return torch.cat([t, t], -1)[..., : t.shape[-1]]
    if how == "colmajor":
        return t.t().contiguous().t() if t.dim() == 2 else t
    if how == "step":              # every other element of a buffer twice as long
        return torch.stack([t, t], -1).reshape(*t.shape[:-1], 2 * t.shape[-1])[..., ::2]
    raise ValueError(how)


def to_sparse(D: torch.Tensor, layout: str, itype=torch.int64, gen=None) -> torch.Tensor:
    """A sparse tensor in `layout` (see LAYOUTS) for the dense (n, m) or (b, n, m) D.
    "coo_expanded" keeps only D's first stored entry (its indices are one column
    expanded), so take the reference from the returned tensor, not from D."""
    if layout.startswith("csr"):
        S = D.to_sparse_csr()
        crow, col, val = S.crow_indices().to(itype), S.col_indices().to(itype), S.values()
        if layout == "csr_strided":
            crow, col, val = _strided(crow, "step"), _strided(col, "step"), _strided(val, "step")
        return torch.sparse_csr_tensor(crow, col, val, D.shape)
    A = D.to_sparse().coalesce()
    idx, val = A.indices(), A.values()
    if layout == "coo":
        return A
    if layout == "coo_unflagged":      # sorted and unique, but not flagged coalesced
        return torch.sparse_coo_tensor(idx, val, D.shape)
    if layout in ("coo_sliced", "coo_colmajor", "coo_step"):
        return torch.sparse_coo_tensor(_strided(idx, layout[4:]), val, D.shape, is_coalesced=True)
    if layout == "coo_expanded":
        k = min(val.numel(), 1) * 3
        parts = val[:1].repeat(k) * torch.tensor([0.5, 0.25, 0.25], dtype=val.dtype)[:k]
        return torch.sparse_coo_tensor(idx[:, :1].expand(-1, k), parts, D.shape)
    assert layout == "coo_uncoalesced", layout
    nd = max(1, val.numel() // 3) if val.numel() else 0
    part = torch.rand(nd, generator=gen, dtype=val.dtype)
    val = val.clone()
    dup_val = val[:nd] * part
    val[:nd] -= dup_val
    idx2 = torch.cat([idx, idx[:, :nd]], 1)
    val2 = torch.cat([val, dup_val])
    perm = torch.randperm(val2.numel(), generator=gen)
    return torch.sparse_coo_tensor(idx2[:, perm], val2[perm], D.shape)


def to_layout(D: torch.Tensor, layout: str, itype=torch.int64) -> torch.Tensor:
    """D as a sparse tensor in one of torch's layouts, as the softmax and logsumexp tests
    sweep them: "coo", "coo_uncoalesced" (every entry split in two duplicates, in reversed
    order; unlike to_sparse's), "csr" or "csc" (batched: one pattern per item, see
    random_dense's same_pattern)."""
    if layout == "csr":
        A = D.to_sparse_csr()
        return torch.sparse_csr_tensor(A.crow_indices().to(itype), A.col_indices().to(itype), A.values(), D.shape)
    if layout == "csc":
        A = D.to_sparse_csc()
        return torch.sparse_csc_tensor(A.ccol_indices().to(itype), A.row_indices().to(itype), A.values(), D.shape)
    A = D.to_sparse().coalesce()
    if layout == "coo":
        return A
    assert layout == "coo_uncoalesced", layout
    idx, val = A.indices(), A.values()
    U = torch.sparse_coo_tensor(torch.cat([idx, idx], 1).flip(1), torch.cat([val * 0.25, val * 0.75]).flip(0),
                                D.shape)
    assert val.numel() == 0 or not U.is_coalesced()
    return U


def values_of(A: torch.Tensor) -> torch.Tensor:
    return A._values() if A.layout == torch.sparse_coo else A.values()


def structure_of(A: torch.Tensor) -> Tuple[torch.Tensor, ...]:
    """The index arrays of A as stored (no copy, strides kept)."""
    if A.layout == torch.sparse_coo:
        return (A._indices(),)
    return A.crow_indices(), A.col_indices()


def leaf_like(t: torch.Tensor) -> torch.Tensor:
    """A fresh leaf tensor with t's values, sizes and strides."""
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype).copy_(t)


def rebuild(A: torch.Tensor, values: torch.Tensor, ours: bool = True) -> torch.Tensor:
    """A's structure (its own index arrays) holding `values`, made by the usual
    constructor: torch.sparse_coo_tensor (keeping A's coalesced flag), or for CSR
    our sparse_csr_tensor (`ours`) or torch's."""
    if A.layout == torch.sparse_coo:
        return torch.sparse_coo_tensor(A._indices(), values, A.shape, is_coalesced=A.is_coalesced())
    make = tsgu.sparse_csr_tensor if ours else torch.sparse_csr_tensor
    return make(A.crow_indices(), A.col_indices(), values, A.shape)


def entry_indices(A: torch.Tensor) -> Tuple[torch.Tensor, ...]:
    """(batch?, row, col) of every stored entry in A's value order, by torch ops alone."""
    if A.layout == torch.sparse_coo:
        return tuple(A._indices().long())
    rows, col = compressed_positions(A.crow_indices(), A.col_indices())
    n = A.shape[-2]
    if A.dim() == 3:
        return rows // n, rows % n, col
    return rows, col


def compressed_positions(crow: torch.Tensor, col: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """(row, column) of every entry of CSR arrays, by torch ops alone: for a batch,
    (b, n+1) pointers or the stacked (b*n+1,) ones, the global row k*n + i."""
    crow = crow.long()
    counts = (crow[..., 1:] - crow[..., :-1]).reshape(-1)
    return torch.repeat_interleave(torch.arange(counts.numel()), counts), col.long().reshape(-1)


def dense_of(A: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """The dense matrix of A's structure holding `values` (duplicates summed),
    differentiable in `values`: the reference every op is compared with."""
    out = torch.zeros(A.shape, dtype=values.dtype)
    return out.index_put(entry_indices(A), values.reshape(-1), accumulate=True)


def pattern_of(A: torch.Tensor) -> torch.Tensor:
    """Boolean (..., n, m): where A stores an entry."""
    return dense_of(A, torch.ones(values_of(A).shape, dtype=torch.float64)) > 0


B_MODES = ("contig", "colmajor", "sliced", "expanded", "neg")


def dense_operand(shape, dtype, gen, mode: str = "contig") -> torch.Tensor:
    """A random dense tensor in one memory arrangement: contiguous, column-major,
    a slice of a wider buffer, expanded (stride 0 on the second-to-last dim), or
    with PyTorch's negative bit set (is_neg(): its values are minus its memory)."""
    X = torch.randn(shape, generator=gen, dtype=dtype)
    if mode == "contig" or X.dim() == 0 and mode != "neg" or X.dim() == 1 and mode == "colmajor":
        return X
    if mode == "colmajor":
        return X.transpose(-1, -2).contiguous().transpose(-1, -2)
    if mode == "sliced":
        return torch.cat([X, X], -1)[..., : X.shape[-1]]
    if mode == "expanded":
        if X.dim() < 2:
            return X[:1].expand(X.shape)
        return X[..., :1, :].expand(X.shape)
    if mode == "neg":
        return (-X)._neg_view()
    raise ValueError(mode)


# the 16-bit value dtypes (of the ops that take them)
HALF_DTYPES = (torch.float16, torch.bfloat16)


def shared_pattern_dense(batch, n, m, nnz, dtype, gen, empty_rows=True):
    """random_dense with one pattern for all batch items (values differ): the product of
    two such batches has one entry count per item, as PyTorch's batched CSR needs."""
    pattern = random_dense((n, m), dtype, gen, nnz=nnz, empty_rows=empty_rows) != 0
    vals = torch.randn(batch, n, m, generator=gen, dtype=dtype)
    return torch.where(pattern, torch.where(vals == 0, torch.ones_like(vals), vals), torch.zeros_like(vals))


def tri_dense(batch, n, upper, unit, dtype, gen, density=0.4):
    """Dense (batch, n, n) triangular with one shared pattern (batched CSR needs equal
    nnz) and a diagonal in [2, 3) (none if unit)."""
    mask = torch.rand(n, n, generator=gen) < density
    D = torch.randn(batch, n, n, generator=gen, dtype=dtype) * mask
    D = D.triu(1) if upper else D.tril(-1)
    if not unit:
        D = D + torch.diag_embed(2 + torch.rand(batch, n, generator=gen, dtype=dtype))
    return D


def spd_dense(n, nnz, dtype, gen):
    """A symmetric, strictly diagonally dominant (so SPD) (n, n) with about nnz off-diagonal entries."""
    M = random_dense((n, n), dtype, gen, nnz=nnz // 2, empty_rows=False)
    S = M + M.t()
    S.fill_diagonal_(0)
    return S + torch.diag(S.abs().sum(1) + 1 + torch.rand(n, generator=gen, dtype=dtype))


def tall_dense(rows, cols, nnz, dtype, gen):
    """(rows, cols), rows >= cols, full column rank: a dominant diagonal on top of random entries."""
    D = random_dense((rows, cols), dtype, gen, nnz=nnz)
    D[:cols] += torch.diag(3 + torch.rand(cols, generator=gen, dtype=dtype))
    return D
