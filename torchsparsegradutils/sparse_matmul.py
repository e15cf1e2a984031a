"""sparse_mm: sparse A times dense B, with a gradient for A that stays sparse."""
import torch

from . import _backends, _ops
from ._core.intake import as_csr
from ._core.saved import load_operand, save_operand
from ._core.sparse_csr import SparseCSR
from ._core.validate import MM_DTYPES, check_operands, check_reduce, eager_only, records_graph
from ._core.view import CSRView, view_of


def sparse_mm(A, B: torch.Tensor, reduce: str = "sum") -> torch.Tensor:
    r"""Sparse @ dense, ``C = A @ B``, whose gradient w.r.t. ``A`` is sparse.

    A drop-in for :func:`torch.sparse.mm` (``torch.sparse.mm(mat1, mat2, reduce)``)
    with the contract of the published ``torchsparsegradutils.sparse_mm``.

    Parameters
    ----------
    A : sparse COO or CSR tensor, shape ``(n, m)`` or batched ``(b, n, m)``
        (COO with three sparse dimensions, or batched CSR), float16, bfloat16,
        float32 or float64; or a :class:`~torchsparsegradutils.SparseCSR` (what
        ``torch.compile`` traces).  On CPU, 16-bit products are summed in float32
        and rounded once (to nearest, ties to even), in forward and backward alike;
        ``grad_B``'s float32 sums take a buffer of its size in float32 meanwhile.
    B : dense (strided) tensor, shape ``(m, p)`` or ``(b, m, p)``, A's dtype and device.
    reduce : ``"sum"`` (the product), ``"mean"``, ``"amax"`` or ``"amin"``
        How the products ``A[i,j] * B[j,:]`` of row ``i``'s stored entries are
        combined, as in ``torch.sparse.mm``: ``"mean"`` divides the sum by the
        row's number of stored entries (of a COO ``A``, once coalesced);
        ``"amax"`` / ``"amin"`` take, per output element, the largest / smallest
        product (the first entry of a tie; a NaN product wins, the last NaN of a
        row).  A row without entries gives 0.  Every ``A`` above, 2D and batched,
        every dtype (PyTorch has it for 2D CSR on the CPU only).

    Returns
    -------
    Dense tensor of shape ``(n, p)`` or ``(b, n, p)``.

    Gradients
    ---------
    With ``G = dL/dC``: ``grad_B = A^T @ G`` (dense) and ``grad_A`` is a sparse
    tensor in A's layout holding ``sum_k G[i,k] B[j,k]`` only at A's stored
    positions ``(i, j)``.  Neither the dense ``G @ B^T`` (n x m) nor any
    nnz x p temporary is ever built.  For an uncoalesced COO ``A`` the gradient
    is returned on the coalesced pattern (a duplicated entry is one matrix
    entry, and gets its derivative once).  For a ``SparseCSR`` the gradient
    goes to its ``values``.  With ``reduce="mean"``, row ``i`` of ``A`` is
    divided by its entry count in both.  With ``"amax"`` / ``"amin"`` each
    ``G[i,k]`` goes to the one entry ``e`` that gave ``C[i,k]`` (the arg, kept
    from forward: an int32 ``(n, p)`` array, the only temporary):
    ``grad_A[e] += G[i,k] B[j,k]`` and ``grad_B[j,k] += A[e] G[i,k]``, as
    PyTorch's CSR reduce has it.

    Under ``torch.compile`` a ``SparseCSR`` operand is traced (the kernels are
    custom operators); a torch sparse tensor breaks the graph there and runs eagerly.

    >>> A = torch.tensor([[1.0, 0.0], [2.0, 3.0]]).to_sparse_csr().requires_grad_()
    >>> sparse_mm(A, torch.ones(2, 2)).sum().backward()
    >>> A.grad.values()
    tensor([2., 2., 2.])

    Raises
    ------
    ValueError
        A or B not a tensor; ranks < 2 or not both 2D / both 3D; A not COO/CSR
        or B not strided; batch or inner dimensions that differ; different
        devices; malformed sparse structure (indices out of range, row pointers
        decreasing or not ending at nnz, unsorted or repeated columns in a CSR row);
        ``reduce`` not one of the four above, or other than ``"sum"`` with a sparse B.
    TypeError
        Values of a dtype other than float16/bfloat16/float32/float64, or A and B of
        different dtypes.
    """
    if reduce != "sum":
        return _sparse_mm_reduce(A, B, reduce)
    if not isinstance(A, SparseCSR):
        return _sparse_mm_torch(A, B)
    shape = _check(A, B)
    values = A.values
    if torch.compiler.is_compiling() or records_graph(values, B):
        return _ops.spmm(A.view(), values, B)
    # what the custom operator runs, without its dispatch (nothing to trace or record)
    return _backends.spmm_arrays(A.crow_indices, A.col_indices, values, shape, B)


@eager_only
def _sparse_mm_torch(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    shape = _check(A, B)
    if records_graph(A, B):
        return SparseMatMul.apply(A, B)
    # what the Function's forward does, without its view where the route allows
    return _backends.spmm_tensor(A, B, shape)


def _sparse_mm_reduce(A, B: torch.Tensor, reduce: str) -> torch.Tensor:
    """sparse_mm with reduce other than "sum" (the same three routes as the product)."""
    check_reduce(reduce, B)
    if not isinstance(A, SparseCSR):
        return _sparse_mm_reduce_torch(A, B, reduce)
    shape = _check(A, B)
    values = A.values
    if torch.compiler.is_compiling() or records_graph(values, B):
        if reduce == "mean":
            return _ops.spmm(A.view(), values, B, mean=True)
        return _ops.spmm_arg(A.view(), values, B, reduce == "amin")[0]
    return _reduce(view_of(A.crow_indices, A.col_indices, values, None, shape), B, reduce)


@eager_only
def _sparse_mm_reduce_torch(A: torch.Tensor, B: torch.Tensor, reduce: str) -> torch.Tensor:
    _check(A, B)
    if records_graph(A, B):
        return SparseMatMul.apply(A, B, reduce)
    return _reduce(as_csr(A, compress_rows=True), B, reduce)


def _reduce(view: CSRView, B: torch.Tensor, reduce: str) -> torch.Tensor:
    """A @ B with reduce "mean", "amax" or "amin", where no graph is recorded (amax and
    amin keep no arg)."""
    if reduce == "mean":
        return _backends.spmm(view, B, mean=True)
    return _backends.spmm_arg(view, B, reduce == "amin", need_arg=False)[0]


def _check(A, B):
    """sparse_mm's contract; returns A's shape."""
    a_shape, b_shape = check_operands(A, B, "sparse_mm", MM_DTYPES)
    if a_shape[-1] != b_shape[-2]:
        raise ValueError(f"Incompatible inner dimensions: A[..., {a_shape[-1]}] vs B[..., {b_shape[-2]}]")
    return a_shape


class SparseMatMul(torch.autograd.Function):
    """The autograd Function behind :func:`sparse_mm` (validate with sparse_mm first):
    A @ B with reduce "sum" (the default), "mean", "amax" or "amin"."""

    @staticmethod
    def forward(ctx, A, B, reduce="sum"):
        view = as_csr(A, compress_rows=True)         # reads A (no graph is recorded in forward)
        arg = None
        if reduce == "sum":
            C = _backends.spmm(view, B)
        elif reduce == "mean":
            C = _backends.spmm(view, B, mean=True)
        else:
            C, arg = _backends.spmm_arg(view, B, reduce == "amin")
        ctx.mean = reduce == "mean"
        # grad_B = A^T G reads A's values; grad_A reads only the pattern (and arg)
        save_operand(ctx, A, view, ctx.needs_input_grad[1], B if ctx.needs_input_grad[0] else None, arg)
        return C

    @staticmethod
    def backward(ctx, G):
        view, A, (B, arg) = load_operand(ctx)
        need_A, need_B = ctx.needs_input_grad[:2]
        grad_A = grad_B = None
        if torch.is_grad_enabled():  # create_graph=True: record a graph of the same sparse kernels
            values = _values_of(A, view.values) if need_B else None
            if arg is not None:
                grad_A = view.grad_like(_ops.sddmm_arg(view, arg, G, B)) if need_A else None
                grad_B = _ops.spmm_t_arg(view, values, arg, G) if need_B else None
            else:
                grad_A = view.grad_like(_ops.sddmm(view, G, B, ctx.mean)) if need_A else None
                grad_B = _ops.spmm_t(view, values, G, ctx.mean) if need_B else None
        elif arg is not None:
            grad_A = view.grad_like(_backends.sddmm_arg(view, arg, G, B)) if need_A else None
            grad_B = _backends.spmm_t_arg(view, arg, G) if need_B else None
        else:
            grad_A = view.grad_like(_backends.sddmm(view, G, B, ctx.mean)) if need_A else None
            grad_B = _backends.spmm_t(view, G, ctx.mean) if need_B else None
        return grad_A, grad_B, None


def _values_of(A: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """A's values in the view's order (the saved `values`), differentiable w.r.t. A
    when A carries a graph."""
    if not A.requires_grad:
        return values
    if A.layout == torch.sparse_coo:
        return A.coalesce().values()
    return A.values()
