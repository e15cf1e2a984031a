"""Test matrices for the sparse_mm benchmarks, and the dense operands that go with them.

Depends on torch and numpy only (no torchsparsegradutils), so that the worker
running the *published* release in its own virtual environment can load this
file by path and build bit-identical inputs from the same seed.

A `MatrixSpec` names a sparsity pattern; `pattern(spec)` builds it as coalesced
COO indices (2, nnz) or, for a batch, (3, nnz) over (batch, row, col);
`make_inputs(...)` adds values of a dtype, the CSR form with the requested index
dtype, and the dense B and upstream gradient G.
"""
from dataclasses import asdict, dataclass
from typing import Dict, Optional, Tuple

import torch


@dataclass(frozen=True)
class MatrixSpec:
    kind: str                 # "uniform" | "powerlaw" | "banded" | "batched" | "graph"
    n: int                    # rows (per batch item); for "banded", the grid is sqrt(n) x sqrt(n)
    m: int                    # columns
    per_row: float = 0.0      # target stored entries per row (uniform / powerlaw)
    batch: int = 0            # batch items ("batched" only)
    nnz_item: int = 0         # stored entries per batch item ("batched" only)
    path: Optional[str] = None  # .npz file ("graph" only)
    seed: int = 0

    @property
    def label(self) -> str:
        if self.kind == "batched":
            return f"batched b={self.batch} n={self.n} nnz/item={self.nnz_item}"
        if self.kind == "graph":
            return f"graph {self.path.rsplit('/', 1)[-1].split('.')[0]} n={self.n}"
        if self.kind == "banded":
            return f"banded 9-pt n={_si(self.n)}"
        return f"{self.kind} n={_si(self.n)} {self.per_row:g}/row"

    def to_dict(self) -> dict:
        return asdict(self)


def _si(x: int) -> str:
    for div, suf in ((10**6, "M"), (10**3, "k")):
        if x >= div and x % div == 0:
            return f"{x // div}{suf}"
        if x >= div and (x * 10) % div == 0:
            return f"{x / div:g}{suf}"
    return str(x)


def graph_spec(path: str) -> MatrixSpec:
    """The normalised adjacency (with self loops) of a graph in an .npz with `edge_index`."""
    import numpy as np

    with np.load(path) as f:
        n = int(f["edge_index"].max()) + 1
        if "y" in f:
            n = max(n, int(f["y"].shape[0]))
    return MatrixSpec("graph", n, n, path=path)


def pattern(spec: MatrixSpec) -> Tuple[torch.Tensor, Tuple[int, ...]]:
    """Coalesced COO indices and the shape of the matrix (or batch of matrices)."""
    gen = torch.Generator().manual_seed(spec.seed)
    if spec.kind == "uniform":
        rows = torch.arange(spec.n).repeat_interleave(int(spec.per_row))
        cols = torch.randint(0, spec.m, (rows.numel(),), generator=gen)
        return _coalesce2(rows, cols, spec.n, spec.m), (spec.n, spec.m)
    if spec.kind == "powerlaw":
        return _powerlaw(spec, gen), (spec.n, spec.m)
    if spec.kind == "banded":
        return _banded(spec.n), (spec.n, spec.n)
    if spec.kind == "batched":
        return _batched(spec, gen), (spec.batch, spec.n, spec.m)
    if spec.kind == "graph":
        return _graph(spec), (spec.n, spec.n)
    raise ValueError(f"unknown matrix kind {spec.kind!r}")


def _coalesce2(rows: torch.Tensor, cols: torch.Tensor, n: int, m: int) -> torch.Tensor:
    """Sorted, duplicate-free (row, col) pairs as a (2, nnz) int64 tensor."""
    key = torch.unique(rows * m + cols)          # sorted, unique
    return torch.stack([key // m, key % m])


def _powerlaw(spec: MatrixSpec, gen: torch.Generator) -> torch.Tensor:
    """Row degrees d_r ~ r^-0.8 (a few hub rows with 1e4+ entries, like real graphs),
    rows shuffled; columns drawn with a milder skew (popular columns = hot rows of B)."""
    n, m = spec.n, spec.m
    rank = torch.arange(1, n + 1, dtype=torch.float64)
    deg = rank.pow(-0.8)
    deg = (deg * (spec.per_row * n / deg.sum())).clamp(min=1, max=m).long()
    deg = deg[torch.randperm(n, generator=gen)]
    rows = torch.arange(n).repeat_interleave(deg)
    col_w = torch.arange(1, m + 1, dtype=torch.float64).pow(-0.5)
    col_w = col_w[torch.randperm(m, generator=gen)]
    cols = torch.multinomial(col_w.float(), rows.numel(), replacement=True, generator=gen)
    return _coalesce2(rows, cols, n, m)


def _banded(n: int) -> torch.Tensor:
    """The 9-point stencil of a k x k grid (bilinear FEM on a square mesh): n = k*k, bandwidth k+1."""
    k = int(round(n ** 0.5))
    if k * k != n:
        raise ValueError(f"banded: n={n} is not a perfect square")
    gi, gj = torch.meshgrid(torch.arange(k), torch.arange(k), indexing="ij")
    gi, gj = gi.reshape(-1), gj.reshape(-1)
    rows, cols = [], []
    for di in (-1, 0, 1):
        for dj in (-1, 0, 1):
            ok = (gi + di >= 0) & (gi + di < k) & (gj + dj >= 0) & (gj + dj < k)
            rows.append((gi * k + gj)[ok])
            cols.append(((gi + di) * k + gj + dj)[ok])
    return _coalesce2(torch.cat(rows), torch.cat(cols), n, n)


def _batched(spec: MatrixSpec, gen: torch.Generator) -> torch.Tensor:
    """Exactly nnz_item distinct random positions in each batch item (batched CSR needs equal nnz)."""
    b, n, m, k = spec.batch, spec.n, spec.m, spec.nnz_item
    keys = []
    for _ in range(b):
        cand = torch.unique(torch.randint(0, n * m, (2 * k + 16,), generator=gen))
        while cand.numel() < k:                     # only for tiny n*m
            cand = torch.unique(torch.cat([cand, torch.randint(0, n * m, (k,), generator=gen)]))
        keys.append(cand[torch.randperm(cand.numel(), generator=gen)[:k]].sort().values)
    keys = torch.cat(keys)
    batch = torch.arange(b).repeat_interleave(k)
    return torch.stack([batch, keys // m, keys % m])


def _graph(spec: MatrixSpec) -> torch.Tensor:
    import numpy as np

    with np.load(spec.path) as f:
        ei = torch.from_numpy(np.asarray(f["edge_index"], dtype=np.int64))
    loops = torch.arange(spec.n)
    return _coalesce2(torch.cat([ei[0], loops]), torch.cat([ei[1], loops]), spec.n, spec.n)


def make_inputs(indices: torch.Tensor, shape, p: int, dtype: torch.dtype,
                index_dtype: torch.dtype, kind: str, seed: int = 1) -> Dict[str, object]:
    """Values, COO and CSR forms of A, dense B (m x p) and the upstream gradient G (n x p).

    The graph case gets the GCN normalisation D^-1/2 (A+I) D^-1/2 as values;
    every other case gets standard normal values."""
    gen = torch.Generator().manual_seed(seed)
    nnz = indices.shape[1]
    if kind == "graph":
        deg = torch.bincount(indices[0], minlength=shape[0]).to(torch.float64)
        dinv = deg.clamp(min=1).rsqrt()
        values = (dinv[indices[0]] * dinv[indices[1]]).to(dtype)
    else:
        values = torch.randn(nnz, generator=gen, dtype=torch.float64).to(dtype)
    coo = torch.sparse_coo_tensor(indices, values, shape, is_coalesced=True)
    batched = len(shape) == 3
    n, m = shape[-2], shape[-1]
    if batched:
        b = shape[0]
        counts = torch.bincount(indices[0] * n + indices[1], minlength=b * n).reshape(b, n)
        crow = torch.cat([torch.zeros(b, 1, dtype=torch.int64), counts.cumsum(1)], dim=1)
        col = indices[2].reshape(b, -1)
        csr = torch.sparse_csr_tensor(crow.to(index_dtype), col.to(index_dtype),
                                      values.reshape(b, -1), shape)
        bshape, gshape = (b, m, p), (b, n, p)
    else:
        counts = torch.bincount(indices[0], minlength=n)
        crow = torch.cat([torch.zeros(1, dtype=torch.int64), counts.cumsum(0)])
        csr = torch.sparse_csr_tensor(crow.to(index_dtype), indices[1].to(index_dtype), values, shape)
        bshape, gshape = (m, p), (n, p)
    B = torch.randn(bshape, generator=gen, dtype=torch.float64).to(dtype)
    G = torch.randn(gshape, generator=gen, dtype=torch.float64).to(dtype)
    return {"coo": coo, "csr": csr, "B": B, "G": G, "indices": indices, "shape": tuple(shape),
            "nnz": nnz, "p": p, "dtype": dtype, "index_dtype": index_dtype}
