"""Functions of graph data: ``dropout`` of node features that may be sparse (as
:func:`torch.nn.functional.dropout` on a dense ``x``; on a sparse one, of its stored
values), and ``softmax``, PyTorch Geometric's grouped softmax of edge scores
(``torch_geometric.utils.softmax``) on the sparse softmax kernels."""
from typing import Optional

import torch
import torch.nn.functional as F

from .._core.sparse_csr import SparseCSR
from .._core.structures import coo_structure
from ..sparse_softmax import sparse_softmax
from ..sparse_tensor import sparse_coo_tensor, sparse_csr_tensor
from ._features import is_sparse

__all__ = ["dropout", "softmax"]


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


def softmax(src: torch.Tensor, index: Optional[torch.Tensor] = None, ptr: Optional[torch.Tensor] = None,
            num_nodes: Optional[int] = None, dim: int = 0) -> torch.Tensor:
    r"""PyTorch Geometric's ``softmax`` (``torch_geometric.utils.softmax``): the softmax of
    the entries of ``src`` along ``dim`` in groups, the entries ``e`` with the same
    ``index[e]`` (an edge's target node, say) one group, each position of the other
    dimensions (attention heads, say: ``src`` (E, H)) on its own.  The same arguments,
    results and gradients.

    ``index`` (E,) holds each entry's group in ``[0, num_nodes)`` (``num_nodes`` defaults
    to ``index.max() + 1``); or ``ptr`` (G + 1,), the groups as CSR row pointers over
    entries sorted by group (``index`` is then not read).  ``src`` is dense, float16,
    bfloat16, float32 or float64, of any shape with ``src.shape[dim] == E``.  The
    softmax runs on :func:`~torchsparsegradutils.sparse_softmax`'s kernels, over a
    :class:`~torchsparsegradutils.SparseCSR` whose row ``g`` holds group ``g`` (entries
    sorted by group once, with no sort when ``index`` is already sorted); the
    gradient is the softmax's own (PyG's too), and differentiable again.

    Raises ``NotImplementedError`` without ``index`` or ``ptr`` (as PyG),
    ``ValueError`` for an ``index`` not (E,) or outside ``[0, num_nodes)``, or a ``ptr``
    not from 0 to E; ``IndexError`` for a ``dim`` out of range.

    >>> src = torch.tensor([1., 1., 1., 1.])
    >>> softmax(src, torch.tensor([0, 0, 1, 2]))
    tensor([0.5000, 0.5000, 1.0000, 1.0000])
    >>> softmax(src, ptr=torch.tensor([0, 2, 3, 4]))
    tensor([0.5000, 0.5000, 1.0000, 1.0000])
    """
    if not isinstance(src, torch.Tensor) or src.layout != torch.strided:
        raise ValueError(f"softmax takes a dense src, got {type(src).__name__ if not isinstance(src, torch.Tensor) else src.layout}")
    if src.dim() == 0:
        raise ValueError("softmax takes a src with at least one dimension")
    if not -src.dim() <= dim < src.dim():
        raise IndexError(f"dim {dim} out of range for src of {src.dim()} dimensions")
    dim = dim % src.dim()
    E = src.shape[dim]
    moved = src.movedim(dim, 0)
    vals = moved if src.dim() == 1 else moved.reshape(E, -1)        # (E,) or (E, heads)
    ar = torch.arange(E, device=src.device)
    inverse = None
    if ptr is not None:
        if ptr.dim() != 1 or ptr.numel() == 0 or int(ptr[0]) != 0 or int(ptr[-1]) != E:
            raise ValueError(f"ptr must be 1-D row pointers from 0 to {E}, got {tuple(ptr.shape)}")
        S = SparseCSR(ptr.long(), ar, vals, (ptr.numel() - 1, E))
    elif index is not None:
        if index.dim() != 1 or index.shape[0] != E:
            raise ValueError(f"index must have shape ({E},), got {tuple(index.shape)}")
        N = int(index.max()) + 1 if num_nodes is None and E else (num_nodes or 0)
        s = coo_structure(torch.stack([index.long(), ar]), (N, E))     # ValueError: index out of range
        if s.order is not None:
            vals = vals.index_select(0, s.order)
            inverse = torch.empty_like(s.order).index_copy_(0, s.order, ar)
        S = SparseCSR(s.ptr, s.indices[-1], vals, (N, E))
    else:
        raise NotImplementedError("'softmax' requires 'index' to be specified")
    y = sparse_softmax(S).values
    if inverse is not None:
        y = y.index_select(0, inverse)
    return y.reshape(moved.shape).movedim(0, dim)
