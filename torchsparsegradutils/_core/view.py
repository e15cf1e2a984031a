"""A sparse operand as the kernels see it, and the sparse tensors built on its pattern.

A `CSRView` holds row pointers, column indices and values of a matrix or a batch
(see its docstring); `view_of` makes one from an op's arguments.  The tensors
given to the kernels go through `plain` (values, dense operands) and
`kernel_array` (index and values arrays); `dense_operand` prepares a dense one.

A gradient w.r.t. a sparse operand is a sparse tensor in the operand's layout on
its pattern (`CSRView.grad_like`); built from a values tensor that carries a
graph, it goes through `csr_from_values` / `coo_from_values`, the constructors
whose backward into the values never densifies (the public sparse_tensor.py
says why PyTorch's own do not serve).
"""
import math
from typing import NamedTuple, Optional

import torch

from .torch_sparse import coo_tensor, csr_tensor, user_checks

# A COO matrix with more than this many rows per stored entry is hypersparse:
# its row pointers (O(rows)) would dwarf its entries, so only its non-empty rows
# are kept (CSRView.rows).
HYPERSPARSE_ROWS_PER_ENTRY = 8


def hypersparse(rows: int, nnz: int) -> bool:
    """Is a COO matrix of `rows` rows (all items of a batch) and nnz entries hypersparse?"""
    return rows > HYPERSPARSE_ROWS_PER_ENTRY * (nnz + 1)


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
            return coo_tensor(self.coo_indices, g, self.shape, is_coalesced=True)
        if g.requires_grad:
            return csr_from_values(self.ptr, self.col, g, self.shape)
        return csr_tensor(self.ptr, self.col, g, self.shape)

    def values_at(self, G: torch.Tensor) -> torch.Tensor:
        """G's entries at A's stored positions (zero where G stores none), shaped like
        A's values: what grad_like took, for a gradient G that comes back sparse (on
        A's pattern, or another) or dense; never densifies a sparse G."""
        if self.coo_indices is not None:
            if G.layout == torch.sparse_coo and _same_indices(G._indices(), self.coo_indices):
                return G._values()
            return _values_at(G, list(self.coo_indices))
        return values_at_pattern(G, self.ptr, self.col)

    def to_torch(self) -> torch.Tensor:
        """The (detached) sparse tensor this view holds, in A's layout."""
        return self.grad_like(self.values.detach())


def view_of(ptr: torch.Tensor, col: torch.Tensor, values: Optional[torch.Tensor], rows: Optional[torch.Tensor],
            shape, heads: bool = False) -> CSRView:
    """The CSRView of a pattern given as an op's arguments (see op_args), their shapes
    checked as the public functions check them (check_arrays, heads as there; the
    indices are checked by the kernels as they read them); an op may be handed any
    strides, so the arrays go through kernel_array."""
    check_arrays(ptr, col, values, shape, rows, heads)
    ptr, col = kernel_array(ptr), kernel_array(col)
    values = None if values is None else kernel_array(values)
    shape = torch.Size(shape)
    if rows is not None:                       # one matrix of A's non-empty rows
        batch, nrows, ncols = 1, rows.shape[0], (shape[0] if len(shape) == 3 else 1) * shape[-1]
    else:
        batch, nrows, ncols = (shape[0] if len(shape) == 3 else 1), shape[-2], shape[-1]
    return CSRView(ptr, col, values, batch, nrows, ncols, shape, None, rows)


def check_arrays(ptr: torch.Tensor, col: torch.Tensor, values: Optional[torch.Tensor], shape,
                 rows: Optional[torch.Tensor] = None, heads: bool = False) -> None:
    """The shapes and index dtypes of a CSR pattern's arrays for a matrix (or batch) of
    `shape`, with a ValueError (TypeError for a dtype) naming what is wrong: shape
    is (n, m) or (b, n, m), non-negative; ptr is (b*n+1,) with col 1D, or (b, n+1)
    with col (b, nnz); for a view of a hypersparse COO's non-empty `rows` (see
    CSRView.rows), ptr is (len(rows)+1,) with col 1D; values, where given, have
    col's shape (one per stored entry), or with heads also col's shape + (H,) (H
    values per stored entry: the multi-head ops).  The indices themselves are checked by
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
    if values is not None and values.shape != cshape and not (heads and values.shape[:-1] == cshape):
        per_entry = " or that shape + (heads,)" if heads else ""
        raise ValueError(f"values must have the shape of col_indices (one value per stored entry){per_entry}; "
                         f"got {tuple(values.shape)} and {tuple(cshape)}")


def op_args(view: CSRView):
    """(ptr, col, rows, shape): the pattern of a view as an op takes it."""
    return view.ptr, view.col, view.rows, list(view.shape)


def head_copies(ptr: torch.Tensor, col: torch.Tensor, heads: int, shape) -> CSRView:
    """The pattern of a 2-D (ptr, col) as a batch of `heads` items, one copy of it each
    (values none): for the batched kernels, which take one pattern per item."""
    n, m = shape
    return CSRView(ptr.unsqueeze(0).expand(heads, -1).contiguous(), col.unsqueeze(0).expand(heads, -1).contiguous(),
                   None, heads, n, m, torch.Size((heads, n, m)))


def product_itype(A: CSRView, B: CSRView, coo: bool, nnz: int) -> torch.dtype:
    """The index dtype of the pointers and columns of A @ B (both sparse) of nnz entries:
    int32 where both operands' are (a smaller output: 8 bytes an entry less to write),
    except for a COO product (PyTorch's COO indices are int64); else int64.  ValueError
    where an int32 product would hold 2^31 entries or more."""
    if coo or A.ptr.dtype != torch.int32 or B.ptr.dtype != torch.int32:
        return torch.int64
    if nnz >= 2 ** 31:
        raise ValueError(f"A @ B has {nnz} entries, more than int32 indices can point to: give A and B "
                         "int64 indices")
    return torch.int32


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


def kernel_array(t: torch.Tensor) -> torch.Tensor:
    """An index or values array as the kernels read it (and a CSRView holds it): plain
    and contiguous, copied only if needed."""
    return plain(t).contiguous()


def dense_operand(X: torch.Tensor) -> torch.Tensor:
    """X as the kernels read a dense operand: plain, with unit-stride rows (any row
    and batch stride is fine), copied only if needed."""
    X = plain(X)
    if X.is_contiguous():        # the common case, in one call (size(-1) and stride(-1) cost 0.2 us each)
        return X
    return X if X.size(-1) <= 1 or X.stride(-1) == 1 else X.contiguous()


def item_rows(X: torch.Tensor) -> torch.Tensor:
    """X (.., rows, p) as the 2D (b*rows, p) stack of its batch items."""
    return X.reshape(X.shape[:-1].numel(), X.shape[-1])


# ------------------------------------------------ sparse tensors from values that learn
def csr_from_values(crow: torch.Tensor, col: torch.Tensor, values: torch.Tensor, size) -> torch.Tensor:
    """torch.sparse_csr_tensor(crow, col, values, size), whose backward into values
    never densifies; the result remembers `values` (see saved.values_guard)."""
    A = _CSRFromValues.apply(crow, col, values, tuple(size))
    A._tsgu_values = values
    return A


def coo_from_values(indices: torch.Tensor, values: torch.Tensor, size, is_coalesced=None) -> torch.Tensor:
    """torch.sparse_coo_tensor(indices, values, size), whose backward into values is
    O(1) when the gradient comes back on the same pattern; remembers `values`."""
    A = _COOFromValues.apply(indices, values, tuple(size), is_coalesced)
    A._tsgu_values = values
    return A


class _CSRFromValues(torch.autograd.Function):
    @staticmethod
    def forward(ctx, crow, col, values, size):
        ctx.save_for_backward(crow, col)
        return csr_tensor(crow, col, values, size, check=user_checks())

    @staticmethod
    def backward(ctx, grad):
        crow, col = ctx.saved_tensors
        if not ctx.needs_input_grad[2]:
            return None, None, None, None
        return None, None, values_at_pattern(grad, crow, col), None


class _COOFromValues(torch.autograd.Function):
    @staticmethod
    def forward(ctx, indices, values, size, is_coalesced):
        ctx.save_for_backward(indices)
        return coo_tensor(indices, values, size, is_coalesced=is_coalesced, check=user_checks())

    @staticmethod
    def backward(ctx, grad):
        indices, = ctx.saved_tensors
        if not ctx.needs_input_grad[1]:
            return None, None, None, None
        if not grad.requires_grad and grad.layout == torch.sparse_coo and _same_indices(grad._indices(), indices):
            return None, grad._values(), None, None     # O(1); _values() records no graph (create_graph)
        return None, _values_at(grad, list(indices)), None, None


def values_at_pattern(grad: torch.Tensor, crow: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
    """grad's entries at the CSR pattern (crow, col), shaped like its values."""
    if grad.layout == torch.sparse_csr and _same_pattern(grad, crow, col):
        return grad.values()
    batched = crow.dim() == 2
    n = crow.shape[-1] - 1
    rows = entry_rows(crow)
    idx = [rows // n, rows % n] if batched else [rows]
    idx.append(col.reshape(-1))
    return _values_at(grad, idx).reshape(col.shape)


def _values_at(grad: torch.Tensor, idx) -> torch.Tensor:
    """grad's entries at the positions idx (one index tensor per dimension; zero
    where grad stores none), by binary search in grad's sorted positions;
    differentiable in grad (create_graph=True)."""
    if grad.layout == torch.strided:
        return grad[tuple(idx)]
    g = grad.to_sparse_coo().coalesce()
    dims = grad.shape[:len(idx)]
    key = lambda pos: sum(p.long() * math.prod(dims[d + 1:]) for d, p in enumerate(pos))  # noqa: E731
    stored, wanted = key(g._indices()), key(idx)
    if stored.numel() == 0:
        return g._values().new_zeros(wanted.shape)
    at = torch.searchsorted(stored, wanted).clamp_(max=stored.numel() - 1)
    hit = stored[at] == wanted
    return torch.where(hit, g.values()[at], torch.zeros((), dtype=g.dtype, device=g.device))


def _same_indices(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape:
        return False
    return (a.data_ptr() == b.data_ptr() and a.stride() == b.stride()) or torch.equal(a, b)


def _same_pattern(grad, crow, col) -> bool:
    return _same_indices(grad.crow_indices(), crow) and _same_indices(grad.col_indices(), col)
