"""The aggregations that are products with the adjacency, as PyG's of the same names:
``SumAggregation``, ``MeanAggregation``, ``MaxAggregation``, ``MinAggregation``,
``VarAggregation``, ``StdAggregation`` (the mean of ``x`` and of ``x * x``, one product)
and ``PowerMeanAggregation`` (a mean of ``x`` raised to ``p``); the base class of the
layers' aggregations, ``Aggregation``; and the max aggregation with PyG's gradient,
``max_aggregation``: the forward is ``sparse_mm(A, x, "amax")``; the gradient is PyG's,
which differs from that op's at ties.

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
import math
from typing import Optional

import torch
from torch import Tensor

from ..._core.sparse_csr import SparseCSR
from ..._ops import aggr
from ...sparse_matmul import sparse_mm
from .graph import Graph


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


def aggregate(A, x: Tensor, reduce: str, messages: Optional[Tensor] = None) -> Tensor:
    """``sparse_mm(A, x, reduce)``, with PyG's tie gradient for ``"amax"`` and ``"amin"``
    (:func:`max_aggregation`; the min as ``-max(A, -x)``, PyG's rule being symmetric)."""
    if reduce == "amax":
        return max_aggregation(A, x, messages)
    if reduce == "amin":
        return -max_aggregation(A, -x, messages)
    return sparse_mm(A, x, reduce)


def product(graph: Graph, kind: str, x: Tensor) -> Tensor:
    """The aggregation ``kind`` ("sum", "mean", "max", "min") over graph of x (n_src, C):
    one product with its adjacency, (n_dst, C)."""
    A, reduce, messages = graph.adjacency(kind)
    return graph.trim(aggregate(A, x, reduce, messages))


def by_columns(fn, x: Tensor) -> Tensor:
    """fn(x) for x (n, C); for a batch (..., n, F) over one graph (PyG's node_dim=-2),
    fn of the items side by side, (n, batch * F), once, then back to (..., n', F)."""
    if x.dim() == 2:
        return fn(x)
    n, F = x.shape[-2], x.shape[-1]
    out = fn(x.movedim(-2, 0).reshape(n, -1))
    return out.view(out.shape[0], *x.shape[:-2], F).movedim(0, -2)


class Aggregation(torch.nn.Module):
    """An aggregation of the layers: ``forward(graph, x)``, x (n_src, F) or a batch
    (..., n_src, F), gives (n_dst, F') (or (..., n_dst, F')); ``get_out_channels(F)`` is
    F'.  Those that act on each column alone define ``columns(graph, x)`` for a 2-D x and
    take a batch as one wider x."""

    def forward(self, graph: Graph, x: Tensor) -> Tensor:
        return by_columns(lambda h: self.columns(graph, h), x)

    def columns(self, graph: Graph, x: Tensor) -> Tensor:
        raise NotImplementedError

    def get_out_channels(self, in_channels: int) -> int:
        return in_channels

    def reset_parameters(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class _Reduce(Aggregation):
    """One product with the adjacency (Graph.adjacency)."""
    kind = ""

    def columns(self, graph: Graph, x: Tensor) -> Tensor:
        return product(graph, self.kind, x)


class SumAggregation(_Reduce):
    """PyG's ``SumAggregation``: the sum of each target's messages."""
    kind = "sum"


class MeanAggregation(_Reduce):
    """PyG's ``MeanAggregation``: their mean (0 for no message)."""
    kind = "mean"


class MaxAggregation(_Reduce):
    """PyG's ``MaxAggregation``: their feature-wise maximum (0 for no message), PyG's
    gradient at ties (module notes)."""
    kind = "max"


class MinAggregation(_Reduce):
    """PyG's ``MinAggregation``: their feature-wise minimum, as ``MaxAggregation``."""
    kind = "min"


class VarAggregation(Aggregation):
    """PyG's ``VarAggregation``: ``mean(x * x) - mean(x)^2`` over each target's messages,
    both means one product with the adjacency of ``[x, x * x]`` (no edges x features
    temporary).  ``semi_grad``: ``mean(x * x)`` carries no gradient (PyG's option)."""

    def __init__(self, semi_grad: bool = False):
        super().__init__()
        self.semi_grad = semi_grad

    def columns(self, graph: Graph, x: Tensor) -> Tensor:
        if self.semi_grad:
            mean = product(graph, "mean", x)
            with torch.no_grad():
                mean2 = product(graph, "mean", x * x)
        else:
            mean, mean2 = product(graph, "mean", torch.cat([x, x * x], dim=1)).split(x.shape[1], dim=1)
        return mean2 - mean * mean


class StdAggregation(VarAggregation):
    """PyG's ``StdAggregation``: ``sqrt(var)``, as PyG has it: the variance clamped below at
    1e-5 before the root, and a result at or under ``sqrt(1e-5)`` set to 0 (so a target
    with one message, or none, gives 0 and no gradient)."""

    def columns(self, graph: Graph, x: Tensor) -> Tensor:
        out = super().columns(graph, x).clamp(min=1e-5).sqrt()
        return out.masked_fill(out <= math.sqrt(1e-5), 0.0)


class PowerMeanAggregation(Aggregation):
    """PyG's ``PowerMeanAggregation``: ``mean(x^p)^(1/p)`` over each target's messages,
    ``x`` clamped to ``[clamp_min, clamp_max]`` before the power and the mean clamped
    likewise before the root (neither for ``p`` the number 1).  ``p`` the initial power,
    a parameter ``p`` of ``channels`` values (one per feature, or one for all) when
    ``learn``.  The power is taken per node, then one mean product: no edges x features
    temporary."""

    def __init__(self, p: float = 1.0, learn: bool = False, channels: int = 1, clamp_min: Optional[float] = 1e-4,
                 clamp_max: Optional[float] = 100.0):
        super().__init__()
        if not learn and channels != 1:
            raise ValueError("PowerMeanAggregation: channels other than 1 need learn=True")
        self._init_p, self.learn, self.channels = p, learn, channels
        self.min_value, self.max_value = clamp_min, clamp_max
        self.p = torch.nn.Parameter(torch.empty(channels)) if learn else p
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if isinstance(self.p, Tensor):
            with torch.no_grad():
                self.p.fill_(self._init_p)

    def forward(self, graph: Graph, x: Tensor) -> Tensor:
        if self.channels != 1 and x.dim() != 2:
            raise ValueError(f"PowerMeanAggregation with channels={self.channels} needs a 2-D x (nodes, features), "
                             f"got shape {tuple(x.shape)}")
        p = self.p if self.channels == 1 else self.p.view(-1, self.channels)
        powered = isinstance(p, Tensor) or p != 1
        if powered:
            x = x.clamp(min=self.min_value, max=self.max_value).pow(p)
        out = by_columns(lambda h: product(graph, "mean", h), x)
        return out.clamp(min=self.min_value, max=self.max_value).pow(1.0 / p) if powered else out

    def __repr__(self) -> str:
        return f"{type(self).__name__}(learn={self.learn})"
