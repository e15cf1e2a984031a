"""A torch sparse tensor (COO or CSR, 2D or batched) taken in as the CSR view the
kernels read, its structure checked first, through the structures and caches of
_core/structures.py, which spare repeating that.

`as_csr(A)` checks A's structure (in C on CPU, on the device on CUDA, O(nnz))
and returns a `CSRView` without copying A's arrays when A is CSR or a COO whose
entries are sorted and unique (flagged coalesced or not); an unsorted COO is
coalesced through a cached sort of its index array.
"""
from typing import Optional

import torch

from . import native
from .native import _C
from .structures import (_check_coo_ranges, _global_rows, check_coo_order, coo_structure, coo_view_by_torch_ops,
                         cuda_structure, unit_stride_rows)
from .view import CSRView, check_arrays, hypersparse, plain


def as_csr(A: torch.Tensor, compress_rows: bool = False) -> CSRView:
    """The CSR view of a sparse COO/CSR tensor of shape (n, m) or (b, n, m), detached
    or read where no graph is recorded (its arrays are taken through plain()).
    With compress_rows, a hypersparse COO A keeps only its non-empty rows (see
    CSRView.rows): memory O(nnz), however many rows A has."""
    if A.layout == torch.sparse_csr:
        return _from_csr(A)
    return _from_coo(A, compress_rows)


def as_csr_values(A: torch.Tensor):
    """(as_csr(A), A's values in the view's order, differentiable w.r.t. A)."""
    values = values_of(A, None) if A.requires_grad else None
    view = as_csr(A)
    return view, view.values if values is None else values


def values_of(A: torch.Tensor, values: Optional[torch.Tensor]) -> torch.Tensor:
    """A's values in the order of its view (`values`, the view's), differentiable w.r.t.
    A when A carries a graph (a COO A's through coalesce, as its view coalesces)."""
    if not A.requires_grad:
        return values
    if A.layout == torch.sparse_coo:
        return A.coalesce().values()
    return A.values()


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
    sizes = tuple(A.shape)
    batch = sizes[0] if len(sizes) == 3 else 1
    indices, val = unit_stride_rows(plain(A._indices())), plain(A._values())
    kept_rows = compress_rows and hypersparse(batch * sizes[-2], indices.shape[1])
    if kept_rows or not (A.is_cpu or (A.is_cuda and native.cuda_kernels())):
        return coo_view_by_torch_ops(A, indices, val, kept_rows)
    s = coo_structure(indices, sizes, A.is_coalesced())
    return CSRView(s.ptr, s.indices[-1], s.values_of(val).contiguous(), batch, sizes[-2], sizes[-1], A.shape,
                   s.indices)


def on_rows(G: torch.Tensor, A: CSRView) -> CSRView:
    """The view of a sparse G, (n, p) or (b, n, p) with A's rows, through the non-empty
    rows of a hypersparse view A (A.rows), as a hypersparse view is made (structures.coo_view_by_torch_ops): G's entries in those
    rows (the others dropped: a product on A's rows reads no other row of G), columns
    global (k*p + c).  G's indices are checked first; memory O(nnz(G) + len(A.rows))."""
    if G.layout != torch.sparse_coo:
        G = G.to_sparse_coo()
    sizes = tuple(G.shape)
    _check_coo_ranges(unit_stride_rows(plain(G._indices())), sizes)   # before coalesce can fold one
    if not G.is_coalesced():
        G = G.coalesce()
    indices, val = unit_stride_rows(plain(G._indices())), plain(G._values())
    rows, kept = _global_rows(indices, sizes[-2]), A.rows
    at = torch.searchsorted(kept, rows)
    hit = kept[at.clamp(max=kept.numel() - 1)] == rows if kept.numel() else torch.zeros_like(rows, dtype=torch.bool)
    at = at[hit]
    if at.numel() > 1 and bool((at[1:] < at[:-1]).any()):
        raise ValueError(native.STATUS["EIDX_ORDER"])
    ptr = torch.zeros(kept.numel() + 1, dtype=torch.int64, device=val.device)
    torch.cumsum(torch.bincount(at, minlength=kept.numel()), 0, out=ptr[1:])
    col = indices[-1] + indices[0] * sizes[-1] if len(sizes) == 3 else indices[-1]
    batch = sizes[0] if len(sizes) == 3 else 1
    return CSRView(ptr, col[hit].contiguous(), val[hit].contiguous(), 1, kept.numel(), batch * sizes[-1],
                   G.shape)


def check_coo(A: torch.Tensor) -> None:
    """A COO A's indices checked as as_csr(A) checks them, without building its view (for
    an op that reads A through its transpose, which drops the coalesced flag): every
    index in range and, where A is flagged coalesced, the entries strictly increasing
    in (row, col), as coo_row_ptr.c requires (ValueError)."""
    check_coo_order(unit_stride_rows(plain(A._indices())), tuple(A.shape), A.is_coalesced())


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
    elif ptr.is_cuda and native.cuda_kernels():
        cuda_structure(view._replace(ptr=ptr, col=col))
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
