"""sparse_csr_tensor / sparse_coo_tensor: build a sparse tensor from a learnable values
tensor, with a backward that stays sparse and cheap.

In PyTorch 2.x, ``torch.sparse_csr_tensor(crow, col, values)`` differentiates
into ``values`` by densifying the incoming gradient (``to_dense`` of an n x m
matrix), and ``torch.sparse_coo_tensor(indices, values)`` through a hash-based
``sparse_mask`` (at 1.6M entries it costs more than sparse_mm's whole forward and
backward).  These constructors map the gradient straight onto ``values``: when it
arrives on the same pattern (as ``sparse_mm`` returns it) that is its values
array, O(1); otherwise it is looked up at the pattern by binary search,
O(nnz log nnz) -- never an n x m matrix.
"""
import math

import torch

from ._csr import entry_rows
from ._torch_sparse import coo_tensor, csr_tensor, user_checks
from ._validate import check_no_functorch, eager_only


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
    A = _CSRFromValues.apply(crow_indices, col_indices, values, tuple(size))
    A._tsgu_values = values  # lets sparse_mm guard against in-place edits of values
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
        return None, None, _values_at_pattern(grad, crow, col), None


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
    A = _COOFromValues.apply(indices, values, tuple(size), is_coalesced)
    A._tsgu_values = values  # lets sparse_mm guard against in-place edits of values
    return A


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
        if grad.layout == torch.sparse_coo and _same_indices(grad._indices(), indices):
            return None, grad._values(), None, None
        return None, _values_at(grad, list(indices)), None, None


def _values_at_pattern(grad: torch.Tensor, crow: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
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
    where grad stores none), by binary search in grad's sorted positions."""
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
    return torch.where(hit, g._values()[at], torch.zeros((), dtype=g.dtype, device=g.device))


def _same_indices(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape:
        return False
    return (a.data_ptr() == b.data_ptr() and a.stride() == b.stride()) or torch.equal(a, b)


def _same_pattern(grad, crow, col) -> bool:
    return _same_indices(grad.crow_indices(), crow) and _same_indices(grad.col_indices(), col)
