"""The operand of :func:`~torchsparsegradutils.distributed.dist_sparse_mm`:
:class:`DistSparseCSR`, a rank's rows of A as a local CSR (own rows, then the halo),
built collectively from the whole matrix or from each rank's entries, its parts checked
by the ranks together, with its exchange plan and the two exchanges a product makes.
"""
import datetime
from typing import Optional

import torch
import torch.distributed as dist

from .._core.intake import as_csr
from .._core.validate import MM_DTYPES, dtype_names
from .._core.view import CSRView, entry_rows, view_of
from ._collectives import _all_to_all, _comm_device, _wait
from ._partition import _check_bounds, _halo, _pattern, partition_rows

DEFAULT_TIMEOUT = datetime.timedelta(seconds=60)

# The local checks of a rank's part (from_local), by code: the ranks exchange the code
# so that each raises the same ValueError, naming the rank and its problem.
_PART_PROBLEMS = ("",
                  "its row range is not a pair of ints 0 <= start <= end <= n",
                  "row, col and values must be 1D tensors of the same length (row and col integer, values float)",
                  "a row id lies outside the rank's row range",
                  "a column id lies outside [0, n)",
                  f"values of a dtype other than {dtype_names(MM_DTYPES)}")


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
