"""``GINConv``, the graph isomorphism network layer of Xu et al. as PyTorch Geometric has it,
its sum aggregation one ``sparse_mm``."""
from typing import Optional, Tuple

import torch

from ..._core.sparse_csr import SparseCSR
from ..._core.structures import coo_structure
from .._features import is_sparse, to_dense_features
from ._edge_index import as_sparse_csr, cached, check_edge_index, is_sparse_adjacency, node_count, propagate

__all__ = ["GINConv"]


def _fixed_order_sum(v: torch.Tensor, chunk: int = 4096) -> torch.Tensor:
    """The sum of v's entries in an order that does not depend on the thread count (torch's
    sum of one output splits its input by threads): rows of ``chunk`` entries, each summed
    by one thread, then the row sums, until one small sum is left."""
    v = v.reshape(-1)
    while v.numel() > chunk:
        v = torch.nn.functional.pad(v, (0, (-v.numel()) % chunk)).view(-1, chunk).sum(1)
    return v.sum()


class _Root(torch.autograd.Function):
    """``(1 + eps) * x``, with eps's gradient ``sum(G * x)`` summed in a fixed order, so
    that it is the same bits for any thread count (differentiable again)."""

    @staticmethod
    def forward(ctx, x, eps):
        ctx.save_for_backward(x, eps)
        return x * (1 + eps)

    @staticmethod
    def backward(ctx, g):
        x, eps = ctx.saved_tensors
        gx = g * (1 + eps) if ctx.needs_input_grad[0] else None
        ge = _fixed_order_sum(g * x).reshape(eps.shape) if ctx.needs_input_grad[1] else None
        return gx, ge


def _reset(module: torch.nn.Module) -> None:
    """PyG's ``reset``: the module's reset_parameters, else its children's, in turn."""
    if hasattr(module, "reset_parameters"):
        module.reset_parameters()
    else:
        for child in module.children():
            _reset(child)


class GINConv(torch.nn.Module):
    r"""The graph isomorphism operator (Xu et al.), PyTorch Geometric's ``GINConv``:
    ``x'_i = nn((1 + eps) x_i + sum_{j -> i} x_j)``.

    Arguments, with PyG's defaults (none differs): ``nn``, the module applied to the
    aggregated features (a ``torch.nn.Sequential`` of linear layers, say); ``eps=0.0``,
    the initial ``eps``; ``train_eps=False``: with ``True`` ``eps`` is a parameter, else a
    buffer (in the ``state_dict`` either way, as PyG's, so a PyG ``GINConv``'s loads as it
    is, and back).

    ``forward(x, edge_index, size=None)``: the sum runs over the edges ``j -> i`` of an
    ``edge_index`` (2, E) (``edge_index[0]`` the sources; an edge listed twice counts
    twice, a self loop is one more term), as ``sparse_mm`` of the ``(n_target, n_source)``
    adjacency built on first use and cached while an ``edge_index`` of the same contents
    comes back (as :class:`GCNConv`'s).  The adjacency may instead be a torch sparse
    ``adj_t`` (COO, CSR or CSC, ``(n_target, n_source)``, PyG's transposed convention) or a
    :class:`SparseCSR` of that shape: its values weight the messages, as in PyG.  ``x`` is
    dense ``(n, F)`` (or ``(..., n, F)``, a batch over one static graph), a torch sparse
    tensor or a :class:`SparseCSR` (made dense: ``nn`` takes the dense sum; the
    gradient of a sparse ``x`` stays on its pattern), or a pair ``(x_source, x_target)``
    for a bipartite graph, ``x_target`` None to leave out the ``(1 + eps) x_i`` term;
    ``size`` is ``(n_source, n_target)`` (by default the rows of ``x_source`` and of
    ``x_target``, or without it the largest target id + 1).

    >>> _ = torch.manual_seed(0)
    >>> conv = GINConv(torch.nn.Linear(3, 2), train_eps=True)
    >>> conv(torch.randn(4, 3), torch.tensor([[0, 1, 2], [1, 2, 3]])).shape
    torch.Size([4, 2])
    >>> sorted(conv.state_dict())
    ['eps', 'nn.bias', 'nn.weight']
    """

    def __init__(self, nn: torch.nn.Module, eps: float = 0.0, train_eps: bool = False):
        super().__init__()
        self.nn = nn
        self.initial_eps = eps
        if train_eps:
            self.eps = torch.nn.Parameter(torch.empty(1))
        else:
            self.register_buffer("eps", torch.empty(1))
        self._cache = None            # (key, copy of edge_index, SparseCSR)
        self.eps.data.fill_(eps)

    def reset_parameters(self) -> None:
        _reset(self.nn)
        self.eps.data.fill_(self.initial_eps)
        self._cache = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(nn={self.nn})"

    def adjacency(self, edge_index: torch.Tensor, size: Tuple[int, int], dtype: torch.dtype) -> SparseCSR:
        """The ``(n_target, n_source)`` adjacency of edge_index (ones, repeats summed), cached."""
        n_src, n_dst = size
        key = (n_src, n_dst, dtype, edge_index.device)

        def build():
            check_edge_index(edge_index)
            s = coo_structure(edge_index.long().flip(0).contiguous(), (n_dst, n_src))   # ValueError: id out of range
            vals = s.values_of(torch.ones(edge_index.shape[1], dtype=dtype, device=edge_index.device))
            return SparseCSR(s.ptr, s.indices[-1], vals, (n_dst, n_src))
        return cached(self, key, edge_index, build)

    def forward(self, x, edge_index, size: Optional[Tuple[int, int]] = None) -> torch.Tensor:
        x_src, x_dst = tuple(x) if isinstance(x, (tuple, list)) and not isinstance(x, SparseCSR) else (x, x)
        x_src = to_dense_features(x_src) if is_sparse(x_src) else x_src
        if x_dst is not None and is_sparse(x_dst):
            x_dst = x_src if x_dst is x else to_dense_features(x_dst)
        if x_src.dim() < 2:
            raise ValueError(f"x must be (nodes, features) or (..., nodes, features), got shape {tuple(x_src.shape)}")
        if is_sparse_adjacency(edge_index):
            A = as_sparse_csr(edge_index)
            if size is not None and tuple(A.shape) != (size[1], size[0]):
                raise ValueError(f"the adjacency must be (n_target, n_source) = ({size[1]}, {size[0]}), "
                                 f"got {tuple(A.shape)}")
        else:
            check_edge_index(edge_index)
            n_src = size[0] if size is not None and size[0] is not None else x_src.shape[-2]
            if size is not None and size[1] is not None:
                n_dst = size[1]
            elif x_dst is not None:
                n_dst = x_dst.shape[-2]
            else:
                n_dst = node_count(edge_index[1], None)
            A = self.adjacency(edge_index, (n_src, n_dst), x_src.dtype)
        out = propagate(A, x_src)
        if x_dst is not None:
            out = out + _Root.apply(x_dst, self.eps.to(x_dst.dtype))
        return self.nn(out)
