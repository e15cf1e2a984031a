"""``SoftmaxAggregation``, PyG's of that name, on the fused graph attention kernels.

For each feature ``k`` of the messages ``x_j`` into target ``i``, PyG computes
``sum_j softmax_j(t x_jk) x_jk``, the softmax over ``i``'s messages.  That is graph
attention (:func:`~torchsparsegradutils.graph_attention`) with one head per feature,
each one feature wide: source scores ``t x``, target scores 0 and LeakyReLU's slope 1 (the
identity), so the C kernels (Triton on CUDA) run it row by row and the gradients to ``x``
(through both the weights and the weighted values) and to ``t`` are theirs.  An edge
given ``k`` times is one entry with the additive score ``log k`` (its share is that of
``k`` copies).  The kernels keep the weights ``alpha`` (entries x features) for the
backward; no other edges x features array is made (PyG makes several: the gathered
messages, their scores, the softmax and the weighted messages).
"""
from typing import Union

import torch
from torch import Tensor

from ...graph_attention import graph_attention
from .basic import Aggregation
from .graph import Graph


class SoftmaxAggregation(Aggregation):
    """PyG's ``SoftmaxAggregation(t, learn, semi_grad, channels)`` (module notes): ``t``
    the initial inverse temperature, a parameter ``t`` of ``channels`` values (one per
    feature, or one for all) when ``learn``; ``semi_grad`` (with ``t`` fixed) computes the
    softmax weights without gradient, so ``x`` gets only the weighted sum's (the scores
    go in detached)."""

    def __init__(self, t: float = 1.0, learn: bool = False, semi_grad: bool = False, channels: int = 1):
        super().__init__()
        if learn and semi_grad:
            raise ValueError("SoftmaxAggregation: semi_grad cannot be used with a learnable t (learn=True)")
        if not learn and channels != 1:
            raise ValueError("SoftmaxAggregation: channels other than 1 need learn=True")
        self._init_t, self.learn, self.semi_grad, self.channels = t, learn, semi_grad, channels
        self.t: Union[float, Tensor] = torch.nn.Parameter(torch.empty(channels)) if learn else t
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if isinstance(self.t, Tensor):
            with torch.no_grad():
                self.t.fill_(self._init_t)

    def forward(self, graph: Graph, x: Tensor) -> Tensor:
        if self.channels != 1 and x.dim() != 2:
            raise ValueError(f"SoftmaxAggregation with channels={self.channels} needs a 2-D x (nodes, features), "
                             f"got shape {tuple(x.shape)}")
        t = self.t if self.channels == 1 else self.t.view(-1, self.channels)
        score = x * t if isinstance(t, Tensor) or t != 1 else x
        if self.semi_grad and not self.learn:
            score = score.detach()
        P, log_counts = graph.pattern()
        if x.dim() == 2:
            return graph.trim(_attend(P, log_counts, x, score))
        flat = lambda h: h.movedim(-2, 0).reshape(h.shape[-2], -1)      # noqa: E731 (as by_columns)
        out = graph.trim(_attend(P, log_counts, flat(x), flat(score.expand_as(x))))
        return out.view(graph.n_dst, *x.shape[:-2], x.shape[-1]).movedim(0, -2)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(learn={self.learn})"


def _attend(P, log_counts, x: Tensor, score: Tensor) -> Tensor:
    """graph_attention over P with a head per column of x (n_src, H), source scores score."""
    n_dst = P.size[0]
    H = x.shape[1]
    e = None if log_counts is None else log_counts[:, None].expand(-1, H).contiguous()
    out = graph_attention(P, x.unsqueeze(-1), score.contiguous(), x.new_zeros(n_dst, H), negative_slope=1.0,
                          edge_score=e)
    return out.squeeze(-1)
