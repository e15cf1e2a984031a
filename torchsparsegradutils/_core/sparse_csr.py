"""SparseCSR: the compile-friendly sparse operand, a plain tuple of dense tensors."""
from typing import NamedTuple

import torch

from .intake import as_csr, check_structure
from .torch_sparse import coo_tensor
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
    hands it to PyTorch.  The components may be a torch sparse tensor's own
    (``A.crow_indices()``, ``A.col_indices()``, ``A.values()``): they are held as the
    same memory, without a view's tie to ``A`` that ``torch.compile`` cannot follow,
    and gradients still reach ``A``.

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
        return coo_tensor(indices, self.values, self.size, is_coalesced=True)

    def view(self) -> CSRView:
        """The CSRView of these components (values as given, not detached)."""
        shape = self.shape
        return CSRView(self.crow_indices, self.col_indices, self.values, shape[0] if len(shape) == 3 else 1,
                       shape[-2], shape[-1], shape)


def _sparse_csr_new(cls, crow_indices, col_indices, values, size):
    """SparseCSR's constructor: the components as given, except that one viewing a torch
    sparse tensor (``A.values()`` of a CSR A, ``A.indices()`` of a COO A) is held as
    the same memory but no view.  Dynamo follows a view input to its ``_base`` and
    fails there on a sparse base ("tuple index out of range": it reads strides a
    sparse tensor has not), so such components would not compile.  Traced code holds
    no sparse tensor: there the components are kept as they are.  (Components that are
    no views, the usual case, cost three attribute reads, 0.6 us.)"""
    if (getattr(values, "_base", None) is not None or getattr(col_indices, "_base", None) is not None
            or getattr(crow_indices, "_base", None) is not None) and not _is_compiling():
        crow_indices, col_indices, values = _unview(crow_indices), _unview(col_indices), _unview(values)
    return _tuple_new(cls, (crow_indices, col_indices, values, size))


def _unview(t):
    """t, or where t views a torch sparse tensor, its memory as a tensor that is no
    view (detached, or through _Unview where t carries a gradient back to its base)."""
    base = getattr(t, "_base", None)
    if base is not None and base.layout != torch.strided:
        return _Unview.apply(t) if t.requires_grad else t.detach()
    return t


class _Unview(torch.autograd.Function):
    """The identity, returning its input's memory as a tensor that is not a view of
    the input's base; the gradient passes through unchanged."""

    @staticmethod
    def forward(ctx, t):
        return t.detach()

    @staticmethod
    def backward(ctx, g):
        return g


_is_compiling = torch.compiler.is_compiling
_tuple_new = tuple.__new__
SparseCSR.__new__ = _sparse_csr_new  # (typing.NamedTuple refuses a __new__ in the class body)
SparseCSR._make = classmethod(lambda cls, iterable: cls(*iterable))  # what _replace calls
