"""The max aggregation of the graph layers (PyG's ``MaxAggregation``): the forward is
``sparse_mm(A, x, "amax")``; the gradient is PyG's, which differs from that op's at ties.

``sparse_mm``'s ``"amax"`` keeps PyTorch's ``torch.sparse.mm`` rule: all of ``G[i, k]``
goes to the first entry of row ``i`` whose product gave ``C[i, k]``.  PyG aggregates by
``torch.scatter_reduce(..., "amax", include_self=False)`` over the edges, whose
gradient splits ``G[i, k]`` evenly among every message equal to the maximum, and, where
the maximum is exactly 0, counts the 0 the scatter starts from as one more: ``k`` tied
messages get ``G[i, k] / (k + 1)`` each.  The layers give a PyG user PyG's numbers, so
their max aggregation is the custom op ``tsgu::max_aggregation`` (``_ops/aggr.py``: it
compiles with ``fullgraph=True``, and its backward, itself differentiable, never builds
an edges x features temporary).
"""
from typing import Optional

import torch
from torch import Tensor

from .._core.sparse_csr import SparseCSR
from .._ops import aggr
from ..sparse_matmul import sparse_mm


def max_aggregation(A, x: Tensor, messages: Optional[Tensor] = None) -> Tensor:
    """``out[i, k] = max over A's stored (i, j) of A[i, j] * x[j, k]`` (0 for a row with no
    entries), as ``sparse_mm(A, x, "amax")``, with PyG's gradient (module notes) to
    ``x`` and to A's values.  ``A`` a 2-D :class:`SparseCSR` or torch sparse tensor (a
    COO one coalesced first); ``messages`` (nnz,), where given, how many messages each
    stored entry stands for (an edge given twice is two ties in PyG)."""
    if not isinstance(A, SparseCSR):
        if A.requires_grad:      # keep the values' gradient: the coalesced values are A's, differentiably
            A = A.coalesce() if A.layout == torch.sparse_coo else A
            A = SparseCSR.from_torch(A)._replace(values=A.values())
        else:
            A = SparseCSR.from_torch(A)
    if A.crow_indices.dim() != 1 or x.dim() != 2:            # not a layer's case: sparse_mm's errors
        return sparse_mm(A, x, "amax")
    return aggr.max_aggregation(A, x, messages)
