"""sparse_mm: sparse A times dense or sparse B, with gradients that stay sparse."""
import torch  # noqa: F401  (the examples' name)

from ._core.validate import MM_DTYPES, ProductSpec
from ._ops.products import SparseMatMul, run_mm  # noqa: F401  (SparseMatMul: the published name)

SPEC = ProductSpec("sparse_mm", MM_DTYPES)


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
        A dense ``A`` is taken as ``torch.sparse.mm`` takes it (see "Dense A" below).
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
    either side gives a ``SparseCSR``.  Its row pointers and columns are int32 where both
    operands' indices are (a smaller output, faster to write), else int64 (a COO
    product's indices are int64, as PyTorch's).  Forward is a row-by-row (Gustavson) product
    in C, a pass that sizes the rows and one that fills them.  Backward computes
    only the operands' stored entries, ``grad_A[i,j] = sum_c G[i,c] B[j,c]`` and
    ``grad_B[j,c] = sum_i A[i,j] G[i,c]``, from a sparse ``G`` (any pattern) or a
    dense one (after ``C.to_dense()``): never the full ``G @ B^T`` or ``A^T @ G``,
    and no memory beyond the gradients but O(nnz(A) + nnz(B)).  ``reduce`` must be
    ``"sum"``; there is no second derivative (a backward with ``create_graph=True``
    raises ``RuntimeError``).

    Dense A
    -------
    As ``torch.sparse.mm`` does, a dense (strided) ``A`` gives the dense ``A @ B``: with a
    dense ``B`` ``torch.matmul(A, B)``; with a sparse ``B`` (COO, CSR or ``SparseCSR``, 2D
    or batched) ``(B^T A^T)^T`` on B's pattern, so that ``grad_B`` is sparse, ``A^T G``
    at B's stored entries in B's layout (``grad_A = G B^T``, dense).  ``reduce`` must be
    ``"sum"``.  A CSC ``A`` is refused, as the published release refuses it.

    Under ``torch.compile`` a ``SparseCSR`` operand is traced (the kernels are
    custom operators); a torch sparse tensor breaks the graph there and runs eagerly.

    >>> A = torch.tensor([[1.0, 0.0], [2.0, 3.0]]).to_sparse_csr().requires_grad_()
    >>> sparse_mm(A, torch.ones(2, 2)).sum().backward()
    >>> A.grad.values()
    tensor([2., 2., 2.])

    Raises
    ------
    ValueError
        A or B not a tensor; ranks < 2 or not both 2D / both 3D; A not COO, CSR or
        dense (strided), or B of another layout than those; batch or inner dimensions that differ; different
        devices; malformed sparse structure (indices out of range, row pointers
        decreasing or not ending at nnz, unsorted or repeated columns in a CSR row);
        ``reduce`` not one of the four above, or other than ``"sum"`` with a sparse B
        or a dense A;
        a batched CSR product whose items hold different numbers of entries.
    TypeError
        Values of a dtype other than float16/bfloat16/float32/float64, or A and B of
        different dtypes.
    """
    return run_mm(SPEC, A, B, reduce)
