"""``GATConv``, graph attention (Veličković et al.) as PyTorch Geometric has it, on
:func:`~torchsparsegradutils.graph_attention`, and ``gat_adjacency``, its attention pattern.
PyG's edge handling (self loops, repeated edges, fill_value, the attention weights'
output forms) is in _gat_edges.py."""
import math
from typing import Optional

import torch

from ..._core.sparse_csr import SparseCSR
from ..._core.structures import coo_structure
from ...graph_attention import graph_attention
from .._features import check_features, linear
from ._edge_index import check_edge_index, is_sparse_adjacency
from ._gat_edges import _csr_of, _entry_scores, _layer_output, _layer_plan, _Plan, _plan_edge_attr

__all__ = ["GATConv", "gat_adjacency"]

FILL_REDUCES = ("add", "sum", "mean", "min", "max", "mul")


class GATConv(torch.nn.Module):
    r"""Graph attention (Veličković et al.), PyTorch Geometric's ``GATConv`` (PyG 2.8): with
    ``h = x W^T`` split into ``heads`` heads of ``out_channels``, per head

    .. math::
        \alpha_{ij} = \mathrm{softmax}_j\,\mathrm{LeakyReLU}(a_{src} \cdot h_j + a_{dst} \cdot h_i
        + a_{edge} \cdot W_e e_{ij}), \quad x'_i = \sum_{j \in N(i)} \alpha_{ij} h_j

    (``j -> i`` over ``edge_index[0] -> edge_index[1]``, PyG's direction; the edge term only
    with ``edge_dim``), the heads concatenated or averaged, plus the residual and ``bias``.
    The attention is :func:`~torchsparsegradutils.graph_attention`: fused, with no (edges x
    heads x features) tensor on the CPU (the edge term is ``edge_attr @ M^T`` with ``M``
    ``(heads, edge_dim)`` folded from ``lin_edge`` and ``att_edge``: no ``lin_edge(edge_attr)``
    of ``edges x heads*out_channels`` either).

    Arguments (PyG's names, defaults and meaning):

    * ``in_channels`` (int, or a pair ``(source, target)`` for a bipartite graph: then
      ``lin_src`` and ``lin_dst`` replace ``lin``).  PyG's lazy ``-1`` is not offered
      (ValueError).
    * ``out_channels``: features per head.
    * ``heads`` (default 1): attention heads.
    * ``concat`` (default True): concatenate the heads (``heads * out_channels`` outputs),
      or average them.
    * ``negative_slope`` (default 0.2): LeakyReLU's slope.
    * ``dropout`` (default 0): probability of dropping an attention weight in training.
      One difference from PyG: a repeated edge is one entry of the pattern (see below), so
      its copies are dropped together (each copy is still kept with probability
      ``1 - dropout``; only their correlation differs from PyG's independent draws).
    * ``add_self_loops`` (default True): remove the given self loops and add one per node
      ``i < min(n_source, n_target)`` (``min(size)`` when given), for an ``edge_index`` and
      for a sparse adjacency alike.
    * ``edge_dim`` (default None): edge feature width; then ``lin_edge`` and ``att_edge``
      exist and ``edge_attr`` enters the scores (without it ``edge_attr`` is ignored, as in
      PyG).
    * ``fill_value`` (default ``"mean"``): the ``edge_attr`` of the added self loops: a
      float or a tensor (broadcast to ``(edge_dim,)``), or ``"mean"``, ``"add"``/``"sum"``,
      ``"min"``, ``"max"``, ``"mul"`` of the node's incoming edges' (0 for a node without,
      1 for ``"mul"``), as PyG's ``add_self_loops``.
    * ``bias`` (default True): learn an additive bias.
    * ``residual`` (default False): add ``res(x_target)``, a linear map without bias.
    * ``**kwargs``: PyG's ``MessagePassing`` options: only ``aggr="add"`` is accepted
      (ValueError for anything else, naming it).

    State dict keys are PyG's: ``lin.weight`` (or ``lin_src.weight`` and ``lin_dst.weight``),
    ``att_src``, ``att_dst``, ``att_edge`` and ``lin_edge.weight`` (with ``edge_dim``),
    ``res.weight`` (with ``residual``), ``bias``: a PyG ``state_dict`` loads as it is, and ours
    into PyG's.

    ``forward(x, edge_index, edge_attr=None, size=None, return_attention_weights=None)``:

    * ``x``: ``(n, F)`` (dense, or sparse: see :mod:`torchsparsegradutils.nn`), or a pair
      ``(x_source, x_target)``, ``x_target`` may be None (then the target score is 0, no
      residual, and the targets are counted by ``size[1]``, else as the sources).
    * ``edge_index``: ``(2, E)`` (sources, targets), each edge counted once per occurrence
      exactly as PyG: a repeated edge is stored once in the pattern with its copies' share
      folded into an additive score (``log`` of the sum of the copies' ``exp`` scores, put
      back before LeakyReLU), which gives PyG's softmax, output and gradients (copies with
      different ``edge_attr`` included).  The pattern is built once and cached while an
      ``edge_index`` of the same contents comes back.  Or a sparse adjacency ``adj_t``
      ``(n_target, n_source)``: a :class:`SparseCSR` or a torch COO/CSR/CSC tensor (its values
      unread), which gets PyG's self loops too; ``edge_attr`` is then not supported
      (ValueError; PyG raises too).  For ``torch.compile(fullgraph=True)`` pass a
      :class:`SparseCSR` built by :func:`gat_adjacency` to a layer with
      ``add_self_loops=False`` (adding loops changes the shape: a graph break).
    * ``edge_attr``: ``(E, edge_dim)`` or ``(E,)``, one row per column of ``edge_index``.
    * ``size``: ``(n_source, n_target)``.
    * ``return_attention_weights``: when true, ``(out, (edge_index, alpha))`` with PyG's
      ``edge_index`` (after its self-loop handling: the kept edges in their order, then the
      loops) and ``alpha`` ``(E', heads)`` one row per edge, after dropout; for a sparse
      adjacency ``(out, (adj, alpha))``, ``adj`` a torch sparse tensor (COO for a COO
      input, else CSR) ``(n_target, n_source, heads)`` holding ``alpha``.

    >>> _ = torch.manual_seed(0)
    >>> conv = GATConv(3, 2, heads=4)
    >>> conv(torch.randn(4, 3), torch.tensor([[0, 1, 2], [1, 2, 3]])).shape
    torch.Size([4, 8])
    >>> sorted(conv.state_dict())
    ['att_dst', 'att_src', 'bias', 'lin.weight']
    """

    def __init__(self, in_channels, out_channels: int, heads: int = 1, concat: bool = True,
                 negative_slope: float = 0.2, dropout: float = 0.0, add_self_loops: bool = True,
                 edge_dim: Optional[int] = None, fill_value="mean", bias: bool = True, residual: bool = False,
                 **kwargs):
        super().__init__()
        aggr = kwargs.pop("aggr", "add")
        if aggr not in ("add", "sum"):
            raise ValueError(f"GATConv sums the attended messages: aggr must be 'add', got {aggr!r}")
        if kwargs:
            raise ValueError(f"GATConv does not support the MessagePassing option(s) {', '.join(sorted(kwargs))}")
        pair = isinstance(in_channels, (tuple, list))
        if not (_is_int(in_channels) or (pair and len(in_channels) == 2 and all(map(_is_int, in_channels)))):
            raise ValueError(f"in_channels must be an int or a pair of ints (source, target), got {in_channels!r}")
        if any(c < 0 for c in (in_channels if pair else (in_channels,))):
            raise ValueError(f"in_channels must be non-negative (PyG's lazy -1 is not supported), got {in_channels!r}")
        if not _is_int(out_channels) or out_channels < 0 or not _is_int(heads) or heads < 1:
            raise ValueError(f"out_channels must be a non-negative int and heads a positive int, got "
                             f"{out_channels!r} and {heads!r}")
        if not 0.0 <= dropout <= 1.0:
            raise ValueError(f"dropout must be in [0, 1], got {dropout}")
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
        self.edge_dim, self.fill_value, self.residual = edge_dim, fill_value, residual
        HC = heads * out_channels
        self.lin = self.lin_src = self.lin_dst = None
        if pair:
            self.lin_src = torch.nn.Linear(in_channels[0], HC, bias=False)
            self.lin_dst = torch.nn.Linear(in_channels[1], HC, bias=False)
        else:
            self.lin = torch.nn.Linear(in_channels, HC, bias=False)
        self.att_src = torch.nn.Parameter(torch.empty(1, heads, out_channels))
        self.att_dst = torch.nn.Parameter(torch.empty(1, heads, out_channels))
        if edge_dim is not None:
            self.lin_edge = torch.nn.Linear(edge_dim, HC, bias=False)
            self.att_edge = torch.nn.Parameter(torch.empty(1, heads, out_channels))
        else:
            self.lin_edge = None
            self.register_parameter("att_edge", None)
        total = HC if concat else out_channels
        if residual:
            self.res = torch.nn.Linear(in_channels[1] if pair else in_channels, total, bias=False)
        else:
            self.register_parameter("res", None)
        if bias:
            self.bias = torch.nn.Parameter(torch.empty(total))
        else:
            self.register_parameter("bias", None)
        self._cache = None            # (key, copy of edge_index, _Plan)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Glorot (Xavier uniform) weights and attention vectors, zero bias, as PyG."""
        for lin in (self.lin, self.lin_src, self.lin_dst, self.lin_edge, self.res):
            if lin is not None:
                _glorot(lin.weight)
        for att in (self.att_src, self.att_dst, self.att_edge):
            if att is not None:
                _glorot(att)
        if self.bias is not None:
            torch.nn.init.zeros_(self.bias)

    # ------------------------------------------------------------------ forward
    def forward(self, x, edge_index, edge_attr: Optional[torch.Tensor] = None, size=None,
                return_attention_weights=None):
        H, C = self.heads, self.out_channels
        pair = isinstance(x, (tuple, list)) and not isinstance(x, SparseCSR)    # a SparseCSR is a tuple
        if pair and len(x) != 2:
            raise ValueError(f"x must be a tensor or a pair (x_source, x_target), got {len(x)} items")
        x_src, x_dst = tuple(x) if pair else (x, None)
        if x_src is None:
            raise ValueError("x_source must be given (x = (x_source, x_target), only x_target may be None)")
        check_features(x_src, "x_source" if pair else "x")
        if x_dst is not None:
            check_features(x_dst, "x_target")
        lin_src, lin_dst = (self.lin, self.lin) if self.lin is not None else (self.lin_src, self.lin_dst)
        res = None
        def heads_of(t, lin):
            return linear(t, lin.weight).view(t.shape[0], H, C)       # not view(-1, ...): C may be 0
        if not pair:
            h_src = heads_of(x_src, lin_src)
            h_dst = h_src if self.lin is not None else heads_of(x_src, lin_dst)
            if self.res is not None:
                res = linear(x_src, self.res.weight)
        else:
            h_src = heads_of(x_src, lin_src)
            h_dst = None if x_dst is None else heads_of(x_dst, lin_dst)
            if x_dst is not None and self.res is not None:
                res = linear(x_dst, self.res.weight)
        if h_dst is h_src:
            s, d = _AttentionScores.apply(h_src, torch.cat([self.att_src, self.att_dst])).unbind(0)
        else:
            s = (h_src * self.att_src).sum(-1)
            d = None if h_dst is None else (h_dst * self.att_dst).sum(-1)

        n_src, n_dst, loops = self._sizes(h_src, h_dst, edge_index, size)
        if d is None:
            d = s.new_zeros(n_dst, H)
        sparse = is_sparse_adjacency(edge_index)
        use_edges = edge_attr is not None and self.lin_edge is not None
        if sparse and use_edges:
            raise ValueError("GATConv: edge_attr with a sparse adjacency is not supported (PyG raises too): "
                             "pass an edge_index")
        if sparse and not self.add_self_loops:
            A, plan = (edge_index if edge_index.layout != torch.sparse_csc else _csr_of(edge_index)), None
        else:
            plan = _layer_plan(self, edge_index, n_src, n_dst, loops, self.att_src.device)
            A = plan.A
        e_occ = self._edge_scores(edge_attr, edge_index, plan, loops) if use_edges else None
        e_entry, share = _entry_scores(plan, s, d, e_occ, self.negative_slope) if plan is not None else (None, None)
        want_alpha = bool(return_attention_weights)
        out = graph_attention(A, h_src, s, d, self.negative_slope, self.dropout, self.training,
                              return_attention=want_alpha, edge_score=e_entry)
        out, alpha = out if want_alpha else (out, None)
        return _layer_output(out, alpha, self.concat, res, self.bias, edge_index if sparse else None, A, plan,
                             share)

    def _sizes(self, h_src, h_dst, edge_index, size):
        """(n_source, n_target, number of self loops to add) as PyG infers them (ValueError
        where they disagree)."""
        if size is not None and (not isinstance(size, (tuple, list)) or len(size) != 2 or
                                 not all(v is None or _is_int(v) for v in size)):
            raise ValueError(f"size must be a pair (n_source, n_target) of ints or None, got {size!r}")
        n_src = h_src.shape[0]
        if size is not None and size[0] is not None and size[0] != n_src:
            raise ValueError(f"size[0] = {size[0]} source nodes but x_source has {n_src} rows")
        if is_sparse_adjacency(edge_index):
            if edge_index.dim() != 2:
                raise ValueError(f"a sparse adjacency must be 2-D (n_target, n_source), got shape "
                                 f"{tuple(edge_index.shape)}")
            n_dst, m = edge_index.shape
            if m != n_src:
                raise ValueError(f"the adjacency has {m} source columns but x_source has {n_src} rows "
                                 f"(adj_t is (n_target, n_source), PyG's transposed convention)")
            if size is not None and size[1] is not None and size[1] != n_dst:
                raise ValueError(f"size[1] = {size[1]} target nodes but the adjacency has {n_dst} rows")
            loops = min(n_dst, n_src)
        else:
            check_edge_index(edge_index)
            if size is not None and size[1] is not None:
                n_dst = size[1]
            else:
                n_dst = h_dst.shape[0] if h_dst is not None else n_src
            loops = n_src if h_dst is None else min(n_src, h_dst.shape[0])
            if size is not None:
                loops = min([loops] + [v for v in size if v is not None]) if None in size else min(size)
        if h_dst is not None and h_dst.shape[0] != n_dst:
            raise ValueError(f"x_target has {h_dst.shape[0]} rows but there are {n_dst} target nodes")
        return n_src, n_dst, loops

    def _edge_scores(self, edge_attr, edge_index, plan: "_Plan", loops: int) -> torch.Tensor:
        """(E', heads): a_edge . W_e e for every edge of plan.edge_index (the kept edges'
        edge_attr, then the self loops' by fill_value), as edge_attr @ M^T."""
        ea = _plan_edge_attr(edge_attr, edge_index, plan, loops, self.edge_dim, self.fill_value)
        H, C = self.heads, self.out_channels
        W = self.lin_edge.weight.view(H, C, -1)
        M = (W * self.att_edge.view(H, C, 1)).sum(1)              # (H, edge_dim)
        return ea.to(M.dtype) @ M.t()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels}, heads={self.heads})"


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _glorot(t: torch.Tensor) -> None:
    bound = math.sqrt(6.0 / (t.shape[-2] + t.shape[-1]))
    with torch.no_grad():
        t.uniform_(-bound, bound)


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
    direction), each once (a repeated edge is attended to once through this pattern:
    give the ``edge_index`` itself to count it per occurrence, as PyG); with
    ``add_self_loops`` the given self loops are dropped and one per node added (PyG's
    ``remove_self_loops`` then ``add_self_loops``).  Its values are ones (a broadcast view:
    no memory), not read by the attention.  ``ValueError`` for a malformed ``edge_index``.
    Pass it to a ``GATConv(..., add_self_loops=False)`` (what ``torch.compile(fullgraph=True)``
    traces).

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
