"""Orderings of a square sparse pattern's nodes (utils.reverse_cuthill_mckee):

    tsgu::rcm(ptr, col, n, symmetric) -> perm (n,) int64, the reverse Cuthill-McKee
    ordering of the graph of S + S^T (symmetric: of S) without its diagonal

An index computation: no values, no derivative.
"""
import torch
from torch import Tensor

from .. import _backends


@torch.library.custom_op("tsgu::rcm", mutates_args=())
def rcm(ptr: Tensor, col: Tensor, n: int, symmetric: bool) -> Tensor:
    """perm: node perm[k] placed k-th (csrc/rcm.c)."""
    return _backends.rcm(ptr, col, n, symmetric)


@rcm.register_fake
def _(ptr, col, n, symmetric):
    return ptr.new_empty(n, dtype=torch.int64)
