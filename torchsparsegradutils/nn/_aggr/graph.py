"""``Graph``: one layer call's graph as its aggregations read it.

The messages go from ``n_src`` source nodes to ``n_dst`` targets, as PyG passes them:
those of an ``edge_index`` (2, E), each listed edge one message (an edge given twice is
two), in the order given; or those of a sparse ``adj_t`` (``(n_dst, n_src)``, taken in
as the SparseCSR ``pattern``), one per stored entry in row order (PyG's ``to_edge_index``
order), or, where the layer gives ``weights`` (the ``adj_t`` itself: PyG's fused
``torch.sparse`` route of a single sum, mean, max or min), weighted by its values.
What the aggregations need is built on first use and kept with the graph, which a layer
caches while its ``edge_index`` comes back:

* ``adjacency(kind)``: ``(A, reduce, messages)`` with ``sparse_mm(A, x, reduce)`` the
  sum, mean, max or min over each target's messages (repeated edges merged into one entry
  whose value counts them; for max / min ``messages`` counts them for PyG's tie gradient);
* ``pattern()``: the merged pattern and the log of each entry's count (None without
  repeated edges): the softmax over messages as graph attention over entries;
* ``messages()``: ``(src, dst)``, the message list itself;
* ``padded()``: each target's sources in message order, padded: the dense batch of
  PyG's ``to_dense_batch`` as an index into ``x`` (LSTM's input).

Under ``torch.compile`` the pattern of an ``edge_index`` comes from the custom op
``tsgu::edge_structure_padded``, whose sizes are known before it runs: it has ``rows``
(more than ``n_dst``) rows, the extra ones holding zero-weight padding entries, whose
outputs ``trim`` drops; nothing is decided by a Python ``bool`` of a tensor (no graph
break).  Eagerly ``rows`` is ``n_dst``.
"""
from typing import Optional, Tuple

import torch
from torch import Tensor

from ..._core.sparse_csr import SparseCSR
from ..._core.view import entry_rows
from ..._ops.aggr import edge_structure, edge_structure_padded, padding_rows

#: sparse_mm's reduce of each aggregation that is one product with the adjacency
REDUCES = {"sum": "sum", "mean": "mean", "max": "amax", "min": "amin"}

_NOT_SORTED = ("Can not perform aggregation since the 'index' tensor is not sorted: the messages of each target "
               "must be consecutive, in increasing target order (PyG's LSTMAggregation reads them as a sequence); "
               "sort edge_index by its second row (e.g. torch_geometric.utils.sort_edge_index(edge_index, "
               "sort_by_row=False))")


class Graph:
    """The messages ``j -> i`` of one layer call (module notes), in ``dtype`` on ``device``."""

    def __init__(self, n_src: int, n_dst: int, dtype: torch.dtype, device: torch.device,
                 edge_index: Optional[Tensor] = None, pattern: Optional[SparseCSR] = None, weights=None):
        self.n_src, self.n_dst, self.dtype, self.device = n_src, n_dst, dtype, device
        self.edge_index, self.pattern_csr, self.weights = edge_index, pattern, weights
        self._memo = {}
        self.compiled = edge_index is not None and torch.compiler.is_compiling()
        self.rows = n_dst + (padding_rows(edge_index.shape[1], n_src) if self.compiled else 0)

    def _once(self, name, build):
        if name not in self._memo:
            self._memo[name] = build()
        return self._memo[name]

    def structure(self) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        """``(ptr, rows, cols, counts)`` of the merged pattern, counts in ``dtype``."""
        def build():
            if self.edge_index is not None:
                build = edge_structure_padded if self.compiled else edge_structure
                ptr, rows, cols, counts = build(self.edge_index.to(self.device), self.n_src, self.n_dst)
                return ptr, rows, cols, counts.to(self.dtype)
            P = self.pattern_csr
            ones = torch.ones(P.col_indices.shape, dtype=self.dtype, device=self.device)
            return P.crow_indices, entry_rows(P.crow_indices), P.col_indices, ones
        return self._once("structure", build)

    def adjacency(self, kind: str):
        """``(A, reduce, messages)`` for ``kind`` "sum", "mean", "max" or "min" (module notes)."""
        return self._once(("adjacency", kind), lambda: self._adjacency(kind))

    def trim(self, out: Tensor) -> Tensor:
        """The targets' rows of a product with this graph's adjacency or pattern."""
        return out if self.rows == self.n_dst else out[:self.n_dst]

    def _adjacency(self, kind: str):
        shape = (self.rows, self.n_src)
        if self.weights is not None:          # a sparse adj_t whose values weight the messages
            return self.weights, REDUCES[kind], None
        ptr, rows, cols, counts = self.structure()
        if kind in ("max", "min"):
            ones = (counts > 0).to(self.dtype)          # 0 at padding entries: rows of zeros, no tie NaN
            return SparseCSR(ptr, cols, ones, shape), REDUCES[kind], counts
        if kind == "mean":
            deg = counts.new_zeros(self.rows).index_add(0, rows, counts).clamp(min=1)
            return SparseCSR(ptr, cols, counts / deg[rows], shape), "sum", None
        return SparseCSR(ptr, cols, counts, shape), "sum", None

    def pattern(self) -> Tuple[SparseCSR, Optional[Tensor]]:
        """The merged pattern and ``log(counts)`` (None where no edge repeats; under
        torch.compile, where that is not known, always given)."""
        def build():
            ptr, _, cols, counts = self.structure()
            P = SparseCSR(ptr, cols, counts, (self.rows, self.n_src))
            if self.edge_index is None or not self.compiled and not bool((counts > 1).any()):
                return P, None
            return P, counts.clamp(min=1).log()             # padding entries: 0
        return self._once("pattern", build)

    def messages(self) -> Tuple[Tensor, Tensor]:
        """``(src, dst)`` int64, one per message, in PyG's order (module notes)."""
        def build():
            if self.edge_index is not None:
                self.structure()                       # the ids checked
                ei = self.edge_index.to(self.device).long()
                return ei[0], ei[1]
            ptr, rows, cols, _ = self.structure()
            return cols.long(), rows
        return self._once("messages", build)

    def padded(self) -> Tensor:
        """``(n_dst, L)`` int64: row i lists the sources of i's messages in message order,
        then ``n_src`` (a zero row to append to x) up to L, the most messages of a target.
        ValueError (PyG's words) when the messages' targets are not in increasing order."""
        def build():
            src, dst = self.messages()
            if dst.numel() > 1 and not bool((dst[1:] >= dst[:-1]).all()):
                raise ValueError(_NOT_SORTED)
            deg = torch.zeros(self.n_dst, dtype=torch.int64, device=self.device).index_add_(
                0, dst, torch.ones_like(dst))
            start = torch.cumsum(deg, 0) - deg
            width = int(deg.max()) if self.n_dst else 0
            index = torch.full((self.n_dst, width), self.n_src, dtype=torch.int64, device=self.device)
            index[dst, torch.arange(dst.numel(), device=self.device) - start[dst]] = src
            return index
        return self._once("padded", build)
