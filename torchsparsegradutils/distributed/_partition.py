"""The partitioning helpers of :mod:`torchsparsegradutils.distributed`: contiguous row
ranges balanced by work (``partition_rows``), the exchange plans of every rank simulated
(``partition_report``) and a renumbering that shrinks the halos (``reorder``).  They run
in one process on the whole matrix; the pattern, bounds and halo checks here also serve
:class:`~torchsparsegradutils.distributed.DistSparseCSR`.
"""
from typing import List

import torch

from .._core.intake import as_csr
from .._core.structures import coo_structure
from .._core.view import entry_rows
from ..utils.reordering import reverse_cuthill_mckee, sparse_permute


def partition_rows(A, parts: int) -> torch.Tensor:
    """Contiguous row ranges of the square sparse A (COO or CSR) for `parts` ranks,
    balanced by work: each range holds about the same number of stored entries plus
    rows (a row costs its entries and the output row it writes).  Returns the int64
    bounds (parts+1,): rank r owns rows bounds[r] .. bounds[r+1]-1 (empty ranges where
    parts exceeds the rows)."""
    if not isinstance(parts, int) or parts < 1:
        raise ValueError(f"parts must be a positive int, got {parts!r}")
    crow, _ = _pattern(A)
    work = crow + torch.arange(crow.numel())                 # entries + rows before each row
    targets = torch.arange(parts + 1, dtype=torch.float64) * (float(work[-1]) / parts)
    bounds = torch.searchsorted(work.double(), targets)
    bounds[-1] = crow.numel() - 1
    return bounds


def partition_report(A, bounds: torch.Tensor) -> List[dict]:
    """Per rank of the partition `bounds` of the square sparse A: its rows, its stored
    entries, its halo (the rows of B it receives in a product's forward, and sends
    back in its backward), its sends (the rows of B it sends in a forward, counted once
    per rank that receives them) and its cut (its entries whose column another rank
    owns): the exchange plans of every rank, simulated in one process.

    >>> A = torch.tensor([[1., 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1], [1, 0, 0, 1]]).to_sparse()
    >>> bounds = partition_rows(A, 2)        # rows 0-1 and 2-3, 4 entries each
    >>> bounds
    tensor([0, 2, 4])
    >>> [(r["halo"], r["cut"], r["sends"]) for r in partition_report(A, bounds)]
    [(1, 1, 1), (1, 1, 1)]
    """
    crow, col = _pattern(A)
    bounds = _check_bounds(bounds, crow.numel() - 1)
    world = bounds.numel() - 1
    report, sends = [], torch.zeros(world, dtype=torch.int64)
    for r in range(world):
        start, end = int(bounds[r]), int(bounds[r + 1])
        c = col[int(crow[start]):int(crow[end])]
        halo = _halo(c, start, end)
        sends += torch.bincount(torch.searchsorted(bounds, halo, right=True) - 1, minlength=world)
        report.append({"rows": end - start, "nnz": c.numel(), "halo": halo.numel(),
                       "cut": int(((c < start) | (c >= end)).sum())})
    for r in range(world):
        report[r]["sends"] = int(sends[r])
    return report


def reorder(A, method: str = "rcm"):
    """(P A P^T, perm): A's rows and columns renumbered so that contiguous row ranges
    reference fewer remote rows; row i of the result is row perm[i] of A (reorder B's
    rows by B[perm]), a CSR tensor of A's values, detached.  ``"rcm"``: reverse
    Cuthill-McKee (:func:`~torchsparsegradutils.utils.reverse_cuthill_mckee`);
    ``"bfs"``: plain breadth-first order, each component from its least connected node.
    Both order the graph of A + A^T; rows without an entry off the diagonal (in their
    row or column) go last.  Compare the halos before and after with partition_report."""
    if method not in ("rcm", "bfs"):
        raise ValueError(f"unknown reordering {method!r}; expected 'rcm' or 'bfs'")
    crow, col = _pattern(A)
    n = crow.numel() - 1
    if method == "rcm":
        perm = reverse_cuthill_mckee(A)
    else:
        rows = entry_rows(crow)
        off = rows != col
        rows, col = rows[off], col[off]
        sym = coo_structure(torch.stack([torch.cat([rows, col]), torch.cat([col, rows])]), (n, n))
        perm = _breadth_first(sym.ptr, sym.indices[1])
    Ap = sparse_permute(A.detach(), perm)
    return (Ap if Ap.layout == torch.sparse_csr else Ap.to_sparse_csr()), perm


def _breadth_first(crow: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
    """The nodes of a symmetric pattern in breadth-first order, one level at a time, each
    level in the order of the parents that find its nodes, each component from its least
    connected unvisited node; the nodes without neighbours last."""
    n = crow.numel() - 1
    deg = crow.diff()
    visited = torch.zeros(n, dtype=torch.bool)
    isolated = torch.nonzero(deg == 0).flatten()
    visited[isolated] = True
    by_degree = torch.argsort(deg, stable=True).numpy()
    seen = visited.numpy()                                   # shares visited's memory
    levels, next_start = [], 0
    while True:
        while next_start < n and seen[by_degree[next_start]]:
            next_start += 1
        if next_start == n:
            break
        frontier = torch.tensor([int(by_degree[next_start])])
        visited[frontier] = True
        while frontier.numel():
            levels.append(frontier)
            frontier = _next_level(crow, col, deg, visited, frontier)
            visited[frontier] = True
    order = torch.cat(levels) if levels else torch.empty(0, dtype=torch.int64)
    return torch.cat([order, isolated])


def _next_level(crow, col, deg, visited, frontier) -> torch.Tensor:
    """The unvisited neighbours of the frontier, in the order of the parent that finds
    them first."""
    starts, counts = crow[frontier], deg[frontier]
    parent = torch.repeat_interleave(torch.arange(frontier.numel()), counts)
    first = torch.cumsum(counts, 0) - counts
    nbr = col[torch.repeat_interleave(starts - first, counts) + torch.arange(int(counts.sum()))]
    fresh = ~visited[nbr]
    nbr, parent = nbr[fresh], parent[fresh]
    nbr, at = torch.sort(nbr, stable=True)                   # parents increase within a node's run
    nodes, runs = torch.unique_consecutive(nbr, return_counts=True)
    parent = parent[at][torch.cumsum(runs, 0) - runs]        # each node's first parent
    return nodes[torch.argsort(parent, stable=True)]


def _pattern(A):
    """(crow, col) of the square 2D sparse A, int64, its structure checked."""
    if not isinstance(A, torch.Tensor) or A.layout not in (torch.sparse_coo, torch.sparse_csr) or A.dim() != 2:
        raise ValueError("A must be a 2D sparse COO or CSR tensor")
    if A.shape[0] != A.shape[1]:
        raise ValueError(f"A must be square (its rows partition B's rows too); got {tuple(A.shape)}")
    view = as_csr(A)
    return view.ptr.long(), view.col.long()


def _check_bounds(bounds, n: int) -> torch.Tensor:
    if not isinstance(bounds, torch.Tensor) or bounds.dim() != 1 or bounds.numel() < 2:
        raise ValueError("bounds must be a 1D tensor of parts+1 row offsets")
    bounds = bounds.long().cpu()
    if int(bounds[0]) != 0 or int(bounds[-1]) != n or bool((bounds.diff() < 0).any()):
        raise ValueError(f"bounds must rise from 0 to n = {n}; got {bounds.tolist()}")
    return bounds


def _halo(c: torch.Tensor, start: int, end: int) -> torch.Tensor:
    """The sorted distinct columns of c outside [start, end): the halo's global ids."""
    return torch.unique(c[(c < start) | (c >= end)])
