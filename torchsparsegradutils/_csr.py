"""A sparse tensor (COO or CSR, 2D or batched) seen as the CSR view the kernels take,
and the one way every autograd Function saves such an operand for its backward.

`as_csr(A)` checks A's structure (in C, O(nnz)) and returns a `CSRView`: row
pointers, column indices and values, without copying A's arrays when A is CSR
or coalesced COO.  `CSRView.grad_like(values)` builds a sparse tensor in A's
own layout holding `values` at A's stored positions: the gradient w.r.t. A.
`save_operand` / `load_operand` keep a view (and whatever else a Function
needs) across forward and backward so that in-place edits of A's values are
caught or cannot matter.
"""
import weakref
from typing import NamedTuple, Optional

import torch

from . import _C

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
    dense).  Structure is checked by the kernels as they read it.

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
        differentiable in ``values``."""
        view = self.view()
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


def entry_rows(crow: torch.Tensor) -> torch.Tensor:
    """The row of every stored entry (int64) of CSR row pointers ``(n+1,)``; for a
    batch, ``(b, n+1)`` or the stacked ``(b*n+1,)``, the global row ``k*n + i``."""
    counts = (crow[..., 1:] - crow[..., :-1]).reshape(-1)
    return torch.repeat_interleave(torch.arange(counts.numel(), device=crow.device), counts)


def plain(t: torch.Tensor) -> torch.Tensor:
    """t as the C kernels may read it: detached, and with PyTorch's lazy negation
    and conjugation applied (DLPack carries neither bit: a `.neg()` view would
    otherwise be read with the wrong sign)."""
    return t.detach().resolve_neg().resolve_conj()


def as_csr(A: torch.Tensor, compress_rows: bool = False) -> CSRView:
    """The CSR view of a detached sparse COO/CSR tensor of shape (n, m) or (b, n, m).
    With compress_rows, a hypersparse COO A keeps only its non-empty rows (see
    CSRView.rows): memory O(nnz), however many rows A has."""
    if A.layout == torch.sparse_csr:
        return _from_csr(A)
    return _from_coo(A, compress_rows)


def _from_csr(A: torch.Tensor) -> CSRView:
    if A.dense_dim() != 0:
        raise ValueError("A must not have dense dimensions (hybrid CSR tensors are not supported)")
    batched = A.dim() == 3
    n, m = A.shape[-2], A.shape[-1]
    ptr, col, val = (plain(t).contiguous() for t in (A.crow_indices(), A.col_indices(), A.values()))
    return CSRView(ptr, col, val, A.shape[0] if batched else 1, n, m, A.shape)


def _from_coo(A: torch.Tensor, compress_rows: bool) -> CSRView:
    if A.dense_dim() != 0:
        raise ValueError("A must not have dense dimensions (hybrid COO tensors are not supported)")
    sizes = tuple(A.shape)
    indices = _unit_stride_rows(plain(A._indices()))
    ranges_checked = not A.is_coalesced()
    if ranges_checked:
        # Check ranges before coalescing: coalesce would fold an out-of-range
        # index onto a valid position and hide the error.
        _check_coo_ranges(indices, sizes)
        A = A.coalesce()
        indices = _unit_stride_rows(plain(A._indices()))
    val = plain(A._values()).contiguous()
    batch = sizes[0] if len(sizes) == 3 else 1
    n, m = sizes[-2], sizes[-1]
    nnz = val.numel()
    if compress_rows and batch * n > _HYPERSPARSE_ROWS_PER_ENTRY * (nnz + 1):
        if not ranges_checked:
            _check_coo_ranges(indices, sizes)
        return _hypersparse(indices, val, sizes, A.shape)
    if A.device.type == "cpu":                # checks ranges and order as it fills ptr
        ptr = torch.empty(batch * n + 1, dtype=torch.int64)
        _C.coo_row_ptr(indices, sizes, ptr, torch.get_num_threads())
    else:
        if not ranges_checked:
            _check_coo_ranges(indices, sizes)
        ptr = torch.zeros(batch * n + 1, dtype=torch.int64, device=A.device)
        ptr[1:] = torch.bincount(_global_rows(indices, n), minlength=batch * n).cumsum(0)
    return CSRView(ptr, indices[-1], val, batch, n, m, A.shape, indices)


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
