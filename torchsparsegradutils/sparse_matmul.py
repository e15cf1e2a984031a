"""sparse_mm: sparse A times dense or sparse B, with gradients that stay sparse."""
import torch

from . import _backends
from ._core.intake import as_csr, on_rows
from ._core.saved import load_operand, load_operands, save_operand, save_operands
from ._core.sparse_csr import SparseCSR
from ._core.torch_sparse import coo_tensor, csr_tensor
from ._core.undefined_grad import none_for_undefined
from ._core.validate import (check_mm, check_reduce, check_sparse_operands, eager_only, error, records_graph,
                             refuse_create_graph)
from ._core.view import CSRView, coo_from_values, csr_from_values, view_of
from ._ops.arg import sddmm_arg, spmm_arg, spmm_t_arg
from ._ops.products import sddmm, spmm, spmm_t
from ._ops.spgemm import spgemm


def sparse_mm(A, B, reduce: str = "sum"):
    r"""Sparse @ dense or sparse @ sparse, ``C = A @ B``, whose gradients w.r.t. the
    sparse operands are sparse.

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
    B : dense (strided) tensor, shape ``(m, p)`` or ``(b, m, p)``, A's dtype and device;
        or sparse like ``A`` (COO, CSR or ``SparseCSR``; see "Sparse B" below).
    reduce : ``"sum"`` (the product), ``"mean"``, ``"amax"`` or ``"amin"`` (or ``"max"`` and
        ``"min"``, which torch.sparse.mm takes for them too)
        How the products ``A[i,j] * B[j,:]`` of row ``i``'s stored entries are
        combined, as in ``torch.sparse.mm``: ``"mean"`` divides the sum by the
        row's number of stored entries (of a COO ``A``, once coalesced);
        ``"amax"`` / ``"amin"`` take, per output element, the largest / smallest
        product (the first entry of a tie; a NaN product wins, the last NaN of a
        row).  A row without entries gives 0.  Every ``A`` above, 2D and batched,
        every dtype (PyTorch has it for 2D CSR on the CPU only).

    Returns
    -------
    Dense tensor of shape ``(n, p)`` or ``(b, n, p)``; with a sparse B, a sparse one
    (see below).

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

    Sparse B
    --------
    ``C = A @ B`` is sparse, on the structural product pattern (an entry wherever a
    stored ``A[i,j]`` meets a stored ``B[j,c]``, kept where the sum cancels, as in
    ``torch.sparse.mm``), with its columns sorted in each row.  Its layout is A's:
    COO gives a coalesced COO tensor, CSR a CSR tensor (a batch of CSR tensors
    needs one entry count per item, as PyTorch's batched CSR does; else
    ``ValueError``: take COO with three sparse dimensions), and a ``SparseCSR`` on
    either side gives a ``SparseCSR``.  Forward is a row-by-row (Gustavson) product
    in C, a pass that sizes the rows and one that fills them.  Backward computes
    only the operands' stored entries, ``grad_A[i,j] = sum_c G[i,c] B[j,c]`` and
    ``grad_B[j,c] = sum_i A[i,j] G[i,c]``, from a sparse ``G`` (any pattern) or a
    dense one (after ``C.to_dense()``): never the full ``G @ B^T`` or ``A^T @ G``,
    and no memory beyond the gradients but O(nnz(A) + nnz(B)).  ``reduce`` must be
    ``"sum"``; there is no second derivative (a backward with ``create_graph=True``
    raises ``RuntimeError``).

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
        ``reduce`` not one of the four above, or other than ``"sum"`` with a sparse B;
        a batched CSR product whose items hold different numbers of entries.
    TypeError
        Values of a dtype other than float16/bfloat16/float32/float64, or A and B of
        different dtypes.
    """
    if reduce != "sum":
        reduce = check_reduce(reduce, B)
    elif not isinstance(B, torch.Tensor) or B.layout is not torch.strided:
        if isinstance(B, SparseCSR) or (isinstance(B, torch.Tensor) and B.layout is not torch.strided):
            return _sparse_sparse_mm(A, B)
    if not isinstance(A, SparseCSR):
        return _sparse_mm_torch(A, B, reduce)
    shape = check_mm(A, B)
    values = A.values
    if torch.compiler.is_compiling() or records_graph(values, B):
        if reduce in ("sum", "mean"):
            return spmm(A.view(), values, B, mean=reduce == "mean")
        return spmm_arg(A.view(), values, B, reduce == "amin")[0]
    if reduce == "sum":     # what the custom operator runs, without its dispatch (nothing to trace or record)
        return _backends.spmm_arrays(A.crow_indices, A.col_indices, values, shape, B)
    return _reduce(view_of(A.crow_indices, A.col_indices, values, None, shape), B, reduce)


@eager_only
def _sparse_mm_torch(A: torch.Tensor, B: torch.Tensor, reduce: str) -> torch.Tensor:
    shape = check_mm(A, B)
    if records_graph(A, B):
        return SparseMatMul.apply(A, B, reduce)
    # what the Function's forward does, without its view where the route allows
    if reduce == "sum":
        return _backends.spmm_tensor(A, B, shape)
    return _reduce(as_csr(A, compress_rows=True), B, reduce)


def _reduce(view: CSRView, B: torch.Tensor, reduce: str) -> torch.Tensor:
    """A @ B with reduce "mean", "amax" or "amin", where no graph is recorded (amax and
    amin keep no arg)."""
    if reduce == "mean":
        return _backends.spmm(view, B, mean=True)
    return _backends.spmm_arg(view, B, reduce == "amin", need_arg=False)[0]


class SparseMatMul(torch.autograd.Function):
    """The autograd Function behind :func:`sparse_mm` (validate with sparse_mm first):
    A @ B with reduce "sum" (the default), "mean", "amax" or "amin"."""

    @staticmethod
    def forward(ctx, A, B, reduce="sum"):
        ctx.set_materialize_grads(False)     # an undefined gradient reaches backward as None
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
    @none_for_undefined
    def backward(ctx, G):
        view, A, (B, arg) = load_operand(ctx)
        need_A, need_B = ctx.needs_input_grad[:2]
        grad_A = grad_B = None
        if torch.is_grad_enabled():  # create_graph=True: record a graph of the same sparse kernels
            values = _values_of(A, view.values) if need_B else None
            if arg is not None:
                grad_A = view.grad_like(sddmm_arg(view, arg, G, B)) if need_A else None
                grad_B = spmm_t_arg(view, values, arg, G) if need_B else None
            else:
                grad_A = view.grad_like(sddmm(view, G, B, ctx.mean)) if need_A else None
                grad_B = spmm_t(view, values, G, ctx.mean) if need_B else None
        elif arg is not None:
            grad_A = view.grad_like(_backends.sddmm_arg(view, arg, G, B)) if need_A else None
            grad_B = _backends.spmm_t_arg(view, arg, G) if need_B else None
        else:
            grad_A = view.grad_like(_backends.sddmm(view, G, B, ctx.mean)) if need_A else None
            grad_B = _backends.spmm_t(view, G, ctx.mean) if need_B else None
        return grad_A, grad_B, None


# ---------------------------------------------------------------- sparse @ sparse
def _sparse_sparse_mm(A, B):
    """sparse_mm with a sparse B: two torch sparse tensors through SparseSparseMatMul
    (eager); a SparseCSR on either side through the custom op (what compile traces),
    the other operand taken as its components."""
    a_shape, b_shape = check_sparse_operands(A, B, "sparse_mm")
    shape = torch.Size([*a_shape[:-1], b_shape[-1]])
    if isinstance(A, SparseCSR) or isinstance(B, SparseCSR):
        (a, a_values), (b, b_values) = _components(A), _components(B)
        ptr, col, values = spgemm(a, a_values, b, b_values)
        return _product(SparseCSR, ptr, col, values, shape)
    return _sparse_sparse_torch(A, B, shape)


def _components(X):
    """(CSRView, values) of a sparse operand, the values differentiable w.r.t. it."""
    if isinstance(X, SparseCSR):
        return X.view(), X.values
    return _tensor_components(X)


@eager_only
def _tensor_components(X: torch.Tensor):
    view = as_csr(X)
    return view, _values_of(X, view.values)


@eager_only
def _sparse_sparse_torch(A: torch.Tensor, B: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    if records_graph(A, B):
        return SparseSparseMatMul.apply(A, B)
    coo = A.layout == torch.sparse_coo
    return _product(A.layout, *_backends.spgemm(as_csr(A, compress_rows=True), as_csr(B), coo), shape)


def _product(layout, ptr: torch.Tensor, index: torch.Tensor, values: torch.Tensor, shape: torch.Size):
    """The product C from its pattern (global row pointers, and the columns, or for a COO
    layout the COO index array: see _backends.spgemm) and values, in `layout`
    (torch.sparse_coo, torch.sparse_csr, or SparseCSR); differentiable in values where
    they carry a graph."""
    if layout is SparseCSR:
        return SparseCSR(ptr, index, values, tuple(shape))
    learns = values.requires_grad
    if layout == torch.sparse_coo:
        return (coo_from_values if learns else coo_tensor)(index, values, shape, is_coalesced=True)
    if len(shape) == 3:                            # PyTorch's batched CSR: one entry count per item
        b, n = shape[0], shape[1]
        starts = ptr[0:b * n + 1:n] if n else ptr.new_zeros(b + 1)
        counts = starts.diff()
        if b and not bool((counts == counts[0]).all()):
            raise error(ValueError, "the batch items of A @ B hold different numbers of entries, which PyTorch's "
                        "batched CSR cannot hold: take A as COO with three sparse dimensions, or a SparseCSR",
                        f"entries per item: {counts.tolist()}")
        per = int(counts[0]) if b else 0
        ptr = torch.cat([ptr[:-1].reshape(b, n), ptr[n:b * n + 1:n].reshape(b, 1)], 1) - starts[:-1, None] \
            if n else ptr.new_zeros(b, 1)
        index, values = index.reshape(b, per), values.reshape(b, per)
    return (csr_from_values if learns else csr_tensor)(ptr, index, values, shape)


class SparseSparseMatMul(torch.autograd.Function):
    """The autograd Function behind :func:`sparse_mm` with two torch sparse tensors
    (validate with sparse_mm first): C = A @ B, sparse, in A's layout."""

    @staticmethod
    def forward(ctx, A, B):
        ctx.set_materialize_grads(False)     # an undefined gradient reaches backward as None
        a, b = as_csr(A, compress_rows=True), as_csr(B)     # a hypersparse COO A: its kept rows
        ptr, index, values = _backends.spgemm(a, b, A.layout == torch.sparse_coo)
        # the gradients read both operands' values (one walk over the products gives both)
        save_operands(ctx, [(A, a, True), (B, b, True)])
        return _product(A.layout, ptr, index, values, torch.Size([*A.shape[:-1], B.shape[-1]]))

    @staticmethod
    @none_for_undefined
    def backward(ctx, G):
        refuse_create_graph("sparse_mm with a sparse B", sparse_csr_twice=False)
        ((a, _), (b, _)), _ = load_operands(ctx)
        need_A, need_B = ctx.needs_input_grad
        g = G                                                    # a sparse G: any pattern, checked
        if G.layout != torch.strided:
            g = as_csr(G) if a.rows is None else on_rows(G, a)
        ga, gb = _backends.spgemm_grad(a, b, g, need_A, need_B)
        return (a.grad_like(ga) if need_A else None), (b.grad_like(gb) if need_B else None)


def _values_of(A: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """A's values in the view's order (the saved `values`), differentiable w.r.t. A
    when A carries a graph."""
    if not A.requires_grad:
        return values
    if A.layout == torch.sparse_coo:
        return A.coalesce().values()
    return A.values()
