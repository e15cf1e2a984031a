"""``SAGEConv``, GraphSAGE (Hamilton et al.) as PyTorch Geometric has it, and
``sage_adjacency``, the aggregation matrix and ``sparse_mm`` reduction of its ``aggr``."""
from typing import Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F

from ..._core.sparse_csr import SparseCSR
from .._aggr import (REDUCES, Graph, MaxAggregation, MeanAggregation, MinAggregation, MultiAggregation,
                     SumAggregation, by_columns, product, resolve, run)
from .._aggr import out_channels as out_channels_of
from .._features import check_features, is_sparse, linear, linear_t, to_dense_features
from ._edge_index import as_sparse_csr, cached, check_edge_index, is_sparse_adjacency, node_count

__all__ = ["SAGEConv", "sage_adjacency"]

#: the aggregations that are one product with the adjacency (a sparse adj_t's values weight them)
_FUSED = (SumAggregation, MeanAggregation, MaxAggregation, MinAggregation)

def _channels(in_channels) -> Tuple[int, int]:
    pair = (in_channels, in_channels) if isinstance(in_channels, int) else tuple(in_channels)
    if len(pair) != 2 or not all(isinstance(c, int) for c in pair):
        raise ValueError(f"in_channels must be an int or a pair of ints (source, target), got {in_channels!r}")
    return pair


def _linear(in_features: int, out_features: int, bias: bool) -> torch.nn.Module:
    """Linear, or LazyLinear (its in_features set on first use) for in_features <= 0 (PyG's -1)."""
    if in_features <= 0:
        return torch.nn.LazyLinear(out_features, bias=bias)
    return torch.nn.Linear(in_features, out_features, bias=bias)


class SAGEConv(torch.nn.Module):
    r"""GraphSAGE (Hamilton et al.), PyTorch Geometric's ``SAGEConv``:
    ``x'_i = W_l · aggr_{j in N(i)} x_j + b + W_r · x_i``, then, with ``normalize=True``,
    each output row divided by its L2 norm.

    Arguments (PyG's, in PyG's order, with PyG's defaults):

    * ``in_channels`` (int or pair ``(source, target)``): the feature widths; ``-1`` (or
      ``-1`` in the pair) for a width read from the first ``forward`` (``lin_l`` and
      ``lin_r`` are then :class:`torch.nn.LazyLinear` until it).
    * ``out_channels`` (int): the output width.
    * ``aggr`` (default ``"mean"``): PyG's aggregation of the messages ``x_j`` into each
      target, by name (also PyG's class names, ``"SoftmaxAggregation"``): ``"mean"``,
      ``"sum"`` (or ``"add"``), ``"max"``, ``"min"``, ``"var"``, ``"std"``,
      ``"softmax"``, ``"powermean"``, ``"lstm"``; a module (below); or a list of these,
      aggregated separately and combined as PyG's ``MultiAggregation`` (``aggr_kwargs``).
      Other names (PyG's ``"median"``, ``"mul"``, ...) raise ValueError: pass PyG's module.
    * ``normalize`` (default False): L2-normalize each output row.
    * ``root_weight`` (default True): add ``W_r x_i`` (``lin_r``, no bias).
    * ``project`` (default False): first replace the source features by
      ``relu(W_3 x_j + b_3)`` (``lin``, ``(source, source)``, with a bias; the root term
      keeps the raw ``x_i``); ValueError with a lazy source width, as in PyG.
    * ``bias`` (default True): ``lin_l``'s bias ``b``.
    * ``aggr_kwargs`` (dict): for a named ``aggr``, its PyG options: ``"var"``,
      ``"std"``: ``semi_grad``; ``"softmax"``: ``t``, ``learn``, ``semi_grad``,
      ``channels``; ``"powermean"``: ``p``, ``learn``, ``channels``, ``clamp_min``,
      ``clamp_max``; ``"lstm"``: ``in_channels``, ``out_channels`` (both by default the
      source width, as in PyG) and :class:`torch.nn.LSTM`'s options; the others none
      (TypeError for an option an aggregation lacks).  For a list, ``MultiAggregation``'s:
      ``aggrs_kwargs`` (a dict of options per aggregation), ``mode`` (default ``"cat"``:
      concatenated, so ``lin_l`` takes ``len(aggr) * source`` features; ``"proj"``: a
      Linear ``aggr_module.lin`` from the concatenation to ``mode_kwargs["out_channels"]``;
      ``"attn"``: each aggregation through its own Linear to ``out_channels``
      (``aggr_module.lin_heads.lins.<i>``), then ``aggr_module.multihead_attn``, a
      :class:`torch.nn.MultiheadAttention` (``mode_kwargs`` ``num_heads`` and its
      options) over the aggregations of each node, averaged; ``"sum"``, ``"mean"``,
      ``"max"``, ``"min"``, ``"logsumexp"``, ``"std"``, ``"var"``: that reduction over
      the aggregations, element-wise) and ``mode_kwargs`` (``in_channels``, an int or one
      per aggregation, and ``out_channels``, for ``"proj"`` and ``"attn"`` only).
    * ``**kwargs``: PyG's other ``MessagePassing`` options (``flow``, ``decomposed_layers``,
      ...) raise TypeError; ``node_dim=-2``, PyG's default, is taken.

    The parameters are PyG's, with PyG's names, so a ``state_dict`` moves between this
    layer and PyG's as it is: ``lin_l`` (with the bias), ``lin_r`` (absent when
    ``root_weight=False``), ``lin`` (``project=True``), and under ``aggr_module`` those
    of the aggregation: ``t`` (``"softmax"``, ``learn=True``), ``p`` (``"powermean"``,
    ``learn=True``), ``lstm`` (``"lstm"``), a module's own, and for a list ``aggrs.<i>.``
    each aggregation's plus ``lin`` (``"proj"``) or ``lin_heads`` and ``multihead_attn``
    (``"attn"``).  ``repr`` is PyG's, ``SAGEConv(8, 32, aggr=mean)``.

    ``forward(x, edge_index, size=None)``: ``x`` is ``(n, F)``, dense, a torch sparse
    tensor or a :class:`SparseCSR` (see :mod:`torchsparsegradutils.nn`), or dense
    ``(batch, n, F)``: a batch over one static graph (PyG's ``node_dim=-2``), every
    column-wise aggregation one product over the items side by side (``"lstm"`` and a
    ``channels > 1`` ``"softmax"`` / ``"powermean"`` take 2-D ``x`` only, as PyG's); or a
    pair ``(x_source, x_target)`` of these for a bipartite graph, ``x_target`` None to
    leave out the root term; ``size`` is ``(n_source, n_target)`` (by default the rows of
    ``x_source`` and of ``x_target``, or without the latter the largest target id + 1).
    ``edge_index`` is either:

    * a (2, E) tensor, messages ``edge_index[0] -> edge_index[1]`` (PyG's direction),
      built into the ``(n_target, n_source)`` adjacency on first use and cached as
      :class:`GCNConv`'s is (while an ``edge_index`` of the same contents comes back, for
      the same node counts, dtype and device; under ``torch.compile`` it is built in the
      graph, without a graph break).  The aggregation is PyG's, repeated edges included:
      an edge given twice is two messages (for ``"max"`` / ``"min"`` two ties); a node
      without neighbours aggregates to 0 (``"powermean"``: ``clamp_min ** (1/p)``, ``"lstm"``:
      the LSTM of zeros, as PyG);
    * a sparse ``adj_t`` (PyG's transposed convention: ``(n_target, n_source)``, row
      ``i`` holding ``i``'s in-neighbours), a torch sparse COO, CSR or CSC tensor or a
      :class:`SparseCSR` (what a compiled model should get).  As in PyG's ``torch.sparse``
      route, a single ``"sum"``, ``"mean"``, ``"max"`` or ``"min"`` is
      ``sparse_mm(A, x, reduce)`` with reduce ``"sum"``, ``"mean"``, ``"amax"`` or
      ``"amin"``: ``A``'s values weight the messages (and get their gradient), ``"mean"``
      divides by the row's number of stored entries.  Every other ``aggr`` (a list too)
      reads the pattern alone, each stored entry one message in row order, as PyG (which
      then runs its edge-wise route) does.  (torch_sparse's ``SparseTensor`` is not taken.)

    How each aggregation runs (no edges x features temporary unless said):

    * ``"sum"``, ``"mean"``: one ``sparse_mm`` over the adjacency, of ``x`` W_l^T first
      when that is cheaper (always for a sparse ``x``: one ``sparse_mm(x, [W_l; W_r]^T)``);
    * ``"max"``, ``"min"``: one ``sparse_mm`` ``"amax"`` / ``"amin"`` with PyG's gradient:
      ``G[i, k]`` split evenly among the messages equal to the extremum, and, where it is
      exactly 0, one more share for the 0 PyG's scatter starts from, dropped (``sparse_mm``
      gives it all to the first entry of a tie: ``torch.sparse.mm``'s rule);
    * ``"var"``, ``"std"``: one mean product of ``[x, x * x]``, PyG's formulas (``std``'s
      clamp at 1e-5 and its zeroing at or under ``sqrt(1e-5)``); ``"powermean"``: a mean
      product of ``x`` clamped and raised to ``p``, per node;
    * ``"softmax"``: graph attention (:func:`~torchsparsegradutils.graph_attention`, the
      fused C kernels, Triton on CUDA) with one head per feature, source scores ``t x``,
      target scores 0 and slope 1; the kernels keep the ``(entries, features)`` attention
      weights for the backward (PyG makes several such arrays); ``semi_grad`` passes the
      scores detached;
    * ``"lstm"``: inherently dense: the messages of each target, in edge order, one padded
      ``(n_target, most messages, F)`` batch (PyG's ``to_dense_batch``, zeros after the
      last message), gathered from ``x`` at once; the edges must be sorted by target
      (ValueError "'index' tensor is not sorted" otherwise, PyG's words);
    * a module: any :class:`torch.nn.Module` (PyG's ``MLPAggregation``, say; nothing of
      ``torch_geometric`` is imported) is called as PyG calls an ``Aggregation``:
      ``module(x[src], index=dst, ptr=None, dim_size=n_target, dim=-2)`` on the gathered
      messages, an edges x features array as in PyG; ``lin_l``'s width is the source width,
      or ``module.get_out_channels(source)`` where it has that method.

    Not PyG's: no TorchScript (``torch.jit.script``), no ``MessagePassing`` hooks,
    explain or ``decomposed_layers``.

    >>> _ = torch.manual_seed(0)
    >>> conv = SAGEConv(3, 2, aggr="max")
    >>> conv(torch.randn(4, 3), torch.tensor([[0, 1, 2], [1, 2, 3]])).shape
    torch.Size([4, 2])
    >>> sorted(conv.state_dict())
    ['lin_l.bias', 'lin_l.weight', 'lin_r.weight']
    >>> SAGEConv((3, 5), 2, aggr=["mean", "max"])
    SAGEConv((3, 5), 2, aggr=['mean', 'max'])
    """

    def __init__(self, in_channels: Union[int, Tuple[int, int]], out_channels: int,
                 aggr: Union[str, Sequence, torch.nn.Module] = "mean", normalize: bool = False,
                 root_weight: bool = True, project: bool = False, bias: bool = True,
                 aggr_kwargs: Optional[dict] = None, **kwargs):
        super().__init__()
        if kwargs.pop("node_dim", -2) != -2 or kwargs:
            raise TypeError(f"SAGEConv does not take PyG's MessagePassing option(s) "
                            f"{', '.join(sorted(kwargs) or ['node_dim other than -2'])}")
        src, dst = _channels(in_channels)
        self.in_channels, self.out_channels = in_channels, out_channels
        self.normalize, self.root_weight, self.project = normalize, root_weight, project
        if isinstance(aggr, (list, tuple)):
            self.aggr = [str(a) for a in aggr]
            self.aggr_module = MultiAggregation(aggr, **_multi_kwargs(aggr_kwargs))
        else:
            self.aggr = aggr if isinstance(aggr, str) else str(aggr)
            options = dict(aggr_kwargs or {})
            if isinstance(aggr, str) and aggr.lower() == "lstm":       # PyG's defaults: source width in and out
                options.setdefault("in_channels", src)
                options.setdefault("out_channels", src)
            self.aggr_module = resolve(aggr, **options)
        kind = getattr(self.aggr_module, "kind", None)
        self._fused = kind if type(self.aggr_module) in _FUSED else None   # one product, weighted by an adj_t
        width = out_channels_of(self.aggr_module, src) if src > 0 else -1
        if project:
            if src <= 0:
                raise ValueError("'SAGEConv' does not support lazy initialization with `project=True`")
            self.lin = torch.nn.Linear(src, src, bias=True)
        self.lin_l = _linear(width, out_channels, bias)
        self.lin_r = _linear(dst, out_channels, False) if root_weight else None
        self._cache = None            # (key, copy of edge_index, Graph)

    def reset_parameters(self) -> None:
        for m in (getattr(self, "lin", None), self.aggr_module, self.lin_l, self.lin_r):
            if m is not None and hasattr(m, "reset_parameters"):
                m.reset_parameters()

    def adjacency(self, edge_index: torch.Tensor, num_nodes: Union[int, Tuple[int, int]]):
        """``(A, reduce)``: the ``(n_target, n_source)`` aggregation matrix of edge_index
        (``num_nodes`` an int, or the pair ``(n_source, n_target)``) and the ``sparse_mm``
        reduction that gives ``aggr`` (``"sum"``, ``"mean"``, ``"max"`` or ``"min"``); for
        a list ``aggr`` a dict of them by the name of each of these among it.  Cached (see
        the class notes)."""
        n_src, n_dst = (num_nodes, num_nodes) if isinstance(num_nodes, int) else num_nodes
        graph = self._edge_graph(edge_index, n_src, n_dst, self._weight_like())
        if self._fused is not None:
            return graph.adjacency(self._fused)[:2]
        kinds = {getattr(a, "kind", None) for a in getattr(self.aggr_module, "aggrs", ())} - {None}
        return {k: graph.adjacency(k)[:2] for k in sorted(kinds)}

    def _weight_like(self) -> torch.Tensor:
        w = self.lin_l.weight
        return w if not isinstance(w, torch.nn.parameter.UninitializedParameter) else torch.empty(0)

    def _edge_graph(self, edge_index: torch.Tensor, n_src: int, n_dst: int, like: torch.Tensor) -> Graph:
        """The Graph of edge_index in like's dtype and on its device, cached (not under
        torch.compile, which builds it in its graph)."""
        if torch.compiler.is_compiling():
            return Graph(n_src, n_dst, like.dtype, like.device, edge_index=edge_index)
        key = (n_src, n_dst, like.dtype, like.device)
        return cached(self, key, edge_index,
                      lambda: Graph(n_src, n_dst, like.dtype, like.device, edge_index=edge_index.clone()))

    def _sparse_graph(self, adj, n_src: int, like: torch.Tensor) -> Graph:
        """The Graph of a sparse adj_t: its values weight a single sum, mean, max or min;
        every other aggregation reads its pattern alone (see the class notes)."""
        weights = None
        if self._fused is not None:
            weights = adj if isinstance(adj, SparseCSR) or adj.layout != torch.sparse_csc else as_sparse_csr(adj)
        P = as_sparse_csr(adj)
        return Graph(n_src, adj.shape[0], like.dtype, like.device, pattern=P, weights=weights)

    def _materialize(self, x_src, x_dst) -> None:
        """Give the lazy lin_l and lin_r (in_channels -1) their widths from the first inputs."""
        widths = [(self.lin_l, out_channels_of(self.aggr_module, x_src.shape[-1]))]
        if self.lin_r is not None and x_dst is not None:
            widths.append((self.lin_r, x_dst.shape[-1]))
        for lin, width in widths:
            if isinstance(lin, torch.nn.modules.lazy.LazyModuleMixin) and lin.has_uninitialized_params():
                lin(torch.zeros(0, width, dtype=lin.weight.dtype, device=lin.weight.device))

    def forward(self, x, edge_index, size: Optional[Tuple[Optional[int], Optional[int]]] = None) -> torch.Tensor:
        x_src, x_dst = tuple(x) if isinstance(x, (tuple, list)) and not isinstance(x, SparseCSR) else (x, x)
        if x_src is None:
            raise ValueError("x_source must be given (x = (x_source, x_target), only x_target may be None)")
        for t, name in ((x_src, "x_source"), (x_dst, "x_target")):
            if t is not None:
                _check_x(t, name if isinstance(x, (tuple, list)) else "x")
        if size is not None and (len(size) != 2 or not all(s is None or isinstance(s, int) for s in size)):
            raise ValueError(f"size must be a pair (n_source, n_target) of ints or None, got {size!r}")
        n_src = x_src.shape[-2]
        if size is not None and size[0] is not None and size[0] != n_src:
            raise ValueError(f"size[0] = {size[0]} source nodes but x_source has {n_src} rows")
        if self.project:
            x_src = F.relu(linear(x_src, self.lin.weight) + self.lin.bias)
        self._materialize(x_src, x_dst)
        like = x_src if not isinstance(x_src, SparseCSR) else x_src.values

        if is_sparse_adjacency(edge_index):
            shape = tuple(edge_index.shape)
            if size is not None and size[1] is not None and shape[0] != size[1]:
                raise ValueError(f"the adjacency must be (n_target, n_source) = ({size[1]}, {n_src}), got {shape}")
            n_dst = shape[0]
        else:
            check_edge_index(edge_index)
            if size is not None and size[1] is not None:
                n_dst = size[1]
            elif x_dst is not None:
                n_dst = x_dst.shape[-2]
            else:
                n_dst = node_count(edge_index[1], None)
            graph = self._edge_graph(edge_index, n_src, n_dst, like)

        root = self.lin_r is not None and x_dst is not None
        if root and n_dst != x_dst.shape[-2]:
            raise ValueError(f"the adjacency has {n_dst} target rows but x has {x_dst.shape[-2]} target "
                             f"nodes (x_i is needed for the root weight)")
        if is_sparse_adjacency(edge_index):
            if len(shape) == 2 and shape[1] != n_src:
                raise ValueError(f"the adjacency has {shape[1]} source columns but x_source has {n_src} rows "
                                 f"(adj_t is (n_target, n_source), PyG's transposed convention)")
            graph = self._sparse_graph(edge_index, n_src, like)
        if self._fused is not None:
            out, root = self._single(graph, x_src, x_dst, root)
        else:
            xs = to_dense_features(x_src) if is_sparse(x_src) else x_src
            out = F.linear(run(self.aggr_module, graph, xs), self.lin_l.weight)
        if root:
            out = out + linear(x_dst, self.lin_r.weight)
        if self.lin_l.bias is not None:
            out = out + self.lin_l.bias
        return F.normalize(out, p=2.0, dim=-1) if self.normalize else out

    def _single(self, graph: Graph, x_src, x_dst, root: bool):
        """(W_l · aggr(x_src), whether the root term is still to add) for one aggregation
        that is a product with the adjacency."""
        kind, Wl = self._fused, self.lin_l.weight
        aggr = lambda h: product(graph, kind, h)       # noqa: E731
        transform_first = kind in ("sum", "mean") and (is_sparse(x_src) or self.out_channels <= Wl.shape[1])
        if not transform_first:
            xs = to_dense_features(x_src) if is_sparse(x_src) else x_src
            return F.linear(by_columns(aggr, xs), Wl), root
        if root and x_src is x_dst:          # one product with both weights: x [W_l^T, W_r^T]
            H = linear_t(x_src, torch.cat([Wl.t(), self.lin_r.weight.t()], 1))
            Hl, Hr = H.split([self.out_channels] * 2, -1)   # (its backward concatenates: no zero-filled H)
            return by_columns(aggr, Hl) + Hr, False
        return by_columns(aggr, linear(x_src, Wl)), root

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels}, aggr={self.aggr})"


def _check_x(x, name: str) -> None:
    """x: a tensor or SparseCSR, 2-D (nodes, features), or dense (batch, nodes, features)."""
    if isinstance(x, torch.Tensor) and x.layout == torch.strided:
        if x.dim() not in (2, 3):
            raise ValueError(f"{name} must be 2-D (nodes, features) or 3-D (batch, nodes, features), got shape "
                             f"{tuple(x.shape)}")
        return
    check_features(x, name)


def _multi_kwargs(aggr_kwargs: Optional[dict]) -> dict:
    """MultiAggregation's options from PyG's aggr_kwargs for a list aggr (ValueError for others)."""
    kwargs = dict(aggr_kwargs or {})
    unknown = set(kwargs) - {"mode", "mode_kwargs", "aggrs_kwargs"}
    if unknown:
        raise ValueError(f"aggr_kwargs {sorted(unknown)} not supported for a list aggr (only mode, mode_kwargs, "
                         f"aggrs_kwargs)")
    return kwargs


def sage_adjacency(edge_index: torch.Tensor, num_nodes: Union[int, Tuple[int, int]], aggr: str = "mean",
                   dtype: torch.dtype = torch.float32):
    r"""``(A, reduce)`` with ``sparse_mm(A, x, reduce)`` PyG's GraphSAGE aggregation of
    ``x`` over ``edge_index`` (2, E), messages from ``edge_index[0]`` to ``edge_index[1]``.

    ``A`` is the ``(n_target, n_source)`` SparseCSR (``num_nodes`` an int or the pair
    ``(n_source, n_target)``), repeated edges merged: for ``"sum"`` (or ``"add"``) its
    values are the edge counts (reduce ``"sum"``); for ``"mean"`` the counts divided by
    the row's total (reduce ``"sum"``: a repeated edge counts as often as it is given, as
    in PyG); for ``"max"`` and ``"min"`` ones (reduce ``"amax"``, ``"amin"``).
    ``ValueError`` for a malformed ``edge_index`` or an ``aggr`` not one of these.

    >>> A, reduce = sage_adjacency(torch.tensor([[0, 0, 2], [1, 1, 1]]), 3, "mean")
    >>> A.to_torch().to_dense(), reduce
    (tensor([[0.0000, 0.0000, 0.0000],
            [0.6667, 0.0000, 0.3333],
            [0.0000, 0.0000, 0.0000]]), 'sum')
    """
    if not isinstance(aggr, str) or aggr not in REDUCES and aggr != "add":
        raise ValueError(f"sage_adjacency: aggr must be 'mean', 'max', 'sum' (or 'add') or 'min', got {aggr!r}")
    check_edge_index(edge_index)
    n_src, n_dst = (num_nodes, num_nodes) if isinstance(num_nodes, int) else num_nodes
    if n_src < 0 or n_dst < 0:
        raise ValueError(f"num_nodes must be non-negative, got {num_nodes}")
    graph = Graph(n_src, n_dst, dtype, edge_index.device, edge_index=edge_index)
    return graph.adjacency("sum" if aggr == "add" else aggr)[:2]
