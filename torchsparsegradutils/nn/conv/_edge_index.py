"""What the graph convolutions share about their adjacency: the check of an
``edge_index`` (2, E) and of a ``flow``, the node count PyG infers from one, the cache
of the adjacency each layer builds from one (kept while an ``edge_index`` of the same
contents comes back, for the same key), and the product of the adjacency with node
features of any leading batch shape."""
from typing import Optional

import torch

from ..._core.sparse_csr import SparseCSR
from ..._core.structures import coo_structure
from ..._core.view import entry_rows
from ...sparse_matmul import sparse_mm

FLOWS = ("source_to_target", "target_to_source")


def check_flow(flow) -> None:
    if flow not in FLOWS:
        raise ValueError(f"flow must be 'source_to_target' or 'target_to_source', got {flow!r}")


def node_count(edge_index: torch.Tensor, num_nodes: Optional[int]) -> int:
    """num_nodes, or (as PyG's maybe_num_nodes) the largest node id + 1 (0 for no edge)."""
    if num_nodes is None:
        return int(edge_index.max()) + 1 if edge_index.numel() else 0
    if num_nodes < 0:
        raise ValueError(f"num_nodes must be non-negative, got {num_nodes}")
    return int(num_nodes)


def propagate(A, h: torch.Tensor) -> torch.Tensor:
    """A @ h for h (n, F), or for every item of a batch (..., n, F) over one graph (PyG's
    static graphs): one sparse_mm of A with the items side by side, (n, batch * F)."""
    if h.dim() == 2:
        return sparse_mm(A, h)
    n, F = h.shape[-2], h.shape[-1]
    lead = h.shape[:-2]
    out = sparse_mm(A, h.movedim(-2, 0).reshape(n, -1))
    return out.view(n, *lead, F).movedim(0, -2)


def check_edge_index(edge_index) -> None:
    if not isinstance(edge_index, torch.Tensor) or edge_index.dim() != 2 or edge_index.shape[0] != 2:
        got = tuple(edge_index.shape) if isinstance(edge_index, torch.Tensor) else type(edge_index).__name__
        raise ValueError(f"edge_index must have shape (2, E), got {got}")
    if edge_index.dtype.is_floating_point or edge_index.dtype.is_complex or edge_index.dtype == torch.bool:
        raise TypeError(f"edge_index must hold integer node ids, got {edge_index.dtype}")


def same_contents(a: torch.Tensor, b) -> bool:
    """Is b a tensor equal to a: same shape, dtype, device and values?"""
    return isinstance(b, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype and a.device == b.device \
        and torch.equal(a, b)


def cached(layer: torch.nn.Module, key, edge_index: torch.Tensor, build):
    """build(), kept in layer._cache as (key, a copy of edge_index, build()) and handed
    back while the key is the same and an edge_index of the same contents comes back
    (compared in full, O(E): an edit PyTorch's version counter misses, through
    ``.numpy()`` or ``.data``, is seen)."""
    cache = layer._cache
    if cache is None or cache[0] != key or not same_contents(cache[1], edge_index):
        layer._cache = cache = (key, edge_index.clone(), build())
    return cache[2]


def moved(S: SparseCSR, device: torch.device) -> SparseCSR:
    """S with its index and values tensors on device (S itself where they are)."""
    return S if S.crow_indices.device == device else SparseCSR(*(t.to(device) for t in S[:3]), S.size)


def is_sparse_adjacency(a) -> bool:
    """Is a a sparse adjacency: a SparseCSR or a torch sparse COO, CSR or CSC matrix?"""
    return isinstance(a, SparseCSR) or (isinstance(a, torch.Tensor) and a.layout in (
        torch.sparse_coo, torch.sparse_csr, torch.sparse_csc))


def sparse_entries(adj):
    """(rows, cols, values) of a SparseCSR or a torch sparse COO / CSR / CSC matrix (2-D,
    no dense dimensions, ValueError otherwise), int64 indices in range (checked: ValueError),
    the values differentiable."""
    if adj.dim() != 2 or adj.dense_dim() != 0:
        raise ValueError(f"a sparse adjacency must be 2-D with no dense dimensions, got shape {tuple(adj.shape)}")
    if isinstance(adj, SparseCSR):
        return entry_rows(adj.crow_indices), adj.col_indices.long(), adj.values
    if adj.layout == torch.sparse_coo:
        if not adj.is_coalesced():
            coo_structure(adj._indices().long(), tuple(adj.shape))   # ValueError: an index out of range
            adj = adj.coalesce()
        rows, cols = adj.indices()
        return rows, cols, adj.values()
    if adj.layout == torch.sparse_csr:
        return entry_rows(adj.crow_indices()), adj.col_indices().long(), adj.values()
    return adj.row_indices().long(), entry_rows(adj.ccol_indices()), adj.values()


def as_sparse_csr(adj) -> SparseCSR:
    """A sparse adjacency (see sparse_entries) as a SparseCSR, differentiable in its values."""
    if isinstance(adj, SparseCSR):
        return adj
    rows, cols, vals = sparse_entries(adj)
    s = coo_structure(torch.stack([rows, cols]), tuple(adj.shape))
    return SparseCSR(s.ptr, s.indices[-1], s.values_of(vals), tuple(adj.shape))
