"""The CUDA kernels (csrc/cuda/) on CSR views of CUDA tensors.

Built where `nvcc` was found (setup.py); `usable(...)` says whether these
kernels take the given tensors.  Without them CUDA tensors go through
PyTorch's own ops (see _kernels.py).

Each distinct structure (row pointers and columns, or COO indices) is checked
once on the device, with one synchronisation, and remembered with what is
derived from it: the pointers made global, the long-row plan, every entry's
row (for the SDDMM), the transpose pattern for A^T @ G.  A structure is
recognised by where its index tensors lie, their shapes and their version
counters, and forgotten once their memory is freed: a training loop that
reuses its adjacency never waits for the device.  An in-place edit that bypasses the version counter (an index tensor
aliased by torch.sparse_coo_tensor has its own) is not seen; the kernels
still clamp every pointer and skip every column out of range, so it can give
a wrong result but never a read out of bounds.
"""
import threading
from collections import OrderedDict
from typing import NamedTuple, Optional, Tuple

import torch
from torch.multiprocessing.reductions import StorageWeakRef

from . import _C, _csr

BUILT = bool(_C.cuda)

# Tests set this to False to run CUDA tensors through the torch-ops fallback.
enabled = True

# In products, rows with more entries than this are split into pieces of this
# many (a plan, csrc/cuda/tsgu_cuda.h), so that one long row does not keep one
# group of lanes busy while the device idles.
LONG_ROW = 256

_MAX_STRUCTURES = 16


def usable(*tensors: torch.Tensor) -> bool:
    """Do the CUDA kernels take these tensors (all on CUDA, kernels built and enabled)?"""
    if not (BUILT and enabled):
        return False
    for t in tensors:
        if not t.is_cuda:
            return False
    return True


def _stream(t: torch.Tensor) -> int:
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

    def args(self, p: int, dtype: torch.dtype):
        """The plan as the kernels take it, with a fresh workspace of npieces x p sums."""
        acc = torch.float64 if dtype == torch.float64 else torch.float32
        work = torch.empty(self.piece_long.numel() * p, dtype=acc, device=self.long_rows.device)
        return (LONG_ROW, self.long_rows, self.piece_off, self.piece_long, work)


def _plan(ptr: torch.Tensor) -> Optional[_Plan]:
    """The pieces of the rows longer than LONG_ROW of global pointers ptr; None if none is."""
    lengths = (ptr[1:] - ptr[:-1]).long()
    long_rows = torch.nonzero(lengths > LONG_ROW).squeeze(1)
    if long_rows.numel() == 0:
        return None
    pieces = (lengths[long_rows] + LONG_ROW - 1) // LONG_ROW
    piece_off = torch.zeros(long_rows.numel() + 1, dtype=torch.int64, device=ptr.device)
    torch.cumsum(pieces, 0, out=piece_off[1:])
    piece_long = torch.repeat_interleave(torch.arange(long_rows.numel(), device=ptr.device), pieces)
    return _Plan(long_rows, piece_off, piece_long)


class _Structure:
    """A checked structure: global pointers `ptr` (batch*n+1) and flat columns
    `col`, with what the kernels derive from it (long-row plan, entry rows,
    transpose) built on first use."""

    def __init__(self, ptr: torch.Tensor, col: torch.Tensor, batch: int, n: int, m: int):
        self.ptr, self.col, self.batch, self.n, self.m = ptr, col, batch, n, m
        self._plan = self._transpose = self._rows = None
        self._planned = False

    def rows(self) -> torch.Tensor:
        """The global row of every entry (the columns' dtype), built once."""
        if self._rows is None:
            self._rows = _csr.entry_rows(self.ptr).to(self.col.dtype)
        return self._rows

    def plan(self, p: int, dtype: torch.dtype):
        if not self._planned:
            self._plan, self._planned = _plan(self.ptr), True
        return None if self._plan is None else self._plan.args(p, dtype)

    def transpose(self) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, "_Structure"]:
        """(tptr, trow, tperm, structure of A^T): every item's transpose in the global
        layout (batch*m+1 pointers), the row of A of each of its entries, and the
        entry's position in A's flat arrays; built once, by a stable sort (so the
        entries of a row of A^T are in increasing row of A: a fixed order)."""
        if self._transpose is None:
            b, n, m = self.batch, self.n, self.m
            rows = _csr.entry_rows(self.ptr)
            item = rows // n if n else rows
            key = item * m + self.col.long()
            tperm = torch.argsort(key, stable=True)
            trow = (rows - item * n).index_select(0, tperm)
            tptr = torch.zeros(b * m + 1, dtype=torch.int64, device=key.device)
            torch.cumsum(torch.bincount(key, minlength=b * m), 0, out=tptr[1:])
            # int32 where every value fits: the pattern is kept, and read every backward
            itype = torch.int32 if max(key.numel(), b * m + 1) < 2 ** 31 else torch.int64
            tptr, trow, tperm = tptr.to(itype), trow.to(itype), tperm.to(itype)
            self._transpose = (tptr, trow, tperm, _Structure(tptr, trow, b, m, n))
        return self._transpose


# Checked structures, newest last: key -> (storage weak references, structure).
_STRUCTURES: "OrderedDict[tuple, tuple]" = OrderedDict()
_LOCK = threading.Lock()


def _key(*tensors: torch.Tensor) -> tuple:
    return tuple((t.data_ptr(), tuple(t.shape), t.stride(), t.dtype, t._version) for t in tensors)


def _lookup(key: tuple):
    """The structure remembered under key, unless the memory it was derived from was
    freed since (then the key's address may hold another structure now)."""
    with _LOCK:
        hit = _STRUCTURES.get(key)
        if hit is None:
            return None
        if any(r.expired() for r in hit[0]):
            del _STRUCTURES[key]
            return None
        _STRUCTURES.move_to_end(key)
        return hit[1]


def _remember(key: tuple, tensors, value) -> None:
    with _LOCK:
        for k in [k for k, (refs, _) in _STRUCTURES.items() if any(r.expired() for r in refs)]:
            del _STRUCTURES[k]
        _STRUCTURES[key] = (tuple(StorageWeakRef(t.untyped_storage()) for t in tensors), value)
        while len(_STRUCTURES) > _MAX_STRUCTURES:
            _STRUCTURES.popitem(last=False)


def structure(A: "_csr.CSRView") -> _Structure:
    """The checked structure of A (raises ValueError if malformed): a batched CSR's
    pointers are made global; a view made from COO indices (checked by
    coo_structure) is taken as it is."""
    key = ("csr", A.batch, A.nrows, A.ncols) + _key(A.ptr, A.col)
    s = _lookup(key)
    if s is not None:
        return s
    ptr, col = A.ptr, A.col
    item_nnz = -1
    if ptr.dim() == 2:                                   # batched CSR: (b, n+1), col (b, nnz)
        item_nnz = col.shape[1]
        if ptr.shape[1] and bool((ptr[:, -1] != item_nnz).any()):
            raise ValueError("malformed sparse matrix: row pointers (crow_indices) "
                             "must start at 0 and end at the number of stored entries")
        itype = torch.int64 if A.batch * item_nnz >= 2 ** 31 else ptr.dtype
        offsets = torch.arange(A.batch, device=ptr.device, dtype=itype).unsqueeze(1) * item_nnz
        ptr = torch.cat([(ptr[:, :-1].to(itype) + offsets).reshape(-1),
                         ptr.new_full((1,), A.batch * item_nnz, dtype=itype)])
        col = col.reshape(-1).to(itype)
    if A.coo_indices is None:
        _C.cuda_csr_check(ptr, col, A.batch, A.nrows, A.ncols, item_nnz, _flag(ptr), _stream(ptr))
    s = _Structure(ptr, col, A.batch, A.nrows, A.ncols)
    _remember(key, (A.ptr, A.col), s)
    return s


def coo_structure(indices: torch.Tensor, sizes: tuple, coalesced: bool) -> "_csr.CooStructure":
    """The CSR form of CUDA COO indices (see _csr.CooStructure), checked on the device:
    an index out of range, or indices flagged coalesced but not sorted by row, raise
    ValueError; unsorted ones are sorted once (torch ops)."""
    key = ("coo", sizes, coalesced) + _key(indices)
    s = _lookup(key)
    if s is not None:
        return s
    order = _C.cuda_coo_check(indices, sizes, coalesced, _flag(indices), _stream(indices))
    if order and not coalesced:
        s = _csr.sort_structure(indices, sizes, keep_source=False)
    else:
        s = _csr.CooStructure(None, None, indices, row_ptr(indices, sizes), None, None)
    _remember(key, (indices,), s)
    return s


def row_ptr(indices: torch.Tensor, sizes: tuple) -> torch.Tensor:
    """The row pointers of checked COO indices sorted by (batch, row)."""
    n, batch = sizes[-2], sizes[0] if len(sizes) == 3 else 1
    ptr = torch.empty(batch * n + 1, dtype=torch.int64, device=indices.device)
    _C.cuda_coo_row_ptr(indices, sizes, ptr, _stream(indices))
    return ptr


# ------------------------------------------------------------------ the products
def spmm(A: "_csr.CSRView", B: torch.Tensor) -> torch.Tensor:
    """A @ B for every batch item (B prepared as the kernels read dense operands)."""
    s = structure(A)
    p = B.shape[-1]
    C = torch.empty((A.batch, A.nrows, p) if B.dim() == 3 else (A.nrows, p), dtype=B.dtype, device=B.device)
    _C.cuda_spmm(s.ptr, s.col, _csr.plain(A.values).reshape(-1), None, A.batch, A.nrows, A.ncols, B, C,
                 s.plan(p, B.dtype), _stream(B))
    return C


def spmm_t(A: "_csr.CSRView", G: torch.Tensor) -> torch.Tensor:
    """A^T @ G for every batch item, through A's transpose pattern: no atomics."""
    tptr, trow, tperm, t = structure(A).transpose()
    p = G.shape[-1]
    out = torch.empty((A.batch, A.ncols, p) if G.dim() == 3 else (A.ncols, p), dtype=G.dtype, device=G.device)
    _C.cuda_spmm(tptr, trow, _csr.plain(A.values).reshape(-1), tperm, A.batch, A.ncols, A.nrows, G, out,
                 t.plan(p, G.dtype), _stream(G))
    return out


def sddmm(A: "_csr.CSRView", G: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """dot(G[k][i,:], B[k][j,:]) at every stored entry, shaped like A.col."""
    s = structure(A)
    g = torch.empty(s.col.shape, dtype=G.dtype, device=G.device)
    _C.cuda_sddmm(s.ptr, s.col, s.rows(), A.batch, A.nrows, A.ncols, G, B, g, _stream(G))
    return g.reshape(A.col.shape)
