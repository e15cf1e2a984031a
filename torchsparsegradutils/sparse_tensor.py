"""sparse_csr_tensor: build a CSR tensor from a learnable values tensor, with a backward that stays sparse.

In PyTorch 2.x, ``torch.sparse_csr_tensor(crow, col, values)`` differentiates
into ``values`` by densifying the incoming gradient (``to_dense`` of an n x m
matrix).  This constructor maps the gradient straight onto ``values``: when it
arrives on the same pattern (as ``sparse_mm`` returns it) that is a view of its
values, O(1); otherwise it is gathered at the pattern, O(nnz) -- never an
n x m matrix.  (``torch.sparse_coo_tensor`` needs no such help: its backward
already masks sparsely.)
"""
import torch

from ._csr import entry_rows
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
        size = torch.sparse_csr_tensor(crow_indices, col_indices, values.detach()).shape
    A = _CSRFromValues.apply(crow_indices, col_indices, values, tuple(size))
    A._tsgu_values = values  # lets sparse_mm guard against in-place edits of values
    return A


class _CSRFromValues(torch.autograd.Function):
    @staticmethod
    def forward(ctx, crow, col, values, size):
        ctx.save_for_backward(crow, col)
        return torch.sparse_csr_tensor(crow, col, values, size)

    @staticmethod
    def backward(ctx, grad):
        crow, col = ctx.saved_tensors
        if not ctx.needs_input_grad[2]:
            return None, None, None, None
        return None, None, _values_at_pattern(grad, crow, col), None


def _values_at_pattern(grad: torch.Tensor, crow: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
    """grad's entries at the CSR pattern (crow, col), shaped like its values."""
    if grad.layout == torch.sparse_csr and _same_pattern(grad, crow, col):
        return grad.values()
    batched = crow.dim() == 2
    n = crow.shape[-1] - 1
    rows = entry_rows(crow)
    idx = [rows // n, rows % n] if batched else [rows]
    idx.append(col.reshape(-1))
    if grad.layout == torch.strided:
        return grad[tuple(idx)].reshape(col.shape)
    # another sparse pattern: mask it with ours, entry by entry
    pattern = torch.sparse_coo_tensor(torch.stack(idx), torch.ones(rows.numel(), dtype=grad.dtype,
                                      device=grad.device), grad.shape).coalesce()
    masked = grad.to_sparse_coo().coalesce().sparse_mask(pattern)
    return masked._values().reshape(col.shape)


def _same_pattern(grad, crow, col) -> bool:
    gc, gj = grad.crow_indices(), grad.col_indices()
    if gc.data_ptr() == crow.data_ptr() and gj.data_ptr() == col.data_ptr():
        return True
    return gc.shape == crow.shape and gj.shape == col.shape and torch.equal(gc, crow) and torch.equal(gj, col)
