"""``LSTMAggregation``, PyG's of that name: each target's messages read as a sequence, in
message order, by a :class:`torch.nn.LSTM`, whose last output is the aggregation.

It is inherently dense: the sequences are one padded batch ``(n_dst, L, F)``, ``L`` the
most messages of a target, shorter ones followed by zero rows as PyG's
``to_dense_batch`` pads them (the LSTM runs over the padding too, as in PyG), made by one
gather from ``x`` with a zero row appended (no separate edges x features array).  The
messages must come grouped by target in increasing order (ValueError otherwise, PyG's
"'index' tensor is not sorted"), and ``x`` must be 2-D.
"""
import torch
from torch import Tensor

from .basic import Aggregation
from .graph import Graph


class LSTMAggregation(Aggregation):
    """PyG's ``LSTMAggregation(in_channels, out_channels, **kwargs)``: the parameters are
    ``lstm``'s (``torch.nn.LSTM(in_channels, out_channels, batch_first=True, **kwargs)``),
    with PyG's names (``lstm.weight_ih_l0``, ...).  Not permutation invariant."""

    def __init__(self, in_channels: int, out_channels: int, **kwargs):
        super().__init__()
        if not (isinstance(in_channels, int) and in_channels > 0 and isinstance(out_channels, int)
                and out_channels > 0):
            raise ValueError(f"LSTMAggregation needs positive int in_channels and out_channels (no lazy width), got "
                             f"{in_channels!r} and {out_channels!r}")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.lstm = torch.nn.LSTM(in_channels, out_channels, batch_first=True, **kwargs)

    def reset_parameters(self) -> None:
        self.lstm.reset_parameters()

    def get_out_channels(self, in_channels: int) -> int:
        return self.out_channels

    def forward(self, graph: Graph, x: Tensor) -> Tensor:
        if x.dim() != 2:
            raise ValueError(f"LSTMAggregation needs a 2-D x (nodes, features), got shape {tuple(x.shape)}")
        index = graph.padded()
        rows = torch.cat([x, x.new_zeros(1, x.shape[1])]).index_select(0, index.reshape(-1))
        return self.lstm(rows.view(*index.shape, x.shape[1]))[0][:, -1]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels})"
