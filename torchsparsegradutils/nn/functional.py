"""Functions of node features that may be sparse: ``dropout`` (as
:func:`torch.nn.functional.dropout` on a dense ``x``; on a sparse one, of its stored values)."""
import torch
import torch.nn.functional as F

from .._core.sparse_csr import SparseCSR
from ..sparse_tensor import sparse_coo_tensor, sparse_csr_tensor
from ._features import is_sparse

__all__ = ["dropout"]


def dropout(x, p: float = 0.5, training: bool = True):
    r"""Dropout of node features ``x`` that may be sparse: :func:`torch.nn.functional.dropout`
    on a dense ``x``; on a sparse one (:class:`~torchsparsegradutils.SparseCSR`, torch COO
    or CSR) each stored entry is zeroed with probability ``p`` and the others scaled by
    ``1 / (1 - p)``, which is what dense dropout does to the matrix (its zeros stay zero),
    in O(nnz) and without densifying.  The result has ``x``'s layout and index tensors
    (a COO ``x`` is coalesced first), differentiable in its values.

    >>> from torchsparsegradutils import SparseCSR
    >>> x = SparseCSR.from_torch(torch.eye(3).to_sparse_csr())
    >>> dropout(x, 0.5, training=False) is x
    True
    >>> dropout(x, 0.0).values
    tensor([1., 1., 1.])
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability must be in [0, 1], got {p}")
    if not is_sparse(x):
        return F.dropout(x, p, training)
    if not training:
        return x
    if isinstance(x, SparseCSR):
        return x._replace(values=F.dropout(x.values, p))
    if x.layout == torch.sparse_csr:
        return sparse_csr_tensor(x.crow_indices(), x.col_indices(), F.dropout(x.values(), p), x.shape)
    x = x.coalesce()
    return sparse_coo_tensor(x.indices(), F.dropout(x.values(), p), x.shape, is_coalesced=True)
