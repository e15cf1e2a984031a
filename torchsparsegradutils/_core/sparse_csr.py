"""SparseCSR: the compile-friendly sparse operand, a plain tuple of dense tensors."""
from typing import NamedTuple

import torch

from .intake import as_csr, check_structure
from .view import CSRView, entry_rows


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

    def view(self) -> CSRView:
        """The CSRView of these components (values as given, not detached)."""
        shape = self.shape
        return CSRView(self.crow_indices, self.col_indices, self.values, shape[0] if len(shape) == 3 else 1,
                       shape[-2], shape[-1], shape)
