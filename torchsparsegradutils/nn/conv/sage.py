"""``SAGEConv``, GraphSAGE (Hamilton et al.) as PyTorch Geometric has it, and
``sage_adjacency``, the aggregation matrix and ``sparse_mm`` reduction of its ``aggr``."""
from typing import Dict, Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F

from ..._core.sparse_csr import SparseCSR
from ..._core.structures import coo_structure
from ...sparse_matmul import sparse_mm
from .._aggr import AGGR_REDUCES, AggrCombine, aggregate
from .._features import check_features, is_sparse, linear, linear_t, to_dense_features
from ._edge_index import as_sparse_csr, cached, check_edge_index, is_sparse_adjacency, moved, node_count

__all__ = ["SAGEConv", "sage_adjacency"]

_AGGR_NAMES = "'mean', 'max', 'sum' (or 'add'), 'min'"


def _aggr_name(aggr) -> str:
    """aggr ("add" read as "sum"), ValueError for one this module does not run."""
    if not isinstance(aggr, str) or aggr not in AGGR_REDUCES:
        what = f"an {type(aggr).__name__} module" if isinstance(aggr, torch.nn.Module) else repr(aggr)
        raise ValueError(f"aggr must be one of {_AGGR_NAMES} or a list of them, got {what} (PyG's other "
                         f"aggregations, e.g. 'lstm', 'std', 'softmax' or an Aggregation module, are not supported)")
    return "sum" if aggr == "add" else aggr


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
    * ``aggr`` (default ``"mean"``): ``"mean"``, ``"max"``, ``"sum"`` (or ``"add"``),
      ``"min"``, or a list of them, aggregated separately and combined as PyG's
      ``MultiAggregation`` does (``aggr_kwargs``).  PyG's other aggregations (``"lstm"``,
      ``"std"``, ``"softmax"``, an ``Aggregation`` module, ...) raise ValueError.
    * ``normalize`` (default False): L2-normalize each output row.
    * ``root_weight`` (default True): add ``W_r x_i`` (``lin_r``, no bias).
    * ``project`` (default False): first replace the source features by
      ``relu(W_3 x_j + b_3)`` (``lin``, ``(source, source)``, with a bias; the root term
      keeps the raw ``x_i``); ValueError with a lazy source width, as in PyG.
    * ``bias`` (default True): ``lin_l``'s bias ``b``.
    * ``aggr_kwargs`` (dict, for a list ``aggr`` only): PyG's ``MultiAggregation``
      options: ``mode`` (default ``"cat"``: concatenated, so ``lin_l`` takes
      ``len(aggr) * source`` features; ``"sum"``, ``"mean"``, ``"max"``, ``"min"``:
      element-wise over the aggregations; ``"proj"``: a Linear ``aggr_module.lin`` from
      the concatenation to ``mode_kwargs["out_channels"]``), ``mode_kwargs`` and
      ``aggrs_kwargs`` (a list of empty dicts: these aggregations take no options).
      PyG's ``"attn"``, ``"logsumexp"``, ``"std"`` and ``"var"`` modes raise ValueError,
      as does any other of PyG's ``MessagePassing`` keyword (``flow``, ``node_dim``, ...).

    The parameters are PyG's: ``lin_l`` (with the bias), ``lin_r`` (absent when
    ``root_weight=False``), ``lin`` (``project=True``) and ``aggr_module.lin`` (mode
    ``"proj"``), all :class:`torch.nn.Linear`, so a ``state_dict`` moves between this layer
    and PyG's as it is.  ``repr`` is PyG's, ``SAGEConv(8, 32, aggr=mean)``.

    ``forward(x, edge_index, size=None)``: ``x`` is ``(n, F)``, dense, a torch sparse
    tensor or a :class:`SparseCSR` (see :mod:`torchsparsegradutils.nn`), or a pair
    ``(x_source, x_target)`` for a bipartite graph, ``x_target`` None to leave out the
    root term; ``size`` is ``(n_source, n_target)`` (by default the rows of ``x_source``
    and of ``x_target``, or without the latter the largest target id + 1).
    ``edge_index`` is either:

    * a (2, E) tensor, messages ``edge_index[0] -> edge_index[1]`` (PyG's direction),
      built into the ``(n_target, n_source)`` adjacency on first use and cached as
      :class:`GCNConv`'s is (while an ``edge_index`` of the same contents comes back, for
      the same node counts, dtype and device).  The aggregation is PyG's, repeated edges
      included: ``"sum"`` and ``"mean"`` count an edge given twice twice (``"mean"``
      divides by the number of edges into ``i``), ``"max"`` and ``"min"`` see it once;
      a node without neighbours aggregates to 0;
    * a sparse ``adj_t`` (PyG's transposed convention: ``(n_target, n_source)``, row
      ``i`` holding ``i``'s in-neighbours), a torch sparse COO, CSR or CSC tensor or a
      :class:`SparseCSR` (what a compiled model should get).  As in PyG's ``torch.sparse``
      route, a single ``aggr`` is ``sparse_mm(A, x, reduce)`` with reduce ``"sum"``,
      ``"mean"``, ``"amax"`` or ``"amin"``: ``A``'s values weight the messages (and get
      their gradient), ``"mean"`` divides by the row's number of stored entries.  A list
      ``aggr`` reads the pattern alone, each stored entry one message, as PyG (which
      then runs its edge-wise route) does.  (torch_sparse's ``SparseTensor`` is not
      taken.)

    For a single ``"mean"`` or ``"sum"`` the layer multiplies by the weights first when
    that is cheaper (always for a sparse ``x``: one ``sparse_mm(x, [W_l; W_r]^T)``), then
    aggregates the ``out_channels``-wide rows; ``"max"``, ``"min"`` and a list aggregate
    ``x`` itself (a sparse ``x`` is made dense for them).  Every aggregation is one
    ``sparse_mm`` (or :func:`~torchsparsegradutils.nn._aggr.max_aggregation`) over the
    adjacency: no edges x features temporary.

    ``"max"``'s and ``"min"``'s gradient is PyG's: ``G[i, k]`` split evenly among the
    messages equal to the extremum (an edge listed twice is two), and, where it is
    exactly 0, one more share for the 0 PyG's scatter starts from, dropped;
    ``sparse_mm``'s ``"amax"`` gives it all to the first entry of a tie instead
    (``torch.sparse.mm``'s rule).  See :mod:`torchsparsegradutils.nn._aggr`.

    Not PyG's: no TorchScript (``torch.jit.script``), no ``MessagePassing`` hooks,
    explain or ``decomposed_layers``, no ``(batch, n, F)`` features.

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
                 aggr: Union[str, Sequence[str]] = "mean", normalize: bool = False, root_weight: bool = True,
                 project: bool = False, bias: bool = True, aggr_kwargs: Optional[dict] = None, **kwargs):
        super().__init__()
        if kwargs:
            raise TypeError(f"SAGEConv does not take PyG's MessagePassing option(s) {', '.join(sorted(kwargs))}")
        src, dst = _channels(in_channels)
        self.in_channels, self.out_channels = in_channels, out_channels
        self.aggr, self.normalize, self.root_weight, self.project = aggr, normalize, root_weight, project
        if isinstance(aggr, (list, tuple)):
            if len(aggr) == 0:
                raise ValueError("aggr must not be an empty list")
            self._kinds = tuple(_aggr_name(a) for a in aggr)
            self.aggr_module = AggrCombine(len(aggr), **_combine_kwargs(aggr_kwargs, len(aggr)))
            width = self.aggr_module.out_channels(src) if src > 0 else -1
        else:
            self._kinds = (_aggr_name(aggr),)
            if aggr_kwargs:
                raise ValueError(f"aggr_kwargs is for a list aggr; {aggr!r} takes none, got {sorted(aggr_kwargs)}")
            self.aggr_module, width = None, src
        if project:
            if src <= 0:
                raise ValueError("'SAGEConv' does not support lazy initialization with `project=True`")
            self.lin = torch.nn.Linear(src, src, bias=True)
        self.lin_l = _linear(width, out_channels, bias)
        self.lin_r = _linear(dst, out_channels, False) if root_weight else None
        self._cache = None            # (key, copy of edge_index, {aggr: (SparseCSR, reduce, message counts)})

    def reset_parameters(self) -> None:
        for m in (getattr(self, "lin", None), self.aggr_module, self.lin_l, self.lin_r):
            if m is not None:
                m.reset_parameters()

    def adjacency(self, edge_index: torch.Tensor, num_nodes: Union[int, Tuple[int, int]]):
        """``(A, reduce)``: the ``(n_target, n_source)`` aggregation matrix of edge_index
        (``num_nodes`` an int, or the pair ``(n_source, n_target)``) and the
        ``sparse_mm`` reduction that gives ``aggr``; for a list ``aggr`` a dict of them by
        aggregation name.  Cached (see the class notes)."""
        n_src, n_dst = (num_nodes, num_nodes) if isinstance(num_nodes, int) else num_nodes
        plans = self._aggregations(edge_index, (n_src, n_dst), self._weight_like())
        if self.aggr_module is None:
            return plans[self._kinds[0]][:2]
        return {k: p[:2] for k, p in plans.items()}

    def _weight_like(self) -> torch.Tensor:
        w = self.lin_l.weight
        return w if not isinstance(w, torch.nn.parameter.UninitializedParameter) else torch.empty(0)

    def _aggregations(self, edge_index: torch.Tensor, num_nodes: Tuple[int, int], like: torch.Tensor):
        """:func:`_aggregations` of edge_index for the layer's aggregations, in like's
        dtype and on its device, cached."""
        kinds = tuple(sorted(set(self._kinds)))
        key = (*num_nodes, like.dtype, like.device, kinds)

        def build():
            plans = _aggregations(edge_index, num_nodes, kinds, like.dtype)
            return {k: (moved(S, like.device), r, None if m is None else m.to(like.device))
                    for k, (S, r, m) in plans.items()}
        return cached(self, key, edge_index, build)

    def _sparse_plans(self, adj, like: torch.Tensor) -> Dict[str, tuple]:
        """{aggr: (A, reduce, None)} on a sparse adjacency (see the class notes)."""
        if self.aggr_module is None:
            A = adj if isinstance(adj, SparseCSR) or adj.layout != torch.sparse_csc else as_sparse_csr(adj)
            return {self._kinds[0]: (A, AGGR_REDUCES[self._kinds[0]], None)}
        P = as_sparse_csr(adj)
        P = P._replace(values=torch.ones(P.values.shape, dtype=like.dtype, device=like.device))
        return {k: (P, AGGR_REDUCES[k], None) for k in set(self._kinds)}

    def _materialize(self, x_src, x_dst) -> None:
        """Give the lazy lin_l and lin_r (in_channels -1) their widths from the first inputs."""
        widths = [(self.lin_l, self._aggr_width(x_src.shape[-1]))]
        if self.lin_r is not None and x_dst is not None:
            widths.append((self.lin_r, x_dst.shape[-1]))
        for lin, width in widths:
            if isinstance(lin, torch.nn.modules.lazy.LazyModuleMixin) and lin.has_uninitialized_params():
                lin(torch.zeros(0, width, dtype=lin.weight.dtype, device=lin.weight.device))

    def _aggr_width(self, in_width: int) -> int:
        return in_width if self.aggr_module is None else self.aggr_module.out_channels(in_width)

    def forward(self, x, edge_index, size: Optional[Tuple[Optional[int], Optional[int]]] = None) -> torch.Tensor:
        x_src, x_dst = tuple(x) if isinstance(x, (tuple, list)) and not isinstance(x, SparseCSR) else (x, x)
        if x_src is None:
            raise ValueError("x_source must be given (x = (x_source, x_target), only x_target may be None)")
        for t, name in ((x_src, "x_source"), (x_dst, "x_target")):
            if t is not None:
                check_features(t, name if isinstance(x, (tuple, list)) else "x")
        if size is not None and (len(size) != 2 or not all(s is None or isinstance(s, int) for s in size)):
            raise ValueError(f"size must be a pair (n_source, n_target) of ints or None, got {size!r}")
        n_src = x_src.shape[0]
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
                n_dst = x_dst.shape[0]
            else:
                n_dst = node_count(edge_index[1], None)
            plans = self._aggregations(edge_index, (n_src, n_dst), like)

        root = self.lin_r is not None and x_dst is not None
        if root and n_dst != x_dst.shape[0]:
            raise ValueError(f"the adjacency has {n_dst} target rows but x has {x_dst.shape[0]} target "
                             f"nodes (x_i is needed for the root weight)")
        if is_sparse_adjacency(edge_index):
            if len(shape) == 2 and shape[1] != n_src:
                raise ValueError(f"the adjacency has {shape[1]} source columns but x_source has {n_src} rows "
                                 f"(adj_t is (n_target, n_source), PyG's transposed convention)")
            plans = self._sparse_plans(edge_index, like)
        if self.aggr_module is None:
            out, root = self._single(plans[self._kinds[0]], x_src, x_dst, root)
        else:
            xs = to_dense_features(x_src) if is_sparse(x_src) else x_src
            h = self.aggr_module([aggregate(A, xs, reduce, messages)
                                  for A, reduce, messages in (plans[k] for k in self._kinds)])
            out = F.linear(h, self.lin_l.weight)
        if root:
            out = out + linear(x_dst, self.lin_r.weight)
        if self.lin_l.bias is not None:
            out = out + self.lin_l.bias
        return F.normalize(out, p=2.0, dim=-1) if self.normalize else out

    def _single(self, plan, x_src, x_dst, root: bool):
        """(W_l · aggr(x_src), whether the root term is still to add) for one aggregation."""
        A, reduce, messages = plan
        Wl = self.lin_l.weight
        transform_first = reduce in ("sum", "mean") and (is_sparse(x_src) or self.out_channels <= Wl.shape[1])
        if not transform_first:
            xs = to_dense_features(x_src) if is_sparse(x_src) else x_src
            return F.linear(aggregate(A, xs, reduce, messages), Wl), root
        if root and x_src is x_dst:          # one product with both weights: x [W_l^T, W_r^T]
            H = linear_t(x_src, torch.cat([Wl.t(), self.lin_r.weight.t()], 1))
            Hl, Hr = H.split([self.out_channels] * 2, 1)   # (its backward concatenates: no zero-filled H)
            return sparse_mm(A, Hl, reduce) + Hr, False
        return sparse_mm(A, linear(x_src, Wl), reduce), root

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels}, aggr={self.aggr})"


def _combine_kwargs(aggr_kwargs: Optional[dict], num_aggrs: int) -> dict:
    """AggrCombine's arguments from PyG's aggr_kwargs for a list aggr (ValueError for the
    options these aggregations lack)."""
    kwargs = dict(aggr_kwargs or {})
    aggrs_kwargs = kwargs.pop("aggrs_kwargs", None)
    if aggrs_kwargs is not None:
        if len(aggrs_kwargs) != num_aggrs:
            raise ValueError(f"aggrs_kwargs must have one dict per aggregation ({num_aggrs}), got {len(aggrs_kwargs)}")
        if any(aggrs_kwargs):
            raise ValueError(f"aggrs_kwargs: the aggregations {_AGGR_NAMES} take no options, got {aggrs_kwargs}")
    unknown = set(kwargs) - {"mode", "mode_kwargs"}
    if unknown:
        raise ValueError(f"aggr_kwargs {sorted(unknown)} not supported (only mode, mode_kwargs, aggrs_kwargs)")
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
    ``ValueError`` for a malformed ``edge_index`` or ``aggr``.

    >>> A, reduce = sage_adjacency(torch.tensor([[0, 0, 2], [1, 1, 1]]), 3, "mean")
    >>> A.to_torch().to_dense(), reduce
    (tensor([[0.0000, 0.0000, 0.0000],
            [0.6667, 0.0000, 0.3333],
            [0.0000, 0.0000, 0.0000]]), 'sum')
    """
    kind = _aggr_name(aggr)
    S, reduce, _ = _aggregations(edge_index, num_nodes, (kind,), dtype)[kind]
    return S, reduce


def _aggregations(edge_index: torch.Tensor, num_nodes: Union[int, Tuple[int, int]], kinds: Sequence[str],
                  dtype: torch.dtype) -> Dict[str, tuple]:
    """{aggr: (A, reduce, messages)} for each aggregation name in kinds ("sum", "mean",
    "max", "min"), from one pass over edge_index: sage_adjacency's (A, reduce), and for
    "max" and "min" the number of messages at each of A's entries (an edge given k times
    is k messages, each a tie of the others for PyG's gradient; None for "mean" and
    "sum", whose values count them)."""
    check_edge_index(edge_index)
    n_src, n_dst = (num_nodes, num_nodes) if isinstance(num_nodes, int) else num_nodes
    if n_src < 0 or n_dst < 0:
        raise ValueError(f"num_nodes must be non-negative, got {num_nodes}")
    device = edge_index.device
    s = coo_structure(edge_index.flip(0).long().contiguous(), (n_dst, n_src))   # ValueError: id out of range
    rows, cols = s.indices
    counts = s.values_of(torch.ones(edge_index.shape[1], dtype=dtype, device=device))
    plans, ones = {}, None
    for kind in kinds:
        if kind in ("max", "min"):
            if ones is None:
                ones = SparseCSR(s.ptr, cols, torch.ones(rows.shape[0], dtype=dtype, device=device), (n_dst, n_src))
            plans[kind] = (ones, AGGR_REDUCES[kind], counts)
        elif kind == "mean":
            deg = counts.new_zeros(n_dst).index_add(0, rows, counts)
            plans[kind] = (SparseCSR(s.ptr, cols, counts / deg[rows], (n_dst, n_src)), "sum", None)
        else:
            plans[kind] = (SparseCSR(s.ptr, cols, counts, (n_dst, n_src)), "sum", None)
    return plans
