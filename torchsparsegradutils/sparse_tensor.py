"""sparse_csr_tensor / sparse_coo_tensor: build a sparse tensor from a learnable values
tensor, with a backward that stays sparse and cheap.

In PyTorch 2.x, ``torch.sparse_csr_tensor(crow, col, values)`` differentiates
into ``values`` by densifying the incoming gradient (``to_dense`` of an n x m
matrix), and ``torch.sparse_coo_tensor(indices, values)`` through a hash-based
``sparse_mask`` (at 1.6M entries it costs more than sparse_mm's whole forward and
backward).  These constructors map the gradient straight onto ``values``: when it
arrives on the same pattern (as ``sparse_mm`` returns it) that is its values
array, O(1); otherwise it is looked up at the pattern by binary search,
O(nnz log nnz) -- never an n x m matrix (see _core/view.py).  Both backwards are
differentiable again (create_graph=True: second derivatives into ``values``); a
gradient that carries a graph is looked up by the differentiable binary search.
"""
import torch  # noqa: F401  (the examples below use it)

from ._core.torch_sparse import coo_tensor, csr_tensor, user_checks
from ._core.validate import check_no_functorch, eager_only
from ._core.view import coo_from_values, csr_from_values


@eager_only
def sparse_csr_tensor(crow_indices, col_indices, values, size=None):
    """Like :func:`torch.sparse_csr_tensor`, with a backward into ``values`` that never densifies.

    ``values`` may be 1D (nnz,) or, for a batch of matrices, (b, nnz) with
    ``crow_indices`` (b, n+1) and ``col_indices`` (b, nnz).

    >>> from torchsparsegradutils import sparse_mm
    >>> w = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> A = sparse_csr_tensor(torch.tensor([0, 2, 3]), torch.tensor([0, 1, 1]), w, (2, 2))
    >>> sparse_mm(A, torch.ones(2, 1)).sum().backward()
    >>> w.grad
    tensor([1., 1., 1.])
    """
    check_no_functorch("sparse_csr_tensor")
    if size is None:
        size = csr_tensor(crow_indices, col_indices, values.detach(), check=user_checks()).shape
    return csr_from_values(crow_indices, col_indices, values, size)


@eager_only
def sparse_coo_tensor(indices, values, size=None, *, is_coalesced=None):
    """Like :func:`torch.sparse_coo_tensor`, with a backward into ``values`` that costs
    O(1) when the gradient comes back on the same pattern (as ``sparse_mm`` gives it).

    ``indices`` may hold repeated positions (the matrix entry is their sum, so each
    repeat receives that entry's gradient) and need not be sorted.

    >>> from torchsparsegradutils import sparse_mm
    >>> w = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> A = sparse_coo_tensor(torch.tensor([[0, 0, 1], [0, 1, 1]]), w, (2, 2))
    >>> sparse_mm(A, torch.tensor([[1.0], [2.0]])).sum().backward()
    >>> w.grad
    tensor([1., 2., 2.])
    """
    check_no_functorch("sparse_coo_tensor")
    if size is None:
        size = coo_tensor(indices, values.detach(), check=user_checks()).shape
    return coo_from_values(indices, values, size, is_coalesced)
