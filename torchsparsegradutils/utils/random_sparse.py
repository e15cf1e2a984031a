"""Random sparse matrices for tests and benchmarks: general, triangular, and SPD.

Positions are drawn without replacement (every stored entry is distinct), so
the results are coalesced COO or valid CSR; batched results hold the same
number of entries per item, as batched CSR requires.

Seeded draws of up to ``SEEDED_DRAW_LIMIT`` entries in all follow the 0.2.7
release's sequence: positions by rejection from Python's global ``random``
module (so ``random.seed`` fixes them), then the values from torch's generator
in the same order, so code seeded against the release gets the same matrices
(one exception: a 2-D COO ``rand_sparse_tri(well_conditioned=True)``, whose
diagonal the release draws as max(min_diag_value, lo) + (hi - lo) * u while its CSR
and batched forms, and ours everywhere, use min_diag_value + 0.5 * u;
``rand_sparse(well_conditioned=True)`` draws differently, see its docstring).
Larger draws are vectorised in torch (O(nnz) memory, any n x m) and follow only
``torch.manual_seed``.

``generate_random_sparse_*`` are the published release's per-layout names for
the same two generators (``rand_sparse``, ``rand_sparse_tri``).
"""
import random
from typing import Callable, Optional, Tuple, Union

import torch

from .._core.torch_sparse import coo_tensor, csr_tensor
from .utils import convert_coo_to_csr

_LAYOUT_MSG = "Unsupported layout type. It should be either torch.sparse_coo or torch.sparse_csr"


def _check_dtypes(layout, indices_dtype) -> None:
    if layout not in (torch.sparse_coo, torch.sparse_csr):
        raise ValueError(_LAYOUT_MSG)
    if indices_dtype not in (torch.int32, torch.int64):
        raise ValueError(f"indices_dtype must be torch.int64 or torch.int32, got {indices_dtype}")


def _check_size(size) -> Tuple[Optional[int], int, int]:
    size = tuple(int(s) for s in size)
    if len(size) not in (2, 3) or any(s < 0 for s in size):
        raise ValueError(f"size must be (n_rows, n_cols) or (batch, n_rows, n_cols), got {size}")
    return (size[0] if len(size) == 3 else None), size[-2], size[-1]


def _draw(candidates: int, nnz: int, b: int, device) -> torch.Tensor:
    """(b, nnz) distinct sorted positions in [0, candidates) per item, uniformly
    chosen, in O(nnz) memory however large `candidates` (n*m) is."""
    if nnz == 0:
        return torch.zeros(b, 0, dtype=torch.long, device=device)
    if 2 * nnz > candidates:  # dense draw: enumerating the candidates costs < 2*nnz
        keys = torch.rand(b, candidates, device=device)
        return keys.topk(nnz, dim=1).indices.sort(dim=1).values
    out = []
    for _ in range(b):
        got = torch.empty(0, dtype=torch.long, device=device)
        while got.numel() < nnz:  # oversample, keep the distinct ones; at most half are taken
            more = torch.randint(0, candidates, (nnz + nnz // 4 + 16,), device=device)
            got = torch.unique(torch.cat([got, more]))
        # a uniform subset of a uniform random set is a uniform subset
        out.append(got[torch.randperm(got.numel(), device=device)[:nnz]].sort().values)
    return torch.stack(out)


SEEDED_DRAW_LIMIT = 1 << 16


def _draw_seeded(b: int, nnz: int, n: int, m: int, keep: Callable[[int, int], bool], diagonal: bool, device):
    """(b, nnz) rows and cols per item, drawn as the release draws them: the
    diagonal first when ``diagonal``, then uniform (r, c) from Python's ``random``
    kept when ``keep(r, c)``, until nnz distinct; returned in set order."""
    rows, cols = [], []
    for _ in range(b):
        coords = set((i, i) for i in range(n)) if diagonal else set()
        while len(coords) < nnz:
            r, c = random.randrange(n), random.randrange(m)
            if keep(r, c):
                coords.add((r, c))
        rows.extend(r for r, _ in coords)
        cols.extend(c for _, c in coords)
    as_tensor = lambda v: torch.tensor(v, dtype=torch.long, device=device).reshape(b, nnz)  # noqa: E731
    return as_tensor(rows), as_tensor(cols)


def _strict_lower_position(t: torch.Tensor):
    """(row, col) of position t when the strictly-lower triangle is enumerated row
    by row (row i >= 1 starts at i(i-1)/2), without enumerating it."""
    i = ((1 + torch.sqrt(1 + 8 * t.double())) / 2).floor().long()
    i = torch.where(i * (i - 1) // 2 > t, i - 1, i)  # float rounding, either way
    i = torch.where((i + 1) * i // 2 <= t, i + 1, i)
    return i, t - i * (i - 1) // 2


def _assemble(b, n, m, rows, cols, vals, layout, indices_dtype, squeeze):
    """COO/CSR tensor from per-item (b, nnz) rows/cols/vals sorted by (row, col)."""
    order = (rows * max(m, 1) + cols).argsort(dim=1)
    rows, cols, vals = rows.gather(1, order), cols.gather(1, order), vals.gather(1, order)
    k = rows.shape[1]
    if squeeze:
        idx = torch.stack([rows[0], cols[0]])
        size = (n, m)
    else:
        bi = torch.arange(b, device=rows.device).repeat_interleave(k)
        idx = torch.stack([bi, rows.reshape(-1), cols.reshape(-1)])
        size = (b, n, m)
    A = coo_tensor(idx, vals.reshape(-1), size, is_coalesced=True)
    if layout == torch.sparse_csr:
        A = convert_coo_to_csr(A)
        crow, col = A.crow_indices().to(indices_dtype), A.col_indices().to(indices_dtype)
        return csr_tensor(crow, col, A.values(), size)
    return A


def rand_sparse(size: Union[Tuple[int, int], Tuple[int, int, int]], nnz: int,
                layout: torch.layout = torch.sparse_coo, *, indices_dtype: torch.dtype = torch.int64,
                values_dtype: torch.dtype = torch.float32, device: torch.device = torch.device("cpu"),
                well_conditioned: bool = False, min_diag_value: float = 1.0) -> torch.Tensor:
    """A random sparse (n_r, n_c) or (b, n_r, n_c) matrix with nnz distinct entries per item, values in [0, 1).

    ``well_conditioned`` on a square matrix stores the whole diagonal (``nnz >= n``)
    and makes every row strictly diagonally dominant with diagonal >=
    ``min_diag_value``; on a non-square matrix it is ignored.

    >>> import torch
    >>> from torchsparsegradutils.utils import rand_sparse
    >>> A = rand_sparse((2, 100, 80), 500, torch.sparse_csr, indices_dtype=torch.int32)
    >>> A.shape, A.values().shape, A.col_indices().dtype
    (torch.Size([2, 100, 80]), torch.Size([2, 500]), torch.int32)
    >>> W = rand_sparse((50, 50), 200, well_conditioned=True, values_dtype=torch.float64).to_dense()
    >>> bool((W.diagonal() > (W.sum(1) - W.diagonal())).all())   # diagonally dominant
    True
    """
    _check_dtypes(layout, indices_dtype)
    b, n, m = _check_size(size)
    if nnz < 0 or nnz > n * m:
        raise ValueError(f"nnz must be in [0, {n * m}] for a {n} x {m} matrix, got {nnz}")
    bb = b or 1
    dominant = well_conditioned and n == m
    if dominant:
        if nnz < n:
            raise ValueError(f"well_conditioned stores the diagonal: nnz must be >= n = {n}, got {nnz}")
        off = _draw(n * n - n, nnz - n, bb, device)          # off-diagonal slots
        r = off // max(n - 1, 1)
        c = off % max(n - 1, 1)
        c = c + (c >= r).long()                             # skip the diagonal
        d = torch.arange(n, device=device).expand(bb, n)
        rows, cols = torch.cat([r, d], 1), torch.cat([c, d], 1)
    elif bb * nnz <= SEEDED_DRAW_LIMIT:
        rows, cols = _draw_seeded(bb, nnz, n, m, lambda r, c: True, False, device)
    else:
        pos = _draw(n * m, nnz, bb, device)
        rows, cols = pos // max(m, 1), pos % max(m, 1)
    vals = torch.rand(bb, nnz, dtype=values_dtype, device=device)
    if dominant:
        vals[:, nnz - n:] = 0
        rowsum = torch.zeros(bb, n, dtype=values_dtype, device=device).scatter_add_(1, rows, vals.abs())
        vals[:, nnz - n:] = torch.clamp(rowsum + 1, min=min_diag_value)
    return _assemble(bb, n, m, rows, cols, vals, layout, indices_dtype, b is None)


def rand_sparse_tri(size: Union[Tuple[int, int], Tuple[int, int, int]], nnz: int,
                    layout: torch.layout = torch.sparse_coo, *, upper: bool = True, strict: bool = False,
                    indices_dtype: torch.dtype = torch.int64, values_dtype: torch.dtype = torch.float32,
                    device: torch.device = torch.device("cpu"), value_range: Tuple[float, float] = (0, 1),
                    well_conditioned: bool = False, min_diag_value: float = 1.0) -> torch.Tensor:
    """A random sparse upper/lower triangular (n, n) or (b, n, n) matrix with nnz entries per item.

    ``strict=False`` always stores the full diagonal (``n <= nnz <= n(n+1)/2``);
    ``strict=True`` stores none (``nnz <= n(n-1)/2``).  Values are uniform in
    ``value_range``; ``well_conditioned`` (``strict=False`` only) draws the
    diagonal uniform in ``[min_diag_value, min_diag_value + 0.5)``, the
    release's rule (it bounds the diagonal away from zero; it does not make
    large matrices diagonally dominant).

    >>> import torch
    >>> from torchsparsegradutils.utils import rand_sparse_tri
    >>> L = rand_sparse_tri((6, 6), 12, upper=False, well_conditioned=True).to_dense()
    >>> torch.equal(L, L.tril()), bool((L.diagonal() >= 1).all())
    (True, True)
    >>> S = rand_sparse_tri((3, 6, 6), 4, torch.sparse_csr, strict=True)
    >>> S.shape, bool((S.to_dense().diagonal(dim1=-2, dim2=-1) == 0).all())
    (torch.Size([3, 6, 6]), True)
    """
    _check_dtypes(layout, indices_dtype)
    b, n, m = _check_size(size)
    if n != m:
        raise ValueError(f"a triangular matrix must be square, got size {tuple(size)}")
    n_off = n * (n - 1) // 2
    if strict and not 0 <= nnz <= n_off:
        raise ValueError(f"strict=True: nnz must be in [0, {n_off}], got {nnz}")
    if not strict and not n <= nnz <= n_off + n:
        raise ValueError(f"strict=False: nnz must be in [{n}, {n_off + n}], got {nnz}")
    bb = b or 1
    if bb * nnz <= SEEDED_DRAW_LIMIT:
        keep = (lambda r, c: r < c or (not strict and r == c)) if upper else \
            (lambda r, c: r > c or (not strict and r == c))
        r, c = _draw_seeded(bb, nnz, n, n, keep, not strict, device)
    else:  # strictly-lower positions, numbered row by row, drawn without enumerating them
        r, c = _strict_lower_position(_draw(n_off, nnz if strict else nnz - n, bb, device))
        if upper:
            r, c = c, r
        if not strict:
            d = torch.arange(n, device=device).expand(bb, n)
            r, c = torch.cat([r, d], 1), torch.cat([c, d], 1)
    lo, hi = value_range
    vals = torch.rand(bb, nnz, dtype=values_dtype, device=device) * (hi - lo) + lo
    if well_conditioned and not strict:
        on_diag = r == c
        vals[on_diag] = torch.rand(int(on_diag.sum()), dtype=values_dtype, device=device) * 0.5 + min_diag_value
    return _assemble(bb, n, n, r, c, vals, layout, indices_dtype, b is None)


def generate_random_sparse_coo_matrix(size, nnz: int, *, indices_dtype: torch.dtype = torch.int64,
                                      values_dtype: torch.dtype = torch.float32,
                                      device: torch.device = torch.device("cpu"), well_conditioned: bool = False,
                                      min_diag_value: float = 1.0) -> torch.Tensor:
    """:func:`rand_sparse` in COO layout (the published release's name).

    >>> generate_random_sparse_coo_matrix((3, 4, 5), 6).coalesce().indices().shape
    torch.Size([3, 18])
    """
    return rand_sparse(size, nnz, torch.sparse_coo, indices_dtype=indices_dtype, values_dtype=values_dtype,
                       device=device, well_conditioned=well_conditioned, min_diag_value=min_diag_value)


def generate_random_sparse_csr_matrix(size, nnz: int, *, indices_dtype: torch.dtype = torch.int64,
                                      values_dtype: torch.dtype = torch.float32,
                                      device: torch.device = torch.device("cpu"), well_conditioned: bool = False,
                                      min_diag_value: float = 1.0) -> torch.Tensor:
    """:func:`rand_sparse` in CSR layout (the published release's name).

    >>> generate_random_sparse_csr_matrix((4, 5), 6).col_indices().shape
    torch.Size([6])
    """
    return rand_sparse(size, nnz, torch.sparse_csr, indices_dtype=indices_dtype, values_dtype=values_dtype,
                       device=device, well_conditioned=well_conditioned, min_diag_value=min_diag_value)


def generate_random_sparse_strictly_triangular_coo_matrix(
        size, nnz: int, *, upper: bool = True, indices_dtype: torch.dtype = torch.int64,
        values_dtype: torch.dtype = torch.float32, device: torch.device = torch.device("cpu"),
        value_range: Tuple[float, float] = (0.0, 1.0)) -> torch.Tensor:
    """:func:`rand_sparse_tri` with ``strict=True`` in COO layout (no diagonal stored).

    >>> A = generate_random_sparse_strictly_triangular_coo_matrix((5, 5), 4, upper=False).to_dense()
    >>> torch.equal(A, A.tril(-1))
    True
    """
    return rand_sparse_tri(size, nnz, torch.sparse_coo, upper=upper, strict=True, indices_dtype=indices_dtype,
                           values_dtype=values_dtype, device=device, value_range=value_range)


def generate_random_sparse_strictly_triangular_csr_matrix(
        size, nnz: int, *, upper: bool = True, indices_dtype: torch.dtype = torch.int64,
        values_dtype: torch.dtype = torch.float32, device: torch.device = torch.device("cpu"),
        value_range: Tuple[float, float] = (0.0, 1.0)) -> torch.Tensor:
    """:func:`rand_sparse_tri` with ``strict=True`` in CSR layout (no diagonal stored).

    >>> A = generate_random_sparse_strictly_triangular_csr_matrix((5, 5), 4).to_dense()
    >>> torch.equal(A, A.triu(1))
    True
    """
    return rand_sparse_tri(size, nnz, torch.sparse_csr, upper=upper, strict=True, indices_dtype=indices_dtype,
                           values_dtype=values_dtype, device=device, value_range=value_range)


def generate_random_sparse_triangular_coo_matrix(
        size, nnz: int, *, upper: bool = True, indices_dtype: torch.dtype = torch.int64,
        values_dtype: torch.dtype = torch.float32, device: torch.device = torch.device("cpu"),
        value_range: Tuple[float, float] = (0.0, 1.0), well_conditioned: bool = False,
        min_diag_value: float = 1.0) -> torch.Tensor:
    """:func:`rand_sparse_tri` with ``strict=False`` in COO layout (full diagonal stored).

    >>> A = generate_random_sparse_triangular_coo_matrix((5, 5), 8, upper=False).to_dense()
    >>> torch.equal(A, A.tril()), bool((A.diagonal() != 0).all())
    (True, True)
    """
    return rand_sparse_tri(size, nnz, torch.sparse_coo, upper=upper, strict=False, indices_dtype=indices_dtype,
                           values_dtype=values_dtype, device=device, value_range=value_range,
                           well_conditioned=well_conditioned, min_diag_value=min_diag_value)


def generate_random_sparse_triangular_csr_matrix(
        size, nnz: int, *, upper: bool = True, indices_dtype: torch.dtype = torch.int64,
        values_dtype: torch.dtype = torch.float32, device: torch.device = torch.device("cpu"),
        value_range: Tuple[float, float] = (0.0, 1.0), well_conditioned: bool = False,
        min_diag_value: float = 1.0) -> torch.Tensor:
    """:func:`rand_sparse_tri` with ``strict=False`` in CSR layout (full diagonal stored).

    >>> A = generate_random_sparse_triangular_csr_matrix((5, 5), 8).to_dense()
    >>> torch.equal(A, A.triu()), bool((A.diagonal() != 0).all())
    (True, True)
    """
    return rand_sparse_tri(size, nnz, torch.sparse_csr, upper=upper, strict=False, indices_dtype=indices_dtype,
                           values_dtype=values_dtype, device=device, value_range=value_range,
                           well_conditioned=well_conditioned, min_diag_value=min_diag_value)


def make_spd_sparse(n: int, layout: torch.layout, value_dtype: torch.dtype, index_dtype: torch.dtype,
                    device: torch.device, sparsity_ratio: float = 0.5,
                    nz: Optional[int] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """A random sparse symmetric positive definite (n, n) matrix, returned as (sparse, dense).

    Starts from ``M M^T + n I`` and zeroes symmetric off-diagonal pairs: a
    fraction ``sparsity_ratio`` of them, or ``nz // 2`` pairs when ``nz`` is
    given.  Zeroing can cost definiteness, so the diagonal is then raised where
    needed to make every row strictly diagonally dominant: the result is SPD by
    construction.

    >>> import torch
    >>> S, D = make_spd_sparse(8, torch.sparse_csr, torch.float64, torch.int32, torch.device("cpu"))
    >>> torch.equal(S.to_dense(), D), torch.equal(D, D.T), bool((torch.linalg.eigvalsh(D) > 0).all())
    (True, True, True)
    """
    if layout not in (torch.sparse_coo, torch.sparse_csr):
        raise ValueError(f"Unsupported layout: {layout}. Use torch.sparse_coo or torch.sparse_csr.")
    M = torch.randn(n, n, dtype=value_dtype, device=device)
    A = M @ M.t() + n * torch.eye(n, dtype=value_dtype, device=device)
    tri = torch.triu_indices(n, n, offset=1, device=device)
    k = min(nz // 2, tri.shape[1]) if nz is not None else int(sparsity_ratio * tri.shape[1])
    if k > 0:
        sel = tri[:, torch.randperm(tri.shape[1], device=device)[:k]]
        A[sel[0], sel[1]] = 0
        A[sel[1], sel[0]] = 0
    off = A.abs().sum(1) - A.diagonal().abs()
    A.diagonal().copy_(torch.maximum(A.diagonal(), off + 1))
    idx = A.nonzero().t()
    S = coo_tensor(idx, A[idx[0], idx[1]], (n, n), is_coalesced=True)
    if layout == torch.sparse_csr:
        S = convert_coo_to_csr(S)
        S = csr_tensor(S.crow_indices().to(index_dtype), S.col_indices().to(index_dtype), S.values(), (n, n))
    else:
        S = coo_tensor(idx.to(index_dtype), S.values(), (n, n)).coalesce()
    return S, A
