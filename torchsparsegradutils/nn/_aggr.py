"""The aggregations of the graph layers by name (``aggregate``), their combination as PyG's
``MultiAggregation`` has it (``AggrCombine``), and the max aggregation (PyG's ``MaxAggregation``): the forward is
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
from typing import List, Optional

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


# ---------------------------------------------------------------- aggregations by name, and their combination
#: the aggregations a layer runs on the sparse kernels, by PyG's name: the sparse_mm reduce of each on a torch
#: sparse adjacency (on an edge_index's adjacency, "mean" is a "sum" over weights 1 / degree)
AGGR_REDUCES = {"sum": "sum", "add": "sum", "mean": "mean", "max": "amax", "min": "amin"}
#: PyG MultiAggregation's combine modes that are supported
COMBINE_MODES = ("cat", "proj", "sum", "mean", "max", "min")


def aggregate(A, x: Tensor, reduce: str, messages: Optional[Tensor] = None) -> Tensor:
    """``sparse_mm(A, x, reduce)``, with PyG's tie gradient for ``"amax"`` and ``"amin"``
    (:func:`max_aggregation`; the min as ``-max(A, -x)``, PyG's rule being symmetric)."""
    if reduce == "amax":
        return max_aggregation(A, x, messages)
    if reduce == "amin":
        return -max_aggregation(A, -x, messages)
    return sparse_mm(A, x, reduce)


class AggrCombine(torch.nn.Module):
    """The combination of several aggregations' outputs (each ``(n, F)``), as PyG's
    ``MultiAggregation(aggrs, mode=mode, mode_kwargs=mode_kwargs)`` has it: ``"cat"``
    concatenates the features, ``"sum"`` / ``"mean"`` / ``"max"`` / ``"min"`` reduce
    element-wise over the aggregations (``torch.sum`` etc. over their stack), ``"proj"``
    applies ``lin``, a :class:`torch.nn.Linear` (``mode_kwargs``: ``in_channels``, an int
    for each aggregation or one for all, ``out_channels``, and Linear's ``bias``) to the
    concatenation.  The parameter is ``lin`` as in PyG, so that a layer holding this as
    its ``aggr_module`` has PyG's state_dict keys.  One aggregation is passed through."""

    def __init__(self, num_aggrs: int, mode: str = "cat", mode_kwargs: Optional[dict] = None):
        super().__init__()
        if mode not in COMBINE_MODES:
            raise ValueError(f"the combine mode of several aggregations must be one of {', '.join(COMBINE_MODES)}; "
                             f"got {mode!r} (PyG's 'attn', 'logsumexp', 'std' and 'var' are not supported)")
        kwargs = dict(mode_kwargs or {})
        self.mode, self.num_aggrs, self.lin = mode, num_aggrs, None
        if mode == "proj":
            if num_aggrs == 1:
                raise ValueError("combine mode 'proj' needs several aggregations")
            in_channels, out_channels = kwargs.pop("in_channels", None), kwargs.pop("out_channels", None)
            if in_channels is None or out_channels is None:
                raise ValueError("combine mode 'proj' needs mode_kwargs in_channels and out_channels")
            if isinstance(in_channels, int):
                in_channels = [in_channels] * num_aggrs
            unknown = set(kwargs) - {"bias", "device", "dtype"}
            if unknown:
                raise ValueError(f"mode_kwargs {sorted(unknown)} are not supported for combine mode 'proj'")
            self.lin = torch.nn.Linear(sum(in_channels), out_channels, **kwargs)
        elif kwargs:
            raise ValueError(f"combine mode {mode!r} takes no mode_kwargs, got {sorted(kwargs)}")

    def reset_parameters(self) -> None:
        if self.lin is not None:
            self.lin.reset_parameters()

    def out_channels(self, in_channels: int) -> int:
        """The width of the combination of aggregations of in_channels-wide features."""
        if self.lin is not None:
            return self.lin.out_features
        return in_channels * self.num_aggrs if self.mode == "cat" else in_channels

    def forward(self, outs: List[Tensor]) -> Tensor:
        if len(outs) == 1:
            return outs[0]
        if self.mode in ("cat", "proj"):
            h = torch.cat(outs, dim=-1)
            return h if self.lin is None else self.lin(h)
        stacked = torch.stack(outs, dim=0)
        if self.mode in ("max", "min"):
            return getattr(torch, self.mode)(stacked, dim=0).values
        return getattr(torch, self.mode)(stacked, dim=0)

    def extra_repr(self) -> str:
        return f"mode={self.mode}"
