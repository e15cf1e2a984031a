"""The checked structures of COO indices and CSR arrays, with what the kernels derive
from them, and the caches that keep them (the intake, _core/intake.py, reads through
them).

Two structure caches, side by side, with one mechanism (`_Cache`: newest last,
bounded, an entry dropped once the memory it was derived from is freed) and two
policies for telling that a structure is unchanged:
- CPU, unsorted COO index arrays: a hit is only a candidate, used when the array
  still holds exactly the cached copy (one comparison, O(nnz)).  No version
  counter or identity can stand in for that comparison: torch.sparse_coo_tensor
  shares its indices' memory but not their version counter, so an in-place edit
  of the user's index tensor changes A's indices and no counter A can see.
- CUDA, every structure (checked on the device, with what the kernels derive
  from it: global pointers, the product plan, entry rows, the transpose): keyed
  by where the index tensors lie, their shapes and their version counters, so a
  training loop that reuses its adjacency never waits for the device (a
  comparison would).  An in-place edit that bypasses the version counter is not
  seen; the CUDA kernels still clamp every pointer and skip every column out of
  range, so it can give a wrong result but never a read out of bounds.
A third cache with the CUDA cache's keys, DERIVED (`derived`), keeps what a route
derives from a checked structure on any device (the Triton solve's plan).
"""
import threading
from collections import OrderedDict
from typing import NamedTuple, Optional, Tuple

import torch
from torch.multiprocessing.reductions import StorageWeakRef

from . import native
from .native import _C
from .view import CSRView, entry_rows, plain


def _global_rows(indices: torch.Tensor, n: int) -> torch.Tensor:
    """Row of each COO entry in the (b*n)-row block diagonal of a batch."""
    return indices[-2] + indices[0] * n if indices.shape[0] == 3 else indices[-2]


def _check_coo_ranges(indices: torch.Tensor, sizes) -> None:
    """Every COO index in [0, size of its dimension): in C on CPU, else with torch ops,
    and where one is out of range in C on a host copy, whose error names it (index,
    entry, dimension and size)."""
    if indices.device.type != "cpu":
        bound = torch.tensor(sizes, device=indices.device).unsqueeze(1)
        if not (indices.numel() and bool(((indices < 0) | (indices >= bound)).any())):
            return
        indices = indices.cpu()
    _C.coo_row_ptr(indices, sizes, None, torch.get_num_threads())


def unit_stride_rows(indices: torch.Tensor) -> torch.Tensor:
    """indices itself when each of its rows is unit-stride (a coalesced tensor's
    indices are often a view into a longer buffer), else a contiguous copy."""
    if indices.shape[1] <= 1 or indices.stride(1) == 1:
        return indices
    return indices.contiguous()


def check_coo_order(indices: torch.Tensor, sizes, coalesced: bool) -> None:
    """Every index of COO indices (unit-stride rows) in range and, where flagged
    coalesced, the entries strictly increasing in (row, col) (ValueError): by torch ops,
    where coo_row_ptr.c does not check them as it builds a view."""
    _check_coo_ranges(indices, sizes)
    if coalesced and indices.shape[1] > 1:
        rows, cols = _global_rows(indices, sizes[-2]), indices[-1]
        step = rows[1:] - rows[:-1]
        if bool((step < 0).any()):
            raise ValueError(native.STATUS["EIDX_ORDER"])
        if bool(((step == 0) & (cols[1:] <= cols[:-1])).any()):
            raise ValueError(native.STATUS["ECOL_ORDER"])


def coo_view_by_torch_ops(A: torch.Tensor, indices: torch.Tensor, val: torch.Tensor, hypersparse: bool) -> CSRView:
    """The view of a COO A (its indices `indices` with unit-stride rows, its values `val`)
    by torch ops, where coo_structure's kernels do not build it: checked, coalesced, and
    with `hypersparse` through its non-empty rows only (CSRView.rows)."""
    sizes = tuple(A.shape)
    batch, n, m = sizes[0] if len(sizes) == 3 else 1, sizes[-2], sizes[-1]
    if not A.is_coalesced():
        # Check ranges before coalescing: coalesce would fold an out-of-range
        # index onto a valid position and hide the error.
        _check_coo_ranges(indices, sizes)
        A = A.coalesce()
        indices, val = unit_stride_rows(plain(A._indices())), plain(A._values())
    else:
        check_coo_order(indices, sizes, True)
    val = val.contiguous()
    rows = _global_rows(indices, n)
    if not hypersparse:
        ptr = torch.zeros(batch * n + 1, dtype=torch.int64, device=val.device)
        ptr[1:] = torch.bincount(rows, minlength=batch * n).cumsum(0)
        return CSRView(ptr, indices[-1], val, batch, n, m, A.shape, indices)
    kept, counts = torch.unique_consecutive(rows, return_counts=True)
    ptr = torch.zeros(kept.numel() + 1, dtype=torch.int64, device=val.device)
    torch.cumsum(counts, 0, out=ptr[1:])
    col = indices[-1] + indices[0] * m if len(sizes) == 3 else indices[-1]
    return CSRView(ptr, col.contiguous(), val, 1, kept.numel(), batch * m, A.shape, indices, kept)


# ----------------------------------------------------------------- the two caches
class _Cache:
    """At most `size` entries, newest last, each remembered with weak references to
    the storages it was derived from, and dropped once one of them is freed (its
    address may hold another structure then)."""

    def __init__(self, size: int):
        self.size = size
        self.entries: "OrderedDict[tuple, tuple]" = OrderedDict()
        self.lock = threading.Lock()

    def lookup(self, key: tuple):
        with self.lock:
            hit = self.entries.get(key)
            if hit is None:
                return None
            if any(r.expired() for r in hit[0]):
                del self.entries[key]
                return None
            self.entries.move_to_end(key)
            return hit[1]

    def remember(self, key: tuple, tensors, value) -> None:
        with self.lock:
            for k in [k for k, (refs, _) in self.entries.items() if any(r.expired() for r in refs)]:
                del self.entries[k]
            self.entries[key] = (tuple(StorageWeakRef(t.untyped_storage()) for t in tensors), value)
            while len(self.entries) > self.size:
                self.entries.popitem(last=False)


class CooStructure(NamedTuple):
    """How the entries of one index array coalesce: `indices` (sorted by row)
    with row pointers `ptr`; values in that order are values_of(values).  When
    the array is already in that order, `order` is None; else (an array sorted
    here) `order` and `slot` say how its values coalesce, and for a CPU array
    `source` is a private copy of it (the content the CPU cache compares)."""
    source: Optional[torch.Tensor]
    indices: torch.Tensor
    ptr: torch.Tensor
    order: Optional[torch.Tensor]
    slot: Optional[torch.Tensor]

    def values_of(self, val: torch.Tensor) -> torch.Tensor:
        """The values of the original entries in this structure's order: val[order]
        when no position repeats (`slot` None), else the sum, by index_add in entry
        order as coalesce() sums, at `slot` (the coalesced position of every entry)."""
        if self.order is None:
            return val
        if self.slot is None:
            return val.index_select(0, self.order)
        return val.new_zeros(self.indices.shape[1]).index_add_(0, self.slot, val)


def coo_structure(indices: torch.Tensor, sizes, coalesced: bool = False) -> CooStructure:
    """The coalesced structure of COO indices (int64, 2 or 3 rows, unit-stride rows, in
    any order, positions possibly repeated) of a tensor of `sizes`, every index checked
    first (ValueError): in C on CPU, on the device with the CUDA kernels, else by torch
    ops.  The way to take indices from user input: torch's coalesce() reads through
    them unchecked.  Their values in its order: values_of(values), differentiable."""
    if indices.is_cpu:
        return _cpu_coo_structure(indices, sizes, coalesced)
    if indices.is_cuda and native.cuda_kernels():
        return cuda_coo_structure(indices, sizes, coalesced)
    _check_coo_ranges(indices, sizes)
    return _sort_structure(indices, sizes, keep_source=False)


# CPU: structures of recently seen unsorted index arrays (entries hold private
# tensors only, never the user's, so the cache keeps no tensor alive)
CPU_STRUCTURES = _Cache(4)


def _cpu_coo_structure(indices: torch.Tensor, sizes, coalesced: bool) -> CooStructure:
    """The structure of CPU COO indices, checked in C as the row pointers are filled:
    the indices themselves when sorted and unique (one pass), else a cached sort."""
    n, batch = sizes[-2], sizes[0] if len(sizes) == 3 else 1
    ptr = torch.empty(batch * n + 1, dtype=torch.int64)
    if coalesced:                         # checks ranges and row order as it fills ptr
        _C.coo_row_ptr(indices, sizes, ptr, torch.get_num_threads())
    elif not _C.coo_row_ptr(indices, sizes, ptr, torch.get_num_threads(), True):
        return _coalesced_structure(indices, sizes)
    return CooStructure(None, indices, ptr, None, None)


def _coalesced_structure(indices: torch.Tensor, sizes) -> CooStructure:
    """The coalesced structure of a CPU COO index array whose indices are in range
    (checked by the caller) but not sorted and unique."""
    key = (indices.data_ptr(), tuple(indices.shape), indices.stride(), sizes)
    s = CPU_STRUCTURES.lookup(key)
    if s is not None and torch.equal(s.source, indices):
        return s
    s = _sort_structure(indices, sizes, keep_source=True)
    CPU_STRUCTURES.remember(key, (indices,), s)
    return s


def _sort_structure(indices: torch.Tensor, sizes, keep_source: bool) -> CooStructure:
    """The structure of indices in range but not sorted and unique, by a sort (torch
    ops, on the indices' device); keep_source keeps a private copy of them."""
    n, batch = sizes[-2], sizes[0] if len(sizes) == 3 else 1
    rows, cols = _global_rows(indices, n), indices[-1]
    order = torch.sort(cols, stable=True).indices                 # by (row, col), repeats
    order = order.index_select(0, torch.sort(rows.index_select(0, order), stable=True).indices)
    r, c = rows.index_select(0, order), cols.index_select(0, order)   # in entry order
    first = torch.ones_like(r, dtype=torch.bool)                  # first entry of its position
    torch.logical_or(r[1:] != r[:-1], c[1:] != c[:-1], out=first[1:])
    slot = None
    if not bool(first.all()):
        slot = torch.empty_like(order)
        slot[order] = torch.cumsum(first, 0) - 1
        order = order[first]
    coalesced = indices.index_select(1, order)
    if indices.is_cpu:
        ptr = torch.empty(batch * n + 1, dtype=torch.int64)
        _C.coo_row_ptr(coalesced, sizes, ptr, torch.get_num_threads())
    elif indices.is_cuda and native.cuda_kernels():
        ptr = _cuda_row_ptr(coalesced, sizes)
    else:
        ptr = torch.zeros(batch * n + 1, dtype=torch.int64, device=indices.device)
        ptr[1:] = torch.bincount(_global_rows(coalesced, n), minlength=batch * n).cumsum(0)
    return CooStructure(indices.clone() if keep_source else None, coalesced, ptr, order, slot)


# CUDA: every checked structure
CUDA_STRUCTURES = _Cache(16)

# What a route derives from a checked structure and keeps (the Triton solve's plan),
# on any device: keyed as the CUDA cache keys, by the view's index arrays
DERIVED = _Cache(16)


def derived(A: CSRView, what: tuple, build):
    """build() for the structure of the view A (its COO indices, or its CSR arrays) and
    `what` (a key of hashables), built once per structure and kept in DERIVED: a hit
    reads no element (see the module's docstring on the CUDA cache's key)."""
    arrays = (A.coo_indices,) if A.coo_indices is not None else (A.ptr, A.col)
    key = ("derived", A.batch, A.nrows, A.ncols) + tuple(what) + _cuda_key(*arrays)
    value = DERIVED.lookup(key)
    if value is None:
        value = build()
        DERIVED.remember(key, arrays, value)
    return value

# In the CUDA products, rows with more entries than this are split into pieces
# of this many (a plan, csrc/cuda/tsgu_cuda.h), so that one long row does not
# keep one group of lanes busy while the device idles.
LONG_ROW = 256
# ... and where row lengths vary more than this (their standard deviation over
# their mean), the plan also orders the rows by length, longest first, so that
# the rows a warp takes together are about as long as each other.  On an H200
# (10^6 rows, 16 a row): a power-law graph (1.15) took 0.56 / 0.71 / 0.90 of the
# time at p = 16 / 64 / 256 in that order; a uniformly random one (0.25) gained
# nothing, where sorting its lengths (as 64-bit keys then) cost each new structure
# about 0.2 ms.  Tests set it to 0 (ordered wherever lengths differ) or inf (never).
ROW_ORDER_CV = 1.0


def stream(t: torch.Tensor) -> int:
    """PyTorch's current stream on t's device, as a handle."""
    return _raw_stream(t.device.index)


# torch.cuda.current_stream(d).cuda_stream builds a Stream object per call; the
# raw handle is what torch.compile's generated code reads instead
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream",
                      lambda index: torch.cuda.current_stream(index).cuda_stream)


def _flag(t: torch.Tensor) -> torch.Tensor:
    return torch.zeros(1, dtype=torch.int32, device=t.device)


class _Plan(NamedTuple):
    long_rows: torch.Tensor
    piece_off: torch.Tensor
    piece_long: torch.Tensor
    order: Optional[torch.Tensor]

    def args(self, p: int, dtype: torch.dtype):
        """The plan as the kernels take it, with a fresh workspace of npieces x p sums."""
        acc = torch.float64 if dtype == torch.float64 else torch.float32
        work = torch.empty(self.piece_long.numel() * p, dtype=acc, device=self.long_rows.device)
        return (LONG_ROW, self.long_rows, self.piece_off, self.piece_long, work, self.order)


def _plan(ptr: torch.Tensor) -> Optional[_Plan]:
    """The plan of global pointers ptr: the pieces of the rows longer than LONG_ROW,
    and the rows in order of length where lengths vary (ROW_ORDER_CV); None where
    neither is needed.  One synchronisation."""
    lengths = ptr[1:] - ptr[:-1]
    R = lengths.numel()
    if R == 0:
        return None
    wide = lengths.double()
    longest, mean, mean_sq = torch.stack([wide.max(), wide.mean(), wide.square().mean()]).tolist()
    order = None
    if mean_sq - mean * mean > (ROW_ORDER_CV * mean) ** 2:
        # one byte a key (rows past 255 entries are the longest class anyway): a one-pass radix sort
        order = torch.argsort(lengths.clamp(max=255).to(torch.uint8), descending=True, stable=True)
    if longest > LONG_ROW:
        long_rows = torch.nonzero(lengths > LONG_ROW).squeeze(1)
    elif order is None:
        return None
    else:
        long_rows = torch.empty(0, dtype=torch.int64, device=ptr.device)
    pieces = (lengths[long_rows].long() + LONG_ROW - 1) // LONG_ROW
    piece_off = torch.zeros(long_rows.numel() + 1, dtype=torch.int64, device=ptr.device)
    torch.cumsum(pieces, 0, out=piece_off[1:])
    piece_long = torch.repeat_interleave(torch.arange(long_rows.numel(), device=ptr.device), pieces)
    return _Plan(long_rows, piece_off, piece_long, order)


# A transpose pattern is int32 (csrc/cuda/transpose.cu) where nnz and batch*m are under
# this, else int64 (PyTorch's sort); tests lower it to run the int64 path.
INT32_PATTERN_LIMIT = 2 ** 31 - 1


class CudaStructure:
    """A structure checked on the device: global pointers `ptr` (batch*n+1) and flat
    columns `col`, with what the kernels derive from it (product plan, entry rows,
    transpose) built on first use."""

    def __init__(self, ptr: torch.Tensor, col: torch.Tensor, batch: int, n: int, m: int):
        self.ptr, self.col, self.batch, self.n, self.m = ptr, col, batch, n, m
        self._plan = self._transpose = self._rows = None
        self._planned = False

    def rows(self) -> torch.Tensor:
        """The global row of every entry (the columns' dtype), built once."""
        if self._rows is None:
            self._rows = torch.empty(self.col.shape, dtype=self.col.dtype, device=self.col.device)
            _C.cuda_entry_rows(self.ptr, self.col, self.batch, self.n, self.m, self._rows, stream(self.col))
        return self._rows

    def plan(self, p: int, dtype: torch.dtype):
        if not self._planned:
            self._plan, self._planned = _plan(self.ptr), True
        return None if self._plan is None else self._plan.args(p, dtype)

    def transpose(self) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, "CudaStructure"]:
        """(tptr, trow, tperm, structure of A^T): every item's transpose in the global
        layout (batch*m+1 pointers), the row of A of each of its entries, and the
        entry's position in A's flat arrays; built once, by a stable sort (so the
        entries of a row of A^T are in increasing row of A: a fixed order): int32 by
        csrc/cuda/transpose.cu where every value fits, else int64 by PyTorch's sort."""
        if self._transpose is None:
            b, n, m = self.batch, self.n, self.m
            nnz = self.col.numel()
            if max(nnz, b * m) < INT32_PATTERN_LIMIT:
                tptr = torch.empty(b * m + 1, dtype=torch.int32, device=self.col.device)
                trow, tperm = (torch.empty(nnz, dtype=torch.int32, device=self.col.device) for _ in range(2))
                work = torch.empty(_C.cuda_transpose_bytes(nnz, b * m), dtype=torch.uint8, device=self.col.device)
                _C.cuda_transpose(self.ptr, self.col, b, n, m, tptr, trow, tperm, work, stream(self.col))
                self._transpose = (tptr, trow, tperm, CudaStructure(tptr, trow, b, m, n))
                return self._transpose
            rows = entry_rows(self.ptr)
            item = rows // n if n else rows
            key = item * m + self.col.long()
            tperm = torch.argsort(key, stable=True)
            trow = (rows - item * n).index_select(0, tperm)
            tptr = torch.zeros(b * m + 1, dtype=torch.int64, device=key.device)
            torch.cumsum(torch.bincount(key, minlength=b * m), 0, out=tptr[1:])
            self._transpose = (tptr, trow, tperm, CudaStructure(tptr, trow, b, m, n))
        return self._transpose


def _cuda_key(*tensors: torch.Tensor) -> tuple:
    return tuple((t.data_ptr(), tuple(t.shape), t.stride(), t.dtype, t._version) for t in tensors)


def cuda_structure(A: CSRView) -> CudaStructure:
    """The checked structure of a CUDA view A (raises ValueError if malformed): a
    batched CSR's pointers are made global; a view made from COO indices (checked
    by cuda_coo_structure) is taken as it is."""
    key = ("csr", A.batch, A.nrows, A.ncols) + _cuda_key(A.ptr, A.col)
    s = CUDA_STRUCTURES.lookup(key)
    if s is not None:
        return s
    ptr, col = A.ptr, A.col
    item_nnz = -1
    if ptr.dim() == 2:                                   # batched CSR: (b, n+1), col (b, nnz)
        item_nnz = col.shape[1]
        if ptr.shape[1] and bool((ptr[:, -1] != item_nnz).any()):
            raise ValueError(native.STATUS["EPTR_ENDS"])
        itype = torch.int64 if A.batch * item_nnz >= 2 ** 31 else ptr.dtype
        offsets = torch.arange(A.batch, device=ptr.device, dtype=itype).unsqueeze(1) * item_nnz
        ptr = torch.cat([(ptr[:, :-1].to(itype) + offsets).reshape(-1),
                         ptr.new_full((1,), A.batch * item_nnz, dtype=itype)])
        col = col.reshape(-1).to(itype)
    if A.coo_indices is None:
        _C.cuda_csr_check(ptr, col, A.batch, A.nrows, A.ncols, item_nnz, _flag(ptr), stream(ptr))
    s = CudaStructure(ptr, col, A.batch, A.nrows, A.ncols)
    CUDA_STRUCTURES.remember(key, (A.ptr, A.col), s)
    return s


def cuda_columns_increase(ptr: torch.Tensor, col: torch.Tensor, ncols: int) -> bool:
    """Whether (ptr, col), a well-formed CUDA CSR matrix but for the order of its
    columns (a product of PyTorch's), has each row's columns increasing: the
    structure check, one kernel and one synchronisation."""
    try:
        _C.cuda_csr_check(ptr, col, 1, ptr.numel() - 1, ncols, -1, _flag(ptr), stream(ptr))
    except ValueError:
        return False
    return True


def cuda_coo_structure(indices: torch.Tensor, sizes: tuple, coalesced: bool) -> CooStructure:
    """The CSR form of CUDA COO indices (see CooStructure), checked on the device: an
    index out of range, or indices flagged coalesced but not strictly increasing in
    (row, col), raise ValueError; unsorted ones are sorted once (torch ops)."""
    key = ("coo", sizes, coalesced) + _cuda_key(indices)
    s = CUDA_STRUCTURES.lookup(key)
    if s is not None:
        return s
    try:
        order = _C.cuda_coo_check(indices, sizes, coalesced, _flag(indices), stream(indices))
    except ValueError:
        _check_coo_ranges(indices.cpu(), sizes)     # an index out of range: the host's check names it
        raise
    if order and not coalesced:
        s = _sort_structure(indices, sizes, keep_source=False)
    else:
        s = CooStructure(None, indices, _cuda_row_ptr(indices, sizes), None, None)
    CUDA_STRUCTURES.remember(key, (indices,), s)
    return s


def _cuda_row_ptr(indices: torch.Tensor, sizes: tuple) -> torch.Tensor:
    """The row pointers of checked CUDA COO indices sorted by (batch, row)."""
    n, batch = sizes[-2], sizes[0] if len(sizes) == 3 else 1
    ptr = torch.empty(batch * n + 1, dtype=torch.int64, device=indices.device)
    _C.cuda_coo_row_ptr(indices, sizes, ptr, stream(indices))
    return ptr
