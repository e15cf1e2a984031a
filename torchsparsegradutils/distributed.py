"""sparse_mm over a 1-D row partition on torch.distributed (gloo on CPU, NCCL on CUDA).

A square sparse matrix A (n x n, a graph's adjacency) and a dense B (n x p) are cut
into the same contiguous row ranges, one per rank.  Rank r holds its rows of A as a
:class:`DistSparseCSR`: a local CSR whose columns are its own rows (ids 0 .. n_r - 1)
followed by its halo, the rows of B owned elsewhere that its entries reference (ids
n_r .. n_r + h_r - 1).  ``C = A @ B``, row-partitioned like B, is then:

- forward: one all-to-all of exactly the halo rows of B, then the local SpMM on
  ``[B_r; B_halo]``;
- backward: grad_B from the local ``A_r^T G_r`` into the owned and halo rows, then the
  reverse all-to-all that sums the halo rows into their owners; the gradient of A's
  values from the local SDDMM with the halo rows at hand.

The exchange plan (which local rows go to which rank, which come back) is built once,
when the DistSparseCSR is built, and kept with it.  Every collective waits at most the
operand's ``timeout``; a partition that the ranks do not agree on raises ValueError on
every rank before any data moves.

The partitioning helpers (``partition_rows``, ``partition_report``, ``reorder``) run in
one process on the whole matrix.
"""
import datetime
from typing import List, Optional

import torch
import torch.distributed as dist
from torch.autograd.function import once_differentiable

from . import _backends
from ._core.intake import as_csr
from ._core.structures import coo_structure
from ._core.torch_sparse import csr_tensor
from ._core.validate import MM_DTYPES, dtype_names
from ._core.view import CSRView, entry_rows, view_of

__all__ = ["DistSparseCSR", "dist_sparse_mm", "partition_rows", "partition_report", "reorder"]

DEFAULT_TIMEOUT = datetime.timedelta(seconds=60)

# The local checks of a rank's part (from_local), by code: the ranks exchange the code
# so that each raises the same ValueError, naming the rank and its problem.
_PART_PROBLEMS = ("",
                  "its row range is not a pair of ints 0 <= start <= end <= n",
                  "row, col and values must be 1D tensors of the same length (row and col integer, values float)",
                  "a row id lies outside the rank's row range",
                  "a column id lies outside [0, n)",
                  f"values of a dtype other than {dtype_names(MM_DTYPES)}")


# ------------------------------------------------------------------ partitioning
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
    rows by B[perm]).  ``"rcm"``: reverse Cuthill-McKee (breadth-first from a least
    connected node, each level by parent then degree, reversed); ``"bfs"``: plain
    breadth-first order.  Ordered on the symmetric pattern of A + A^T; rows without
    entries go last.  Compare the halos before and after with partition_report."""
    if method not in ("rcm", "bfs"):
        raise ValueError(f"unknown reordering {method!r}; expected 'rcm' or 'bfs'")
    crow, col = _pattern(A)
    n = crow.numel() - 1
    rows = entry_rows(crow)
    sym = coo_structure(torch.stack([torch.cat([rows, col]), torch.cat([col, rows])]), (n, n))
    perm = _breadth_first(sym.ptr, sym.indices[1], method == "rcm")
    inverse = torch.empty_like(perm)
    inverse[perm] = torch.arange(n)
    moved = coo_structure(torch.stack([inverse[rows], inverse[col]]), (n, n))
    return csr_tensor(moved.ptr, moved.indices[1], moved.values_of(as_csr(A).values.detach()), (n, n)), perm


def _breadth_first(crow: torch.Tensor, col: torch.Tensor, cuthill_mckee: bool) -> torch.Tensor:
    """The nodes of a symmetric pattern in breadth-first order, one level at a time,
    each component from its least connected unvisited node; with cuthill_mckee each
    level is ordered by parent, then degree, and the whole order reversed."""
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
            frontier = _next_level(crow, col, deg, visited, frontier, cuthill_mckee)
            visited[frontier] = True
    order = torch.cat(levels) if levels else torch.empty(0, dtype=torch.int64)
    if cuthill_mckee:
        order = order.flip(0)
    return torch.cat([order, isolated])


def _next_level(crow, col, deg, visited, frontier, cuthill_mckee: bool) -> torch.Tensor:
    """The unvisited neighbours of the frontier, in the order of the parent that finds
    them first (then by degree with cuthill_mckee)."""
    starts, counts = crow[frontier], deg[frontier]
    parent = torch.repeat_interleave(torch.arange(frontier.numel()), counts)
    first = torch.cumsum(counts, 0) - counts
    nbr = col[torch.repeat_interleave(starts - first, counts) + torch.arange(int(counts.sum()))]
    fresh = ~visited[nbr]
    nbr, parent = nbr[fresh], parent[fresh]
    nbr, at = torch.sort(nbr, stable=True)                   # parents increase within a node's run
    nodes, runs = torch.unique_consecutive(nbr, return_counts=True)
    parent = parent[at][torch.cumsum(runs, 0) - runs]        # each node's first parent
    if cuthill_mckee:
        by = torch.argsort(deg[nodes], stable=True)
        nodes, parent = nodes[by], parent[by]
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


# ------------------------------------------------------------------ the operand
class DistSparseCSR:
    """This rank's rows of a square sparse matrix A, partitioned by contiguous row
    ranges over a process group, with its exchange plan.  Build one collectively, on
    every rank of the group at once, with :meth:`from_global` or :meth:`from_local`.

    Attributes
    ----------
    start, end : int
        This rank's rows of A (and of B and C): ``start .. end-1``.
    n : int
        A's size (n x n).
    bounds : torch.Tensor
        The int64 row offsets ``(P+1,)`` of every rank, the same on all.
    crow_indices, col_indices, values : torch.Tensor
        The local CSR, ``(end-start) x (end-start+h)``, its columns numbered own rows
        first, then the halo, sorted in each row (:meth:`entries` gives their global
        ids).  ``values`` may require grad (``A.values.requires_grad_()``):
        :func:`dist_sparse_mm` gives its gradient.
    halo : torch.Tensor
        The global ids (int64, sorted) of the h rows of B this rank receives.
    send_rows, send_counts, recv_counts
        The exchange plan: the local rows of B sent each step, ``send_counts[q]`` of
        them to rank q in turn, and ``recv_counts[q]`` halo rows from rank q.
    timeout : datetime.timedelta
        The longest any of its collectives waits.
    """

    def __init__(self, row, col, values, start: int, end: int, bounds: torch.Tensor, group, timeout):
        """Internal: from this rank's entries (global ids, checked by the ranks
        together); builds the local CSR and the exchange plan (collective)."""
        self.start, self.end, self.n, self.bounds = start, end, int(bounds[-1]), bounds
        self.group, self.timeout = group, timeout
        n_own = end - start
        self.halo = _halo(col, start, end)
        own = (col >= start) & (col < end)
        local_col = torch.where(own, col - start, n_own + torch.searchsorted(self.halo, col))
        width = n_own + self.halo.numel()
        key, order = torch.sort((row - start) * width + local_col, stable=True)     # by row, then local column
        key, slot = torch.unique_consecutive(key, return_inverse=True)             # repeated entries summed
        self.values = values.new_zeros(key.numel()).index_add(0, slot, values[order])
        self.col_indices = key % width
        self.crow_indices = torch.zeros(n_own + 1, dtype=torch.int64, device=row.device)
        self.crow_indices[1:] = torch.cumsum(torch.bincount(key // width, minlength=n_own), 0)
        self._plan()

    # ----------------------------------------------------------------- building
    @classmethod
    def from_global(cls, A: Optional[torch.Tensor], group=None, src: int = 0, bounds: Optional[torch.Tensor] = None,
                    timeout: datetime.timedelta = DEFAULT_TIMEOUT) -> "DistSparseCSR":
        """Scatter the square sparse A (COO or CSR), held by rank `src` of the group
        (the others pass None), in row ranges: `bounds` given on `src`, or balanced by
        :func:`partition_rows`.  Collective: every rank of the group calls it."""
        rank, world = dist.get_rank(group), dist.get_world_size(group)
        device = _comm_device(group)
        meta = torch.zeros(world + 3, dtype=torch.int64, device=device)  # ok, n, dtype id, nnz per rank
        problem = None
        if rank == src:
            try:
                crow, col = _pattern(A)
                bounds = partition_rows(A, world) if bounds is None else _check_bounds(bounds, crow.numel() - 1)
                if bounds.numel() != world + 1:
                    raise ValueError(f"bounds must have {world + 1} entries (world size + 1), got {bounds.numel()}")
                if A.dtype not in MM_DTYPES:
                    raise TypeError(f"A's values must be {dtype_names(MM_DTYPES)}, got {A.dtype}")
            except (ValueError, TypeError) as e:
                problem = e
            else:
                meta[:3] = torch.tensor([1, crow.numel() - 1, MM_DTYPES.index(A.dtype)])
                meta[3:] = crow[bounds[1:]] - crow[bounds[:-1]]
        _wait(dist.broadcast(meta, group=group, group_src=src, async_op=True), timeout)
        if problem is not None:
            raise problem
        if int(meta[0]) != 1:
            raise ValueError(f"DistSparseCSR.from_global: rank {src}'s matrix was refused (its error says why)")
        n, dtype, counts = int(meta[1]), MM_DTYPES[int(meta[2])], meta[3:].tolist()
        if rank == src:
            send = [entry_rows(crow), col, as_csr(A).values.detach().to(dtype)]
            split = counts
        else:
            send = [torch.empty(0, dtype=torch.int64), torch.empty(0, dtype=torch.int64), torch.empty(0, dtype=dtype)]
            split = [0] * world
        recv_split = [counts[rank] if q == src else 0 for q in range(world)]
        row, col, values = (_all_to_all(t.to(device), split, recv_split, group, timeout) for t in send)
        mine = torch.zeros(world + 1, dtype=torch.int64, device=device)
        if rank == src:
            mine = bounds.to(device)
        _wait(dist.broadcast(mine, group=group, group_src=src, async_op=True), timeout)
        start, end = int(mine[rank]), int(mine[rank + 1])
        return cls.from_local(row, col, values, (start, end), n, group=group, timeout=timeout)

    @classmethod
    def from_local(cls, row, col, values, rows, n: int, group=None,
                   timeout: datetime.timedelta = DEFAULT_TIMEOUT) -> "DistSparseCSR":
        """Build from each rank's own entries: `row`, `col` (global ids) and `values`,
        1D of one length, for the rows ``rows = (start, end)`` that this rank owns of
        an n x n matrix (repeated entries are summed; the ranges must tile 0 .. n in
        rank order).  Collective: the ranks exchange what they were given and raise the
        same ValueError, naming the rank at fault, wherever one part is malformed or
        the parts disagree; then they build the exchange plan."""
        world = dist.get_world_size(group)
        code, start, end, dtype_id = _local_problem(row, col, values, rows, n)
        mine = torch.tensor([code, start, end, n if isinstance(n, int) else -1, dtype_id], dtype=torch.int64,
                            device=_comm_device(group))
        every = torch.empty(world * 5, dtype=torch.int64, device=mine.device)
        _wait(dist.all_gather_single(every, mine, group=group, async_op=True), timeout)
        every = every.reshape(world, 5).cpu()
        for r in range(world):
            if int(every[r, 0]):
                raise ValueError(f"DistSparseCSR.from_local: rank {r}'s part is malformed: "
                                 f"{_PART_PROBLEMS[int(every[r, 0])]}")
        if bool((every[:, 3] != every[0, 3]).any()) or bool((every[:, 4] != every[0, 4]).any()):
            raise ValueError(f"DistSparseCSR.from_local: the ranks disagree on n or on the values' dtype "
                             f"(n by rank: {every[:, 3].tolist()}; dtypes: "
                             f"{[str(MM_DTYPES[d]) for d in every[:, 4].tolist()]})")
        ranges = every[:, 1:3]
        if int(ranges[0, 0]) != 0 or int(ranges[-1, 1]) != n or bool((ranges[1:, 0] != ranges[:-1, 1]).any()):
            raise ValueError(f"DistSparseCSR.from_local: the row ranges must tile 0 .. {n} in rank order; "
                             f"got {[tuple(x) for x in ranges.tolist()]}")
        bounds = torch.cat([ranges[:, 0], ranges[-1:, 1]])
        return cls(row.long(), col.long(), values, start, end, bounds, group, timeout)

    def _plan(self) -> None:
        """The exchange plan (collective): how many halo rows this rank receives from
        each rank (recv_counts, in halo order: the halo is sorted, and so grouped by
        owner), and which of its own rows it sends to each (send_rows, send_counts)."""
        world = self.bounds.numel() - 1
        owner = torch.searchsorted(self.bounds.to(self.halo.device), self.halo, right=True) - 1
        recv_counts = torch.bincount(owner, minlength=world)
        device = _comm_device(self.group)
        send_counts = _all_to_all(recv_counts.to(device), [1] * world, [1] * world, self.group, self.timeout)
        self.recv_counts, self.send_counts = recv_counts.tolist(), send_counts.tolist()
        wanted = _all_to_all(self.halo.to(device), self.recv_counts, self.send_counts, self.group, self.timeout)
        self.send_rows = wanted.to(self.halo.device) - self.start

    # ----------------------------------------------------------------- use
    @property
    def shape(self) -> torch.Size:
        """The local block's shape: own rows x (own rows + halo rows)."""
        return torch.Size((self.end - self.start, self.end - self.start + self.halo.numel()))

    def entries(self):
        """(row, col): the global ids (int64) of the local entries, in the order of values."""
        n_own, col = self.end - self.start, self.col_indices
        row = self.start + entry_rows(self.crow_indices)
        if not self.halo.numel():
            return row, col + self.start
        return row, torch.where(col < n_own, col + self.start, self.halo[(col - n_own).clamp(min=0)])

    def view(self, values: torch.Tensor) -> CSRView:
        """The local CSR with these values, as the kernels take it."""
        return view_of(self.crow_indices, self.col_indices, values, None, self.shape)

    def exchange(self, B: torch.Tensor) -> torch.Tensor:
        """The halo rows of B (this rank's rows of B on every rank), in halo order."""
        send = B.index_select(0, self.send_rows.to(B.device))
        return _all_to_all(send, self.send_counts, self.recv_counts, self.group, self.timeout)

    def exchange_back(self, Gx: torch.Tensor) -> torch.Tensor:
        """The reverse of exchange: Gx holds this rank's own rows, then its halo rows
        (as the local A^T G has them); the halo rows go back to their owners, and the
        rows that come back are summed into Gx's own rows, which are returned."""
        n_own = self.end - self.start
        back = _all_to_all(Gx[n_own:], self.recv_counts, self.send_counts, self.group, self.timeout)
        return Gx[:n_own].index_add_(0, self.send_rows.to(Gx.device), back)


def dist_sparse_mm(A: DistSparseCSR, B: torch.Tensor) -> torch.Tensor:
    """This rank's rows of ``C = A @ B``, where `A` is this rank's :class:`DistSparseCSR`
    and `B` (``end - start`` x p, dense) its rows of B.  Collective: every rank of A's
    group calls it (and backward through it) together.

    Gradients: ``grad_B`` (this rank's rows of ``A^T @ G``, the halo parts summed
    into their owners) and, where ``A.values`` requires grad, the gradient of the local
    values at their stored entries (``sum_k G[i,k] B[j,k]``), never dense."""
    if not isinstance(A, DistSparseCSR):
        raise ValueError(f"A must be a DistSparseCSR, got {type(A).__name__}")
    if not isinstance(B, torch.Tensor) or B.layout is not torch.strided or B.dim() != 2:
        raise ValueError("B must be a 2D dense tensor (this rank's rows of B)")
    if B.shape[0] != A.end - A.start:
        raise ValueError(f"B must hold this rank's {A.end - A.start} rows (rows {A.start} .. {A.end - 1}); "
                         f"got {B.shape[0]}")
    if B.dtype != A.values.dtype:
        raise TypeError(f"A and B must have the same dtype, got {A.values.dtype} and {B.dtype}")
    if B.device != A.values.device:
        raise ValueError(f"A and B must be on the same device, got {A.values.device} and {B.device}")
    return DistSparseMatMul.apply(A.values, B, A)


class DistSparseMatMul(torch.autograd.Function):
    """The autograd Function behind :func:`dist_sparse_mm` (validate with it first)."""

    @staticmethod
    def forward(ctx, values, B, A):
        halo = A.exchange(B)
        Bx = torch.cat([B, halo]) if halo.shape[0] else B    # own rows, then the halo rows (p may be 0)
        view = A.view(values)
        ctx.A = A
        ctx.save_for_backward(values, Bx if ctx.needs_input_grad[0] else None)
        return _backends.spmm(view, Bx)

    @staticmethod
    @once_differentiable
    def backward(ctx, G):
        values, Bx = ctx.saved_tensors
        A = ctx.A
        view = A.view(values)
        grad_values = _backends.sddmm(view, G, Bx) if ctx.needs_input_grad[0] else None
        grad_B = A.exchange_back(_backends.spmm_t(view, G)) if ctx.needs_input_grad[1] else None
        return grad_values, grad_B, None


# ------------------------------------------------------------------ collectives
def _comm_device(group) -> torch.device:
    """Where the group's collectives take tensors: CUDA for NCCL, else the CPU."""
    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _wait(work, timeout: datetime.timedelta) -> None:
    if not work.wait(timeout):
        raise RuntimeError(f"a collective did not finish within {timeout}")


def _all_to_all(send: torch.Tensor, send_counts, recv_counts, group, timeout) -> torch.Tensor:
    """Rows send[...] (in rank order, send_counts[q] to rank q) exchanged for
    recv_counts[q] rows from each rank q; waits at most `timeout`."""
    out = send.new_empty((sum(recv_counts), *send.shape[1:]))
    _wait(dist.all_to_all_single(out, send.contiguous(), recv_counts, send_counts, group=group, async_op=True),
          timeout)
    return out


def _local_problem(row, col, values, rows, n):
    """(code, start, end, dtype id) of a rank's part: code 0 where it is well formed,
    else the index of its problem in _PART_PROBLEMS (checked in O(nnz))."""
    if not (isinstance(rows, (tuple, list)) and len(rows) == 2 and all(isinstance(x, int) for x in rows)
            and isinstance(n, int) and 0 <= rows[0] <= rows[1] <= n):
        return 1, -1, -1, 0
    start, end = rows
    tensors = (row, col, values)
    if not (all(isinstance(t, torch.Tensor) and t.dim() == 1 and t.layout is torch.strided for t in tensors)
            and row.numel() == col.numel() == values.numel() and not row.is_floating_point()
            and not col.is_floating_point() and values.is_floating_point()):
        return 2, start, end, 0
    if values.dtype not in MM_DTYPES:
        return 5, start, end, 0
    dtype_id = MM_DTYPES.index(values.dtype)
    if row.numel() and (int(row.min()) < start or int(row.max()) >= end):
        return 3, start, end, dtype_id
    if col.numel() and (int(col.min()) < 0 or int(col.max()) >= n):
        return 4, start, end, dtype_id
    return 0, start, end, dtype_id
