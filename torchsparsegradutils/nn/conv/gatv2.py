"""``GATv2Conv``, GATv2 (Brody et al., "How Attentive are Graph Attention Networks?") as
PyTorch Geometric has it, on :func:`~torchsparsegradutils.graph_attention_v2`.  PyG's
edge handling (self loops, repeated edges, fill_value, the attention weights' output
forms) is shared with ``GATConv`` in _gat_edges.py."""
import math
from typing import Optional

import torch
import torch.nn.functional as F

from ..._core.sparse_csr import SparseCSR
from ...graph_attention_v2 import graph_attention_v2
from .._features import check_features, is_sparse, linear
from ._edge_index import check_edge_index, is_sparse_adjacency
from ._gat_edges import _csr_of, _layer_output, _layer_plan, _plan_edge_attr, _v2_entry_terms
from .gat import FILL_REDUCES, _glorot, _is_int

__all__ = ["GATv2Conv"]


class GATv2Conv(torch.nn.Module):
    r"""GATv2 (Brody et al.), PyTorch Geometric's ``GATv2Conv`` (PyG 2.8): with
    ``x_l = lin_l(x_source)`` and ``x_r = lin_r(x_target)`` split into ``heads`` heads of
    ``out_channels``, per head

    .. math::
        \alpha_{ij} = \mathrm{softmax}_j\, a^\top \mathrm{LeakyReLU}(x_{l,j} + x_{r,i}
        + W_e e_{ij}), \quad x'_i = \sum_{j \in N(i)} \alpha_{ij}\, x_{l,j}

    (``j -> i`` over ``edge_index[0] -> edge_index[1]``, PyG's direction; the edge term only
    with ``edge_dim``), the heads concatenated or averaged, plus the residual and ``bias``.
    The LeakyReLU is inside the product with ``a``, so the scores cannot be split per node
    as GAT's: :func:`~torchsparsegradutils.graph_attention_v2` computes each edge's score
    from its two rows inside fused kernels, forward and backward, with no (edges x heads x
    out_channels) tensor (with ``edge_dim``, ``lin_edge(edge_attr)`` is one, as in PyG).

    Arguments (PyG's names, defaults and meaning):

    * ``in_channels`` (int, or a pair ``(source, target)`` for a bipartite graph); ``-1``
      (either of the pair too) defers the width to the first ``forward`` (PyG's lazy
      initialisation; the weights are then made and initialised there).
    * ``out_channels``: features per head.
    * ``heads`` (default 1): attention heads.
    * ``concat`` (default True): concatenate the heads (``heads * out_channels`` outputs),
      or average them.
    * ``negative_slope`` (default 0.2): LeakyReLU's slope.
    * ``dropout`` (default 0): probability of dropping an attention weight in training.
      One difference from PyG: a repeated edge is one entry of the pattern, so its copies
      are dropped together (each is still kept with probability ``1 - dropout``).
    * ``add_self_loops`` (default True): remove the given self loops and add one per node
      ``i < min(n_source, n_target)``, for an ``edge_index`` and a sparse adjacency alike.
    * ``edge_dim`` (default None): edge feature width; then ``lin_edge`` exists and
      ``edge_attr`` enters the scores (``edge_attr`` without ``edge_dim``: ValueError; PyG
      fails an assertion).
    * ``fill_value`` (default ``"mean"``): the ``edge_attr`` of the added self loops: a
      float or a tensor (broadcast to ``(edge_dim,)``), or ``"mean"``, ``"add"``/``"sum"``,
      ``"min"``, ``"max"``, ``"mul"`` of the node's incoming edges' (0 for a node without,
      1 for ``"mul"``), as PyG's ``add_self_loops``.
    * ``bias`` (default True): learn an additive bias, and give ``lin_l`` and ``lin_r``
      theirs (as PyG).
    * ``share_weights`` (default False): one linear map for both ends (``lin_r`` is
      ``lin_l``).
    * ``residual`` (default False): add ``res(x_target)``, a linear map without bias.
    * ``**kwargs``: PyG's ``MessagePassing`` options: only ``aggr="add"`` is accepted
      (ValueError for anything else, naming it).

    State dict keys are PyG's: ``lin_l.weight``, ``lin_l.bias``, ``lin_r.weight``,
    ``lin_r.bias`` (the biases with ``bias``; both names with ``share_weights``, as
    PyTorch lists a shared module), ``att``, ``lin_edge.weight`` (with ``edge_dim``),
    ``res.weight`` (with ``residual``), ``bias``: a PyG ``state_dict`` loads as it is, and
    ours into PyG's.

    ``forward(x, edge_index, edge_attr=None, return_attention_weights=None)``:

    * ``x``: ``(n, F)`` (dense, or sparse: see :mod:`torchsparsegradutils.nn`), or a pair
      ``(x_source, x_target)`` of ``n_source`` and ``n_target`` rows (both given, as PyG).
    * ``edge_index``: ``(2, E)`` (sources, targets), each edge counted once per occurrence
      exactly as PyG: a repeated edge is one entry of the pattern with its copies' summed
      share as an additive score, which gives PyG's softmax, output and gradients (copies
      with different ``edge_attr`` included).  The pattern is built once and cached while
      an ``edge_index`` of the same contents comes back.  Or a sparse adjacency ``adj_t``
      ``(n_target, n_source)``: a :class:`SparseCSR` or a torch COO/CSR/CSC tensor (its
      values unread), which gets PyG's self loops too; ``edge_attr`` is then not supported
      (ValueError).  For ``torch.compile(fullgraph=True)`` pass a :class:`SparseCSR` (e.g.
      from :func:`gat_adjacency`) to a layer with ``add_self_loops=False``.
    * ``edge_attr``: ``(E, edge_dim)`` or ``(E,)``, one row per column of ``edge_index``.
    * ``return_attention_weights``: when true, ``(out, (edge_index, alpha))`` with PyG's
      ``edge_index`` (after its self-loop handling: the kept edges in their order, then the
      loops) and ``alpha`` ``(E', heads)`` one row per edge, after dropout; for a sparse
      adjacency ``(out, (adj, alpha))``, ``adj`` a torch sparse tensor (COO for a COO
      input, else CSR) ``(n_target, n_source, heads)`` holding ``alpha``.

    >>> _ = torch.manual_seed(0)
    >>> conv = GATv2Conv(3, 2, heads=4)
    >>> conv(torch.randn(4, 3), torch.tensor([[0, 1, 2], [1, 2, 3]])).shape
    torch.Size([4, 8])
    >>> sorted(conv.state_dict())
    ['att', 'bias', 'lin_l.bias', 'lin_l.weight', 'lin_r.bias', 'lin_r.weight']
    """

    def __init__(self, in_channels, out_channels: int, heads: int = 1, concat: bool = True,
                 negative_slope: float = 0.2, dropout: float = 0.0, add_self_loops: bool = True,
                 edge_dim: Optional[int] = None, fill_value="mean", bias: bool = True, share_weights: bool = False,
                 residual: bool = False, **kwargs):
        super().__init__()
        aggr = kwargs.pop("aggr", "add")
        if aggr not in ("add", "sum"):
            raise ValueError(f"GATv2Conv sums the attended messages: aggr must be 'add', got {aggr!r}")
        if kwargs:
            raise ValueError(f"GATv2Conv does not support the MessagePassing option(s) {', '.join(sorted(kwargs))}")
        pair = isinstance(in_channels, (tuple, list))
        if not (_is_int(in_channels) or (pair and len(in_channels) == 2 and all(map(_is_int, in_channels)))):
            raise ValueError(f"in_channels must be an int or a pair of ints (source, target), got {in_channels!r}")
        if any(c < -1 for c in (in_channels if pair else (in_channels,))):
            raise ValueError(f"in_channels must be non-negative, or -1 (lazy), got {in_channels!r}")
        if not _is_int(out_channels) or out_channels < 0 or not _is_int(heads) or heads < 1:
            raise ValueError(f"out_channels must be a non-negative int and heads a positive int, got "
                             f"{out_channels!r} and {heads!r}")
        if not isinstance(dropout, (int, float)) or not 0.0 <= dropout <= 1.0:
            raise ValueError(f"dropout must be in [0, 1], got {dropout!r}")
        if edge_dim is not None and (not _is_int(edge_dim) or edge_dim < 1):
            raise ValueError(f"edge_dim must be a positive int or None, got {edge_dim!r}")
        if isinstance(fill_value, str) and fill_value not in FILL_REDUCES:
            raise ValueError(f"fill_value must be a float, a tensor or one of {', '.join(FILL_REDUCES)}, got "
                             f"{fill_value!r}")
        if not isinstance(fill_value, (str, int, float, torch.Tensor)):
            raise ValueError(f"fill_value must be a float, a tensor or a reduction name, got {type(fill_value).__name__}")
        self.in_channels = tuple(in_channels) if pair else in_channels
        self.out_channels, self.heads, self.concat = out_channels, heads, concat
        self.negative_slope, self.dropout, self.add_self_loops = negative_slope, dropout, add_self_loops
        self.edge_dim, self.fill_value = edge_dim, fill_value
        self.share_weights, self.residual = share_weights, residual
        HC = heads * out_channels
        c_src, c_dst = tuple(in_channels) if pair else (in_channels, in_channels)
        self.lin_l = _linear(c_src, HC, bias)
        self.lin_r = self.lin_l if share_weights else _linear(c_dst, HC, bias)
        self.att = torch.nn.Parameter(torch.empty(1, heads, out_channels))
        self.lin_edge = None if edge_dim is None else torch.nn.Linear(edge_dim, HC, bias=False)
        total = HC if concat else out_channels
        if residual:
            self.res = _linear(c_dst, total, False)
        else:
            self.register_parameter("res", None)
        if bias:
            self.bias = torch.nn.Parameter(torch.empty(total))
        else:
            self.register_parameter("bias", None)
        self._cache = None            # (key, copy of edge_index, _Plan)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Glorot (Xavier uniform) weights and attention vector, the linear maps' biases
        uniform in +-1/sqrt(fan_in), zero bias, as PyG (a lazy map is initialised when
        its width is known)."""
        for lin in (self.lin_l, self.lin_r, self.lin_edge, self.res):
            if lin is not None:
                _init_linear(lin)
        _glorot(self.att)
        if self.bias is not None:
            torch.nn.init.zeros_(self.bias)

    # ------------------------------------------------------------------ forward
    def forward(self, x, edge_index, edge_attr: Optional[torch.Tensor] = None, return_attention_weights=None):
        H, C = self.heads, self.out_channels
        pair = isinstance(x, (tuple, list)) and not isinstance(x, SparseCSR)    # a SparseCSR is a tuple
        if pair and len(x) != 2:
            raise ValueError(f"x must be a tensor or a pair (x_source, x_target), got {len(x)} items")
        x_src, x_dst = tuple(x) if pair else (x, x)
        if x_src is None or x_dst is None:
            raise ValueError("GATv2Conv needs both x_source and x_target (x = (x_source, x_target))")
        check_features(x_src, "x_source" if pair else "x")
        if pair:
            check_features(x_dst, "x_target")
        x_l = _apply(self.lin_l, x_src).view(x_src.shape[0], H, C)     # not view(-1, ...): C may be 0
        x_r = x_l if self.share_weights and not pair else _apply(self.lin_r, x_dst).view(x_dst.shape[0], H, C)
        res = None if self.res is None else _apply(self.res, x_dst)
        n_src, n_dst = x_l.shape[0], x_r.shape[0]
        sparse = is_sparse_adjacency(edge_index)
        if edge_attr is not None and self.lin_edge is None:
            raise ValueError("GATv2Conv: edge_attr given to a layer without edge_dim (set edge_dim to use it)")
        if sparse and edge_attr is not None:
            raise ValueError("GATv2Conv: edge_attr with a sparse adjacency is not supported: pass an edge_index")
        if sparse:
            if edge_index.dim() != 2 or tuple(edge_index.shape) != (n_dst, n_src):
                raise ValueError(f"the sparse adjacency adj_t must be (n_target, n_source) = ({n_dst}, {n_src}), "
                                 f"got {tuple(edge_index.shape)}")
        else:
            check_edge_index(edge_index)
        loops = min(n_src, n_dst)
        if sparse and not self.add_self_loops:
            A, plan = (edge_index if edge_index.layout != torch.sparse_csc else _csr_of(edge_index)), None
        else:
            plan = _layer_plan(self, edge_index, n_src, n_dst, loops, self.att.device)
            A = plan.A
        att = self.att.view(H, C)
        et = b = share = None
        if plan is not None:
            ea = None if edge_attr is None else _plan_edge_attr(edge_attr, edge_index, plan, loops, self.edge_dim,
                                                                self.fill_value, self.lin_edge.weight.dtype)
            W = None if ea is None else self.lin_edge.weight
            et, b, share = _v2_entry_terms(plan, x_l, x_r, att, ea, W, self.negative_slope)
        want_alpha = bool(return_attention_weights)
        out = graph_attention_v2(A, x_l, x_r, att, self.negative_slope, self.dropout, self.training,
                                 return_attention=want_alpha, edge_term=et, edge_score=b)
        out, alpha = out if want_alpha else (out, None)
        return _layer_output(out, alpha, self.concat, res, self.bias, edge_index if sparse else None, A, plan,
                             share)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels}, heads={self.heads})"


def _linear(in_channels: int, out_channels: int, bias: bool) -> torch.nn.Module:
    """A linear map, lazy (its width taken at the first forward) for in_channels = -1."""
    if in_channels == -1:
        return torch.nn.LazyLinear(out_channels, bias=bias)
    return torch.nn.Linear(in_channels, out_channels, bias=bias)


def _init_linear(lin: torch.nn.Module) -> None:
    """PyG's Linear initialisation: Glorot weight, bias uniform in +-1/sqrt(fan_in); a
    lazy map's waits until it is made (_apply)."""
    if isinstance(lin.weight, torch.nn.parameter.UninitializedParameter):
        return
    _glorot(lin.weight)
    if lin.bias is not None:
        bound = 1.0 / math.sqrt(lin.weight.shape[1]) if lin.weight.shape[1] > 0 else 0.0
        with torch.no_grad():
            lin.bias.uniform_(-bound, bound)


def _apply(lin: torch.nn.Module, x) -> torch.Tensor:
    """lin(x) for a dense or sparse x; a lazy map is made first, for x's width, and
    initialised as PyG's."""
    if isinstance(lin.weight, torch.nn.parameter.UninitializedParameter):
        with torch.no_grad():
            lin(torch.zeros(0, x.shape[1], dtype=lin.weight.dtype, device=lin.weight.device))   # materialises
        _init_linear(lin)
    if not is_sparse(x):
        return F.linear(x, lin.weight, lin.bias)
    h = linear(x, lin.weight)
    return h if lin.bias is None else h + lin.bias
