"""Aggregations by PyG's names (``resolve``), an aggregation module of the user's (``run``:
PyG's calling convention), and several combined as PyG's ``MultiAggregation`` does
(``MultiAggregation``: the parameters with PyG's names, so a layer's ``state_dict`` moves
between ours and PyG's as it is).

A module that is not one of ours (PyG's ``MLPAggregation``, say: any ``torch.nn.Module``
taking PyG's ``Aggregation`` call) is called as PyG's ``MessagePassing`` calls it, on the
gathered messages ``x[src]`` (edges x features, as in PyG), ``index`` the messages'
targets, ``dim_size`` the number of targets, ``dim=-2``.  Nothing here imports
``torch_geometric``.
"""
import copy
from typing import List, Optional

import torch
from torch import Tensor

from .basic import (Aggregation, MaxAggregation, MeanAggregation, MinAggregation, PowerMeanAggregation,
                    StdAggregation, SumAggregation, VarAggregation)
from .graph import Graph
from .lstm import LSTMAggregation
from .softmax import SoftmaxAggregation

#: the aggregations by PyG's names
AGGREGATIONS = {"sum": SumAggregation, "add": SumAggregation, "mean": MeanAggregation, "max": MaxAggregation,
                "min": MinAggregation, "var": VarAggregation, "std": StdAggregation, "softmax": SoftmaxAggregation,
                "powermean": PowerMeanAggregation, "lstm": LSTMAggregation}
NAMES = "'sum' (or 'add'), 'mean', 'max', 'min', 'var', 'std', 'softmax', 'powermean', 'lstm'"
#: PyG MultiAggregation's combine modes
COMBINE_MODES = ("cat", "proj", "attn", "sum", "mean", "max", "min", "logsumexp", "std", "var")


def is_aggregation_module(aggr) -> bool:
    """Is aggr a module to aggregate with: one of ours, or one taking PyG's call."""
    return isinstance(aggr, torch.nn.Module)


def resolve(aggr, **kwargs) -> torch.nn.Module:
    """The aggregation named aggr (PyG's names, also as its class names: "softmax",
    "SoftmaxAggregation", "softmax_aggregation") with kwargs (PyG's options for it), or
    aggr itself where it is a module (then kwargs must be empty).  ValueError for another
    name, TypeError for an option it does not take."""
    if is_aggregation_module(aggr):
        if kwargs:
            raise ValueError(f"options {sorted(kwargs)} are for an aggregation given by name, not a module")
        return aggr
    key = aggr.lower().replace("_", "") if isinstance(aggr, str) else None
    if key is not None and key.endswith("aggregation") and key != "aggregation":
        key = key[:-len("aggregation")]
    if key not in AGGREGATIONS:
        raise ValueError(f"aggr must be one of {NAMES}, a torch.nn.Module aggregation (PyG's Aggregation call), or "
                         f"a list of them; got {aggr!r} (PyG's other named aggregations, e.g. 'median', 'mul', "
                         f"'set2set', are not supported: pass PyG's module instead)")
    cls = AGGREGATIONS[key]
    try:
        return cls(**kwargs)
    except TypeError as e:
        raise TypeError(f"aggregation {aggr!r} ({cls.__name__}) does not take these options {sorted(kwargs)}: "
                        f"{e}") from None


def out_channels(module: torch.nn.Module, in_channels: int) -> int:
    """The width of module's output for in_channels-wide messages (its get_out_channels where it has one)."""
    get = getattr(module, "get_out_channels", None)
    return get(in_channels) if callable(get) else in_channels


def run(module: torch.nn.Module, graph: Graph, x: Tensor) -> Tensor:
    """module's aggregation of x over graph: ours by forward(graph, x), any other by
    PyG's call on the gathered messages (module notes)."""
    if isinstance(module, (Aggregation, MultiAggregation)):
        return module(graph, x)
    src, dst = graph.messages()
    return module(x.index_select(-2, src), dst, ptr=None, dim_size=graph.n_dst, dim=-2)


class _PerAggregationLinear(torch.nn.Module):
    """One Linear per aggregation, ``lins[str(i)]`` (PyG's ``HeteroDictLinear``'s names)."""

    def __init__(self, in_channels: List[int], out_channels: int):
        super().__init__()
        self.lins = torch.nn.ModuleDict({str(i): torch.nn.Linear(c, out_channels) for i, c in enumerate(in_channels)})

    def reset_parameters(self) -> None:
        for lin in self.lins.values():
            lin.reset_parameters()

    def forward(self, xs: List[Tensor]) -> List[Tensor]:
        return [self.lins[str(i)](x) for i, x in enumerate(xs)]


class MultiAggregation(torch.nn.Module):
    """Several aggregations (``aggrs``: names or modules, ``aggrs_kwargs`` one dict of
    options each) combined by ``mode``, as PyG's ``MultiAggregation``:

    * ``"cat"``: the outputs side by side;
    * ``"proj"``: ``lin``, a Linear (``mode_kwargs``: ``in_channels``, an int for each
      aggregation or one for all, ``out_channels``, and Linear's options) of that;
    * ``"attn"``: each output through its own Linear to ``out_channels``
      (``lin_heads.lins[str(i)]``), then, over the aggregations as a sequence for each
      node, ``multihead_attn``, a :class:`torch.nn.MultiheadAttention` (``mode_kwargs``
      ``num_heads``, default 1, and its options), whose outputs are averaged;
    * ``"sum"``, ``"mean"``, ``"max"``, ``"min"``, ``"logsumexp"``, ``"std"``, ``"var"``:
      that torch reduction over the stacked outputs (``std`` and ``var`` unbiased).

    One aggregation is passed through as it is."""

    def __init__(self, aggrs, aggrs_kwargs: Optional[List[dict]] = None, mode: str = "cat",
                 mode_kwargs: Optional[dict] = None):
        super().__init__()
        if not isinstance(aggrs, (list, tuple)) or len(aggrs) == 0:
            raise ValueError(f"aggr must not be an empty list, got {aggrs!r}")
        if aggrs_kwargs is None:
            aggrs_kwargs = [{}] * len(aggrs)
        if not isinstance(aggrs_kwargs, (list, tuple)) or len(aggrs_kwargs) != len(aggrs):
            raise ValueError(f"aggrs_kwargs must have one dict per aggregation ({len(aggrs)}), got {aggrs_kwargs!r}")
        self.aggrs = torch.nn.ModuleList([resolve(a, **(k or {})) for a, k in zip(aggrs, aggrs_kwargs)])
        if mode not in COMBINE_MODES:
            raise ValueError(f"the combine mode of several aggregations must be one of {', '.join(COMBINE_MODES)}; "
                             f"got {mode!r}")
        kwargs = copy.copy(mode_kwargs) or {}
        self.mode = mode
        self.in_channels, self.out_channels = kwargs.pop("in_channels", None), kwargs.pop("out_channels", None)
        if mode in ("proj", "attn"):
            if len(aggrs) == 1:
                raise ValueError(f"combine mode {mode!r} needs several aggregations")
            if self.in_channels is None or self.out_channels is None:
                raise ValueError(f"combine mode {mode!r} needs mode_kwargs in_channels and out_channels")
            if isinstance(self.in_channels, int):
                self.in_channels = [self.in_channels] * len(aggrs)
            if len(self.in_channels) != len(aggrs):
                raise ValueError(f"mode_kwargs in_channels must be an int or one per aggregation ({len(aggrs)}), "
                                 f"got {self.in_channels!r}")
            if mode == "proj":
                self.lin = torch.nn.Linear(sum(self.in_channels), self.out_channels, **kwargs)
            else:
                self.lin_heads = _PerAggregationLinear(self.in_channels, self.out_channels)
                self.multihead_attn = torch.nn.MultiheadAttention(self.out_channels, kwargs.pop("num_heads", 1),
                                                                  **kwargs)
        elif kwargs or self.in_channels is not None or self.out_channels is not None:
            raise ValueError(f"combine mode {mode!r} takes no mode_kwargs, got {sorted(mode_kwargs)}")

    def reset_parameters(self) -> None:
        for aggr in self.aggrs:
            if hasattr(aggr, "reset_parameters"):
                aggr.reset_parameters()
        if self.mode == "proj":
            self.lin.reset_parameters()
        elif self.mode == "attn":
            self.lin_heads.reset_parameters()
            self.multihead_attn._reset_parameters()

    def get_out_channels(self, in_channels: int) -> int:
        if self.out_channels is not None:
            return self.out_channels
        widths = [out_channels(a, in_channels) for a in self.aggrs]
        return sum(widths) if self.mode == "cat" else widths[0]

    def forward(self, graph: Graph, x: Tensor) -> Tensor:
        return self.combine([run(a, graph, x) for a in self.aggrs])

    def combine(self, outs: List[Tensor]) -> Tensor:
        if len(outs) == 1:
            return outs[0]
        if self.mode == "cat":
            return torch.cat(outs, dim=-1)
        if self.mode == "proj":
            return self.lin(torch.cat(outs, dim=-1))
        if self.mode == "attn":
            h = torch.stack(self.lin_heads(outs), dim=0)           # (aggregations, nodes, out): a sequence per node
            return self.multihead_attn(h, h, h)[0].mean(dim=0)
        stacked = torch.stack(outs, dim=0)
        if self.mode in ("max", "min"):
            return getattr(torch, self.mode)(stacked, dim=0).values
        return getattr(torch, self.mode)(stacked, dim=0)

    def __repr__(self) -> str:
        aggrs = "".join(f"  {a},\n" for a in self.aggrs)
        return f"{type(self).__name__}([\n{aggrs}], mode={self.mode})"
