"""``GATConv``, graph attention (Veličković et al.) as PyTorch Geometric has it, on
:func:`~torchsparsegradutils.graph_attention`, and ``gat_adjacency``, its attention pattern."""
import torch

from ..._core.intake import checked_view, coo_structure
from ..._core.sparse_csr import SparseCSR
from ..._core.view import entry_rows
from ...graph_attention import graph_attention
from .._features import check_features, linear
from ._edge_index import cached, check_edge_index, moved

__all__ = ["GATConv", "gat_adjacency"]


class GATConv(torch.nn.Module):
    r"""Graph attention (Veličković et al.), PyTorch Geometric's ``GATConv``: with
    ``h = x W^T`` split into ``heads`` heads of ``out_channels``,

    .. math::
        \alpha_{ij} = \mathrm{softmax}_j\,\mathrm{LeakyReLU}(a_{src} \cdot h_j + a_{dst} \cdot h_i),
        \quad x'_i = \sum_{j \in N(i)} \alpha_{ij} h_j

    per head (``j -> i`` over ``edge_index[0] -> edge_index[1]``, PyG's direction), the
    heads concatenated (``concat=True``) or averaged, plus ``bias``.  Dropout on ``alpha``
    in training.  The attention is :func:`~torchsparsegradutils.graph_attention`: fused,
    with no (edges x heads x features) tensor on the CPU.

    The parameters are PyG's: ``lin`` (:class:`torch.nn.Linear`, no bias, ``heads *
    out_channels`` outputs), ``att_src`` and ``att_dst`` ``(1, heads, out_channels)``,
    ``bias``; a PyG ``GATConv(in_channels, ...)``'s ``state_dict`` loads as it is
    (bipartite ``in_channels`` pairs, ``edge_dim``, ``fill_value`` and ``residual`` are
    not offered).

    ``forward(x, adjacency, return_attention_weights=False)`` takes an ``edge_index``
    (2, E): with ``add_self_loops`` its self loops removed and one per node added, as
    PyG does; built into a pattern on first use and cached as :class:`GCNConv`'s is.
    Unlike PyG, an edge given twice is attended to once (the pattern holds it once).
    ``adjacency`` may also be a ready ``(n, n)`` :class:`SparseCSR` or torch sparse
    tensor (its pattern is used as it is, no loops added; its values are not read):
    what ``torch.compile(fullgraph=True)`` should get (build it once with
    :func:`gat_adjacency`).  ``x`` may be dense or sparse (see :mod:`torchsparsegradutils.nn`).  With
    ``return_attention_weights`` the result is ``(out, (edge_index, alpha))``:
    the pattern's edges (sources, targets) in its CSR order and ``alpha`` (E, heads)
    after dropout.

    >>> _ = torch.manual_seed(0)
    >>> conv = GATConv(3, 2, heads=4)
    >>> conv(torch.randn(4, 3), torch.tensor([[0, 1, 2], [1, 2, 3]])).shape
    torch.Size([4, 8])
    >>> sorted(conv.state_dict())
    ['att_dst', 'att_src', 'bias', 'lin.weight']
    """

    def __init__(self, in_channels: int, out_channels: int, heads: int = 1, concat: bool = True,
                 negative_slope: float = 0.2, dropout: float = 0.0, add_self_loops: bool = True, bias: bool = True):
        super().__init__()
        if not isinstance(in_channels, int):
            raise ValueError(f"in_channels must be an int (bipartite pairs are not supported), got {in_channels!r}")
        if not 0.0 <= dropout <= 1.0:
            raise ValueError(f"dropout must be in [0, 1], got {dropout}")
        self.in_channels, self.out_channels, self.heads, self.concat = in_channels, out_channels, heads, concat
        self.negative_slope, self.dropout, self.add_self_loops = negative_slope, dropout, add_self_loops
        self.lin = torch.nn.Linear(in_channels, heads * out_channels, bias=False)
        self.att_src = torch.nn.Parameter(torch.empty(1, heads, out_channels))
        self.att_dst = torch.nn.Parameter(torch.empty(1, heads, out_channels))
        self.bias = torch.nn.Parameter(torch.empty(heads * out_channels if concat else out_channels)) if bias else None
        self._cache = None            # (key, copy of edge_index, SparseCSR)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Glorot (Xavier uniform) weights, zero bias, as PyG."""
        torch.nn.init.xavier_uniform_(self.lin.weight)
        for att in (self.att_src, self.att_dst):
            bound = (6.0 / (att.shape[-2] + att.shape[-1])) ** 0.5
            torch.nn.init.uniform_(att, -bound, bound)
        if self.bias is not None:
            torch.nn.init.zeros_(self.bias)

    def adjacency(self, edge_index: torch.Tensor, num_nodes: int) -> SparseCSR:
        """gat_adjacency of edge_index, cached (see the class notes)."""
        key = (num_nodes, self.lin.weight.device, self.add_self_loops)
        return cached(self, key, edge_index, lambda: moved(gat_adjacency(edge_index, num_nodes, self.add_self_loops),
                                                           key[1]))

    def forward(self, x, adjacency, return_attention_weights: bool = False):
        check_features(x, "x")
        H, C = self.heads, self.out_channels
        n = x.shape[0]
        h = linear(x, self.lin.weight).view(n, H, C)
        s, d = _AttentionScores.apply(h, torch.cat([self.att_src, self.att_dst])).unbind(0)
        if isinstance(adjacency, SparseCSR) or (isinstance(adjacency, torch.Tensor) and
                                               adjacency.layout in (torch.sparse_coo, torch.sparse_csr)):
            A = adjacency
        else:
            A = self.adjacency(adjacency, n)
        out = graph_attention(A, h, s, d, self.negative_slope, self.dropout, self.training,
                              return_attention=return_attention_weights)
        out, alpha = out if return_attention_weights else (out, None)
        out = out.reshape(n, H * C) if self.concat else out.mean(1)
        if self.bias is not None:
            out = out + self.bias
        if not return_attention_weights:
            return out
        ptr, col = (A.crow_indices, A.col_indices) if isinstance(A, SparseCSR) else _pattern_arrays(A)
        return out, (torch.stack([col.long(), entry_rows(ptr)]), alpha)

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, heads={self.heads}, concat={self.concat}, "
                f"dropout={self.dropout}, add_self_loops={self.add_self_loops}, bias={self.bias is not None}")


class _AttentionScores(torch.autograd.Function):
    """(s, d) = ((h * att[0]).sum(-1), (h * att[1]).sum(-1)), stacked (2, n, H), for h (n, H, C)
    and att (2, H, C), with PyG's rounding (a product, then a sum over C: scores computed
    by einsum's matrix product instead round differently, and on 2*10^5 nodes the float32
    gradients of att then stray ten times further from float64), in two ops forward and
    three backward, where autograd through the products and sums written out takes ten
    small ones (on a loaded machine each waits for its threads)."""

    @staticmethod
    def forward(ctx, h, att):
        ctx.save_for_backward(h, att)
        return (h.unsqueeze(0) * att.unsqueeze(1)).sum(-1)

    @staticmethod
    def backward(ctx, g):
        h, att = ctx.saved_tensors
        dh = torch.einsum("knh,khc->nhc", g, att) if ctx.needs_input_grad[0] else None
        datt = (g.unsqueeze(-1) * h).sum(1) if ctx.needs_input_grad[1] else None
        return dh, datt


def gat_adjacency(edge_index: torch.Tensor, num_nodes: int, add_self_loops: bool = True) -> SparseCSR:
    r"""The ``(n, n)`` attention pattern of ``edge_index`` (2, E) for :class:`GATConv`, as a
    :class:`SparseCSR`: row ``target`` holds the columns ``source`` of its edges (PyG's
    direction), each once; with ``add_self_loops`` the given self loops are dropped and
    one per node added (PyG's ``remove_self_loops`` then ``add_self_loops``).  Its
    values are ones (a broadcast view: no memory), not read by the attention.
    ``ValueError`` for a malformed ``edge_index``.

    >>> S = gat_adjacency(torch.tensor([[0, 1], [1, 1]]), 2)
    >>> S.crow_indices, S.col_indices
    (tensor([0, 1, 3]), tensor([0, 0, 1]))
    """
    check_edge_index(edge_index)
    if num_nodes < 0:
        raise ValueError(f"num_nodes must be non-negative, got {num_nodes}")
    idx = edge_index.flip(0).long()                           # (target, source)
    if add_self_loops:
        loop = torch.arange(num_nodes, device=idx.device)
        idx = torch.cat([idx[:, idx[0] != idx[1]], torch.stack([loop, loop])], 1)
    s = coo_structure(idx.contiguous(), (num_nodes, num_nodes))    # ValueError for an id out of range
    cols = s.indices[1]
    return SparseCSR(s.ptr, cols, torch.ones(1, device=cols.device).expand(cols.shape[0]), (num_nodes, num_nodes))


def _pattern_arrays(A: torch.Tensor):
    """(row pointers, columns) of a 2-D torch sparse tensor (a COO one's coalesced pattern)."""
    view = checked_view(A.detach())
    return view.ptr, view.col
