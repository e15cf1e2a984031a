"""A sparse tensor (COO or CSR, 2D or batched) seen as the CSR view the kernels take,
and the one way every autograd Function saves such an operand for its backward.

`as_csr(A)` checks A's structure (in C, O(nnz)) and returns a `CSRView`: row
pointers, column indices and values, without copying A's arrays when A is CSR
or a COO whose entries are sorted and unique (flagged coalesced or not); an
unsorted COO is coalesced through a cached sort of its index array.
`CSRView.grad_like(values)` builds a sparse tensor in A's own layout holding
`values` at A's stored positions: the gradient w.r.t. A.
`save_operand` / `load_operand` keep a view (and whatever else a Function
needs) across forward and backward so that in-place edits of A's values are
caught or cannot matter.
"""
import threading
import weakref
from collections import OrderedDict
from typing import NamedTuple, Optional

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils.dlpack import to_dlpack

from . import _C, _cuda

# A COO matrix with more than this many rows per stored entry is hypersparse:
# its row pointers (O(rows)) would dwarf its entries, so only its non-empty rows
# are kept (CSRView.rows).
_HYPERSPARSE_ROWS_PER_ENTRY = 8


class CSRView(NamedTuple):
    """Row pointers + columns + values of `batch` matrices of `nrows` x `ncols`.

    ptr is 1D (batch*nrows+1, one global array: the COO case) or 2D
    (batch, nrows+1: batched CSR); col and values are 1D or (batch, nnz).
    `shape` is the sparse tensor's shape; `coo_indices` is set when A was COO:
    the (coalesced) index array that the gradient is returned on.
    `rows` is set for a hypersparse COO A: then the view is one matrix whose
    rows are A's non-empty rows (global row `rows[r]` of the (b*n, b*m) block
    diagonal) and whose columns are the global columns k*m + j."""

    ptr: torch.Tensor
    col: torch.Tensor
    values: Optional[torch.Tensor]
    batch: int
    nrows: int
    ncols: int
    shape: torch.Size
    coo_indices: Optional[torch.Tensor] = None
    rows: Optional[torch.Tensor] = None

    def grad_like(self, g: torch.Tensor) -> torch.Tensor:
        """A sparse tensor in A's layout with values g at A's stored positions;
        differentiable in g, without densifying, when g carries a graph."""
        if self.coo_indices is not None:
            return torch.sparse_coo_tensor(self.coo_indices, g, self.shape, is_coalesced=True)
        if g.requires_grad:
            from .sparse_tensor import sparse_csr_tensor  # torch's own densifies in backward
            return sparse_csr_tensor(self.ptr, self.col, g, self.shape)
        return torch.sparse_csr_tensor(self.ptr, self.col, g, self.shape)

    def to_torch(self) -> torch.Tensor:
        """The (detached) sparse tensor this view holds, in A's layout."""
        return self.grad_like(self.values.detach())


class SparseCSR(NamedTuple):
    """A CSR matrix (or batch) as a plain tuple of dense tensors: the operand that
    ``torch.compile`` can trace (Dynamo cannot take torch sparse tensors).

    ``crow_indices`` is ``(n+1,)``, or for a batch ``(b, n+1)`` with ``col_indices``
    and ``values`` ``(b, nnz)`` (torch's batched CSR), or ``(b*n+1,)`` with 1D
    ``col_indices`` and ``values`` (one pointer array over the stacked rows: what a
    batched COO tensor becomes, items may differ in nnz).  ``size`` is ``(n, m)``
    or ``(b, n, m)``.  Accepted by :func:`~torchsparsegradutils.sparse_mm` wherever
    a torch sparse tensor is; gradients reach ``values`` (shape ``(nnz,)``, never
    dense).  The fields' shapes are checked against ``size`` by every op, the
    structure by the kernels as they read it, and by :meth:`to_torch` before it
    hands it to PyTorch.

    >>> import torch
    >>> from torchsparsegradutils import SparseCSR, sparse_mm
    >>> w = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> A = SparseCSR(torch.tensor([0, 2, 3]), torch.tensor([0, 1, 1]), w, (2, 2))
    >>> sparse_mm(A, torch.ones(2, 1)).sum().backward()
    >>> w.grad
    tensor([1., 1., 1.])
    """

    crow_indices: torch.Tensor
    col_indices: torch.Tensor
    values: torch.Tensor
    size: tuple

    @property
    def shape(self) -> torch.Size:
        return torch.Size(self.size)

    @property
    def dtype(self) -> torch.dtype:
        return self.values.dtype

    @property
    def device(self) -> torch.device:
        return self.values.device

    @property
    def layout(self):
        return torch.sparse_csr

    def dim(self) -> int:
        return len(self.size)

    def dense_dim(self) -> int:
        return 0

    @staticmethod
    def from_torch(A: torch.Tensor) -> "SparseCSR":
        """The components of a sparse COO or CSR tensor, 2D or batched (its values
        detached: make them a leaf of your own to learn them)."""
        view = as_csr(A.detach())
        return SparseCSR(view.ptr, view.col, view.values, tuple(A.shape))

    def to_torch(self) -> torch.Tensor:
        """A torch sparse tensor: CSR, or COO for the stacked-rows batch layout;
        differentiable in ``values``.  The structure is checked first (ValueError if
        malformed): PyTorch's sparse ops trust what they are given."""
        view = self.view()
        check_structure(view)
        if self.crow_indices.dim() == 2 or len(self.size) == 2:
            return view.grad_like(self.values)
        b, n, m = self.size
        rows = entry_rows(self.crow_indices)
        indices = torch.stack([rows // n, rows % n, self.col_indices.to(rows.dtype)])
        return torch.sparse_coo_tensor(indices, self.values, self.size, is_coalesced=True)

    def view(self) -> "CSRView":
        """The CSRView of these components (values as given, not detached)."""
        shape = self.shape
        return CSRView(self.crow_indices, self.col_indices, self.values, shape[0] if len(shape) == 3 else 1,
                       shape[-2], shape[-1], shape)


def check_arrays(ptr: torch.Tensor, col: torch.Tensor, values: Optional[torch.Tensor], shape,
                 rows: Optional[torch.Tensor] = None) -> None:
    """The shapes and index dtypes of a CSR pattern's arrays for a matrix (or batch) of
    `shape`, with a ValueError (TypeError for a dtype) naming what is wrong: shape
    is (n, m) or (b, n, m), non-negative; ptr is (b*n+1,) with col 1D, or (b, n+1)
    with col (b, nnz); for a view of a hypersparse COO's non-empty `rows` (see
    CSRView.rows), ptr is (len(rows)+1,) with col 1D; values, where given, have
    col's shape (one per stored entry).  The indices themselves are checked by
    check_structure, or by the kernels as they read them.  (Each property is read
    once: this runs on every call of an op on a SparseCSR.)"""
    nd = len(shape)
    if nd == 2:
        b, (n, m) = 1, shape
    elif nd == 3:
        b, n, m = shape
    if nd not in (2, 3) or b < 0 or n < 0 or m < 0:
        raise ValueError(f"a sparse matrix's size must be (n, m) or (b, n, m), none negative; got {tuple(shape)}")
    itype = ptr.dtype
    if itype is not col.dtype or (itype is not torch.int64 and itype is not torch.int32):
        raise TypeError(f"crow_indices and col_indices must be both int32 or both int64, got {itype} "
                        f"and {col.dtype}")
    pshape, cshape = ptr.shape, col.shape
    if rows is not None:
        ok = rows.dim() == 1 and pshape == (rows.shape[0] + 1,) and len(cshape) == 1
    elif len(pshape) == 1:
        ok = pshape[0] == b * n + 1 and len(cshape) == 1
    else:
        ok = nd == 3 and pshape == (b, n + 1) and len(cshape) == 2 and cshape[0] == b
    if not ok:       # the message built only here: torch.compile cannot trace f-strings of sizes
        want = "(non-empty rows + 1,) with 1D col_indices" if rows is not None else \
            f"({b * n + 1},) with 1D col_indices" + \
            (f", or ({b}, {n + 1}) with col_indices ({b}, nnz)" if nd == 3 else "")
        raise ValueError(f"for a sparse matrix of size {tuple(shape)}, crow_indices must have shape {want}; "
                         f"got crow_indices {tuple(pshape)} and col_indices {tuple(cshape)}")
    if values is not None and values.shape != cshape:
        raise ValueError(f"values must have the shape of col_indices (one value per stored entry); "
                         f"got {tuple(values.shape)} and {tuple(cshape)}")


def check_structure(view: CSRView) -> None:
    """Check a CSR view made from user arrays before anything but our kernels reads
    it (their shapes: check_arrays; pointers from 0 to nnz, non-decreasing, columns
    in range and increasing within a row), raising ValueError: in C on CPU
    (csrc/csr_check.c), on the device where the CUDA kernels are built, else by
    PyTorch's own validator."""
    # the view's own geometry: a hypersparse COO's non-empty rows are (1, kept, b*m)
    own = (view.batch, view.nrows, view.ncols)
    check_arrays(view.ptr, view.col, view.values, view.shape if tuple(view.shape[-2:]) == own[1:] else own)
    ptr, col = plain(view.ptr).contiguous(), plain(view.col).contiguous()
    if ptr.is_cpu:
        _C.csr_check(ptr, col, view.batch, view.nrows, view.ncols, torch.get_num_threads())
    elif _cuda.usable(ptr):
        _cuda.structure(view._replace(ptr=ptr, col=col))
    else:
        _torch_check_structure(ptr, col, view)


def _torch_check_structure(ptr: torch.Tensor, col: torch.Tensor, view: CSRView) -> None:
    """check_structure's indices by PyTorch's validator of compressed tensors (the
    stacked-rows layout as one matrix of b*n rows)."""
    shape = view.shape if ptr.dim() == 2 else (view.batch * view.nrows, view.ncols)
    values = torch.zeros(col.shape, device=col.device)
    try:
        torch._validate_sparse_csr_tensor_args(ptr, col, values, shape)
    except RuntimeError as e:
        raise ValueError(f"malformed sparse matrix: {e}") from None


def entry_rows(crow: torch.Tensor) -> torch.Tensor:
    """The row of every stored entry (int64) of CSR row pointers ``(n+1,)``; for a
    batch, ``(b, n+1)`` or the stacked ``(b*n+1,)``, the global row ``k*n + i``."""
    counts = (crow[..., 1:] - crow[..., :-1]).reshape(-1)
    return torch.repeat_interleave(torch.arange(counts.numel(), device=crow.device), counts)


def plain(t: torch.Tensor) -> torch.Tensor:
    """t as the C kernels may read it: detached, and with PyTorch's lazy negation
    applied (DLPack carries no such bit: a `.neg()` view would otherwise be read
    with the wrong sign).  The lazy conjugation needs no care: only complex
    tensors carry it, and the kernels refuse complex dtypes."""
    if t.requires_grad:
        t = t.detach()
    return t.resolve_neg() if t.is_neg() else t


# Every tensor reaches the C kernels as a DLTensor: borrowed through PyTorch's
# DLPack C exchange table where it has one (no capsule, about 0.05 us a tensor),
# else through this C-level DLPack export (Tensor.__dlpack__ costs ten times more
# per call, in Python).  Neither checks what plain() makes true: no negation bit.
_C.set_exporter(to_dlpack)
_C.use_exchange_api(torch.Tensor)


def as_csr(A: torch.Tensor, compress_rows: bool = False) -> CSRView:
    """The CSR view of a sparse COO/CSR tensor of shape (n, m) or (b, n, m), detached
    or read where no graph is recorded (its arrays are taken through plain()).
    With compress_rows, a hypersparse COO A keeps only its non-empty rows (see
    CSRView.rows): memory O(nnz), however many rows A has."""
    if A.layout == torch.sparse_csr:
        return _from_csr(A)
    return _from_coo(A, compress_rows)


def checked_view(A: torch.Tensor) -> CSRView:
    """as_csr(A) with A's structure checked whatever its layout (a CSR A's is otherwise
    left to the kernels, as they read it): for a sparse tensor from user input whose
    arrays PyTorch's own ops or index arithmetic will read."""
    view = as_csr(A)
    if A.layout == torch.sparse_csr:
        check_structure(view)
    return view


def _from_csr(A: torch.Tensor) -> CSRView:
    if A.dense_dim() != 0:
        raise ValueError("A must not have dense dimensions (hybrid CSR tensors are not supported)")
    shape = A.shape
    ptr, col, val = (plain(t).contiguous() for t in (A.crow_indices(), A.col_indices(), A.values()))
    return CSRView(ptr, col, val, shape[0] if len(shape) == 3 else 1, shape[-2], shape[-1], shape)


def _from_coo(A: torch.Tensor, compress_rows: bool) -> CSRView:
    """A COO A's view.  On CPU one pass in C checks every index and builds the row
    pointers; an A not flagged coalesced whose entries are sorted and unique (most
    index arrays are) is used as it is, and only one that is not is coalesced,
    through a cached sort of its index array (see _coalesced_structure)."""
    if A.dense_dim() != 0:
        raise ValueError("A must not have dense dimensions (hybrid COO tensors are not supported)")
    shape = A.shape
    sizes = tuple(shape)
    batch = sizes[0] if len(sizes) == 3 else 1
    n, m = sizes[-2], sizes[-1]
    indices = _unit_stride_rows(plain(A._indices()))
    val = plain(A._values())
    coalesced = A.is_coalesced()
    hypersparse = compress_rows and batch * n > _HYPERSPARSE_ROWS_PER_ENTRY * (indices.shape[1] + 1)
    if not hypersparse and (A.is_cpu or _cuda.usable(indices)):
        s = coo_structure(indices, sizes, coalesced)
        return CSRView(s.ptr, s.indices[-1], s.values_of(val).contiguous(), batch, n, m, shape, s.indices)
    if not coalesced:
        # Check ranges before coalescing: coalesce would fold an out-of-range
        # index onto a valid position and hide the error.
        _check_coo_ranges(indices, sizes)
        A = A.coalesce()
        indices = _unit_stride_rows(plain(A._indices()))
        val = plain(A._values())
    else:
        _check_coo_ranges(indices, sizes)
    val = val.contiguous()
    if hypersparse:
        return _hypersparse(indices, val, sizes, shape)
    ptr = torch.zeros(batch * n + 1, dtype=torch.int64, device=A.device)
    ptr[1:] = torch.bincount(_global_rows(indices, n), minlength=batch * n).cumsum(0)
    return CSRView(ptr, indices[-1], val, batch, n, m, shape, indices)


# ------------------------------------------------- the coalesced form of a COO index array
class CooStructure(NamedTuple):
    """How the entries of one index array coalesce: `indices` (sorted by row)
    with row pointers `ptr`; values in that order are values_of(values).  When
    the array is already in that order, `order` is None; else (an array sorted
    here) `order` and `slot` say how its values coalesce, and for a CPU array
    `source` is a private copy of it (see _STRUCTURES) and `storage` its memory."""
    source: Optional[torch.Tensor]
    storage: Optional[StorageWeakRef]
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
    if _cuda.usable(indices):
        return _cuda.coo_structure(indices, sizes, coalesced)
    _check_coo_ranges(indices, sizes)
    return sort_structure(indices, sizes, keep_source=False)


def _cpu_coo_structure(indices: torch.Tensor, sizes, coalesced: bool) -> CooStructure:
    """The structure of CPU COO indices, checked in C as the row pointers are filled:
    the indices themselves when sorted and unique (one pass), else a cached sort."""
    n, batch = sizes[-2], sizes[0] if len(sizes) == 3 else 1
    ptr = torch.empty(batch * n + 1, dtype=torch.int64)
    if coalesced:                         # checks ranges and row order as it fills ptr
        _C.coo_row_ptr(indices, sizes, ptr, torch.get_num_threads())
    elif not _C.coo_row_ptr(indices, sizes, ptr, torch.get_num_threads(), True):
        return _coalesced_structure(indices, sizes)
    return CooStructure(None, None, indices, ptr, None, None)


# Structures of recently seen unsorted index arrays, newest last, keyed by where
# and how the array lies in memory.  A hit is only a candidate: it is used when
# the array still holds exactly `source` (one comparison, O(nnz)).  No version
# counter or identity can stand in for that comparison: torch.sparse_coo_tensor
# shares its indices' memory but not their version counter, so an in-place edit
# of the user's index tensor changes A's indices and no counter A can see.
# Entries hold private tensors only (never the user's), so the cache keeps no
# tensor alive; at most _MAX_STRUCTURES are kept, and one whose index memory has
# been freed is dropped at the next look-up.
_STRUCTURES: "OrderedDict[tuple, CooStructure]" = OrderedDict()
_MAX_STRUCTURES = 4
_STRUCTURES_LOCK = threading.Lock()


def _coalesced_structure(indices: torch.Tensor, sizes) -> CooStructure:
    """The coalesced structure of a CPU COO index array whose indices are in range
    (checked by the caller) but not sorted and unique."""
    key = (indices.data_ptr(), tuple(indices.shape), indices.stride(), sizes)
    with _STRUCTURES_LOCK:
        for k in [k for k, s in _STRUCTURES.items() if s.storage.expired()]:
            del _STRUCTURES[k]
        s = _STRUCTURES.get(key)
        if s is not None:
            _STRUCTURES.move_to_end(key)
    if s is not None and torch.equal(s.source, indices):
        return s
    s = sort_structure(indices, sizes, keep_source=True)
    with _STRUCTURES_LOCK:
        _STRUCTURES[key] = s
        _STRUCTURES.move_to_end(key)
        while len(_STRUCTURES) > _MAX_STRUCTURES:
            _STRUCTURES.popitem(last=False)
    return s


def sort_structure(indices: torch.Tensor, sizes, keep_source: bool) -> CooStructure:
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
    elif _cuda.usable(indices):
        ptr = _cuda.row_ptr(coalesced, sizes)
    else:
        ptr = torch.zeros(batch * n + 1, dtype=torch.int64, device=indices.device)
        ptr[1:] = torch.bincount(_global_rows(coalesced, n), minlength=batch * n).cumsum(0)
    source = indices.clone() if keep_source else None
    storage = StorageWeakRef(indices.untyped_storage()) if keep_source else None
    return CooStructure(source, storage, coalesced, ptr, order, slot)


def _hypersparse(indices: torch.Tensor, val: torch.Tensor, sizes, shape) -> CSRView:
    """The view of a coalesced COO A, its indices in range, through its non-empty rows
    only (CSRView.rows)."""
    n, m = sizes[-2], sizes[-1]
    rows = _global_rows(indices, n)
    if rows.numel() > 1 and bool((rows[1:] < rows[:-1]).any()):
        raise ValueError("malformed sparse matrix: the COO tensor is marked coalesced "
                         "but its indices are not sorted by row")
    kept, counts = torch.unique_consecutive(rows, return_counts=True)
    ptr = torch.zeros(kept.numel() + 1, dtype=torch.int64, device=val.device)
    torch.cumsum(counts, 0, out=ptr[1:])
    col = indices[-1] + indices[0] * m if len(sizes) == 3 else indices[-1]
    batch = sizes[0] if len(sizes) == 3 else 1
    return CSRView(ptr, col.contiguous(), val, 1, kept.numel(), batch * m, shape, indices, kept)


def _global_rows(indices: torch.Tensor, n: int) -> torch.Tensor:
    """Row of each COO entry in the (b*n)-row block diagonal of a batch."""
    return indices[-2] + indices[0] * n if indices.shape[0] == 3 else indices[-2]


def _unit_stride_rows(indices: torch.Tensor) -> torch.Tensor:
    """indices itself when each of its rows is unit-stride (a coalesced tensor's
    indices are often a view into a longer buffer), else a contiguous copy."""
    if indices.shape[1] <= 1 or indices.stride(1) == 1:
        return indices
    return indices.contiguous()


def _check_coo_ranges(indices: torch.Tensor, sizes) -> None:
    """Every COO index in [0, size of its dimension): in C on CPU, else with torch ops."""
    if indices.device.type == "cpu":
        _C.coo_row_ptr(indices, sizes, None, torch.get_num_threads())
    elif indices.numel():
        bound = torch.tensor(sizes, device=indices.device).unsqueeze(1)
        if bool(((indices < 0) | (indices >= bound)).any()):
            raise ValueError(
                "malformed sparse matrix: an index is negative or not less than the size of its dimension"
            )


# ---------------------------------------------------------------- saved operands
def save_view(ctx, view: CSRView, *tensors) -> None:
    """ctx.save_for_backward of a view's arrays and of `tensors` (None allowed);
    load_view gives both back."""
    ctx.tsgu_view = view._replace(ptr=None, col=None, values=None, coo_indices=None, rows=None)
    ctx.save_for_backward(view.ptr, view.col, view.values, view.coo_indices, view.rows, *tensors)


def load_view(ctx):
    """(view, tensors) as save_view saved them."""
    ptr, col, values, coo_indices, rows, *tensors = ctx.saved_tensors
    return ctx.tsgu_view._replace(ptr=ptr, col=col, values=values, coo_indices=coo_indices, rows=rows), tensors


def save_operand(ctx, A: torch.Tensor, view: CSRView, need_values: bool, *tensors) -> None:
    """Save the sparse operand A (seen as `view`) and `tensors` for backward.

    With need_values, the backward reads A's values, and never edited ones: the
    values arrays of a sparse tensor are aliases that do not share a version
    counter with the tensor the user built A from, so that tensor (the guard) is
    saved too and an in-place edit of it raises autograd's "modified by an
    inplace operation" error; where it cannot be found, the backward gets a
    private copy of the values.  A itself is kept for second derivatives."""
    if A.requires_grad and A.layout == torch.sparse_csr and A.dim() == 3:
        _accumulate_batched_csr_grads(A)
    values = None
    guard = None
    if need_values:
        values = view.values
        guard = _values_guard(A)
        if guard is None and _shares_storage(values, A):
            values = values.clone()
    save_view(ctx, view._replace(values=values), guard, A, *tensors)


def load_operand(ctx):
    """(view, A, tensors) as save_operand saved them; view.values is None unless
    the operand was saved with need_values."""
    view, (_, A, *tensors) = load_view(ctx)
    return view, A, tensors


def _accumulate_batched_csr_grads(A: torch.Tensor) -> None:
    """Make gradients of a batched CSR A accumulate correctly.

    PyTorch cannot add two batched CSR tensors (its sum is malformed or fails
    inside MKL), and autograd adds them when a leaf's .grad is already set or
    when A is used twice in one graph.  A hook on A (installed once) adds the
    values itself when the gradient reaches a leaf that already has one on the
    same pattern, and turns a malformed sum into a clear error."""
    if getattr(A, "_tsgu_batched_grad_hook", False):
        return
    ref, nnz = weakref.ref(A), A.col_indices().shape

    def hook(grad):
        if grad.layout != torch.sparse_csr or grad.col_indices().shape != nnz or grad.values().shape != nnz:
            raise RuntimeError(
                "cannot sum the gradients of a batched CSR tensor used more than once in one graph: "
                "PyTorch's addition of batched CSR tensors is broken; use the tensor once per graph, "
                "or a COO tensor with three sparse dimensions")
        A = ref()
        old = A.grad if A is not None and A.grad_fn is None else None
        if old is None:
            return grad
        if not (old.layout == torch.sparse_csr and torch.equal(old.crow_indices(), grad.crow_indices())
                and torch.equal(old.col_indices(), grad.col_indices())):
            raise RuntimeError("cannot accumulate into A.grad: it does not hold a batched CSR tensor on A's "
                               "pattern (set A.grad = None before backward)")
        A.grad = None            # autograd then stores the sum instead of adding to it
        return torch.sparse_csr_tensor(grad.crow_indices(), grad.col_indices(), old.values() + grad.values(),
                                       grad.shape)

    A.register_hook(hook)
    A._tsgu_batched_grad_hook = True


def _values_guard(A: torch.Tensor) -> Optional[torch.Tensor]:
    """The tensor whose version counter moves when A's values are edited in place:
    the values given to our sparse_csr_tensor, or the leaf values given to torch's
    constructors; None when unknown."""
    values = getattr(A, "_tsgu_values", None)           # set by sparse_csr_tensor
    if values is not None:
        return values
    if A.grad_fn is None:
        return None
    name = type(A.grad_fn).__name__
    if name.startswith(("SparseCooTensorWithDimsAndTensorsBackward", "SparseCompressedTensorBackward")):
        for fn, _ in A.grad_fn.next_functions:
            leaf = getattr(fn, "variable", None)        # AccumulateGrad of a leaf values tensor
            if leaf is not None:
                return leaf
    return None


def _shares_storage(values: torch.Tensor, A: torch.Tensor) -> bool:
    """Does values alias A's own values array (rather than a private coalesced copy)?"""
    own = A._values() if A.layout == torch.sparse_coo else A.values()
    return values.numel() > 0 and values.untyped_storage().data_ptr() == own.untyped_storage().data_ptr()
