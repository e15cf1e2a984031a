"""The layers' aggregations, laid out as PyG's ``torch_geometric.nn.aggr`` by kind:
``graph.py`` (``Graph``: one call's messages and what the aggregations build from them),
``basic.py`` (sum, mean, max with PyG's tie gradient, min, var, std, powermean: products
with the adjacency), ``softmax.py`` (softmax, on the graph attention kernels),
``lstm.py`` (LSTM, a dense padded batch), ``multi.py`` (names, modules of the user's
called as PyG calls them, and ``MultiAggregation``'s combine modes).  Private: the layers
take these by PyG's names (``aggr="softmax"``) and options (``aggr_kwargs``).
"""
from .basic import (Aggregation, MaxAggregation, MeanAggregation, MinAggregation, PowerMeanAggregation,
                    StdAggregation, SumAggregation, VarAggregation, aggregate, by_columns, max_aggregation, product)
from .graph import REDUCES, Graph
from .lstm import LSTMAggregation
from .multi import MultiAggregation, is_aggregation_module, out_channels, resolve, run
from .softmax import SoftmaxAggregation

__all__ = ["Aggregation", "Graph", "LSTMAggregation", "MaxAggregation", "MeanAggregation", "MinAggregation",
           "MultiAggregation", "PowerMeanAggregation", "REDUCES", "SoftmaxAggregation", "StdAggregation",
           "SumAggregation", "VarAggregation", "aggregate", "by_columns", "is_aggregation_module", "max_aggregation",
           "out_channels", "product", "resolve", "run"]
