"""GATv2 attention on a pattern (graph_attention_v2): each stored entry's score computed
from its two rows (the LeakyReLU inside the sum over features), a softmax over each row's
stored entries, and the weighted sum of the source rows, fused (never an E x H x C
temporary).

The pattern S (n, m) of a 2-D SparseCSR (values unused); xl (m, H, C) the source rows
(in the scores and the messages), xr (n, H, C) the target rows, att (H, C), et (nnz, H,
C) an edge term inside LeakyReLU (or None), b (nnz, H) a score added after the sum (or
None); dropout: seed None or an int64 tensor of one element, drop (of 2^24) and scale
(see _backends.gatv2); slope LeakyReLU's:
    tsgu::gatv2(xl, xr, att, et, b) = (out, alpha): out (n, H, C), alpha (nnz, H) the
                          attention weights (before dropout)
    tsgu::gatv2_grad(xl, xr, att, et, alpha, G, galpha) = (gxl, gxr, gatt, get, gb), given
                          the gradients G of out and galpha (or None) of alpha; get is
                          empty (0,) without et; gb (the scores' gradient) is made whether
                          or not b is given (the kernels need it anyway)
with the derivative
    gatv2:    (gxl, gxr, gatt, get, gb) = gatv2_grad(...)   (no second derivative)

run_gatv2 is graph_attention_v2.
"""
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from .. import _backends
from .._core.validate import SUPPORTED_DTYPES, SparseSpec, check_sparse, dtype_names
from .._core.view import CSRView, check_arrays, kernel_array, view_of
from .gat import dropout_draw, dropped, pattern_of


def _opt(t: Optional[Tensor]) -> Optional[Tensor]:
    return None if t is None else kernel_array(t)


@torch.library.custom_op("tsgu::gatv2", mutates_args=())
def _gatv2(ptr: Tensor, col: Tensor, shape: List[int], xl: Tensor, xr: Tensor, att: Tensor, et: Optional[Tensor],
           b: Optional[Tensor], seed: Optional[Tensor], drop: int, scale: float, slope: float
           ) -> Tuple[Tensor, Tensor]:
    return _backends.gatv2(view_of(ptr, col, None, None, shape), kernel_array(xl), kernel_array(xr),
                           kernel_array(att), _opt(et), _opt(b), seed, drop, scale, slope)


@torch.library.custom_op("tsgu::gatv2_grad", mutates_args=())
def _gatv2_grad(ptr: Tensor, col: Tensor, shape: List[int], xl: Tensor, xr: Tensor, att: Tensor,
                et: Optional[Tensor], seed: Optional[Tensor], drop: int, scale: float, slope: float, alpha: Tensor,
                G: Tensor, galpha: Optional[Tensor]) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    gxl, gxr, gatt, get, gb = _backends.gatv2_grad(view_of(ptr, col, None, None, shape), kernel_array(xl),
                                                   kernel_array(xr), kernel_array(att), _opt(et), seed, drop,
                                                   scale, slope, kernel_array(alpha), kernel_array(G), _opt(galpha))
    return gxl, gxr, gatt, xl.new_empty(0) if get is None else get, gb


@_gatv2.register_fake
def _(ptr, col, shape, xl, xr, att, et, b, seed, drop, scale, slope):
    check_arrays(ptr, col, None, shape)
    return xl.new_empty(shape[0], *xl.shape[1:]), xl.new_empty(col.shape[0], xl.shape[1])


@_gatv2_grad.register_fake
def _(ptr, col, shape, xl, xr, att, et, seed, drop, scale, slope, alpha, G, galpha):
    check_arrays(ptr, col, None, shape)
    get = xl.new_empty(0) if et is None else torch.empty_like(et)
    return torch.empty_like(xl), torch.empty_like(xr), torch.empty_like(att), get, torch.empty_like(alpha)


def _gatv2_setup(ctx, inputs, output):
    ptr, col, shape, xl, xr, att, et, b, seed, drop, scale, slope = inputs
    ctx.shape, ctx.dropout, ctx.slope = shape, (drop, scale), slope
    ctx.save_for_backward(ptr, col, xl, xr, att, et, seed, output[1])
    ctx.set_materialize_grads(False)          # an unused alpha's gradient stays None: no (nnz, H) zeros


def _gatv2_backward(ctx, G, galpha):
    ptr, col, xl, xr, att, et, seed, alpha = ctx.saved_tensors
    if G is None:
        G = xl.new_zeros(ctx.shape[0], *xl.shape[1:])
    gxl, gxr, gatt, get, gb = _gatv2_grad(ptr, col, ctx.shape, xl, xr, att, et, seed, *ctx.dropout, ctx.slope,
                                          alpha, G, galpha)
    need = ctx.needs_input_grad
    return (None, None, None, gxl if need[3] else None, gxr if need[4] else None, gatt if need[5] else None,
            get if need[6] else None, gb if need[7] else None, None, None, None, None)


_gatv2.register_autograd(_gatv2_backward, setup_context=_gatv2_setup)


def gatv2(view: CSRView, xl: Tensor, xr: Tensor, att: Tensor, et: Optional[Tensor], b: Optional[Tensor],
          seed: Optional[Tensor], drop: int, scale: float, slope: float) -> Tuple[Tensor, Tensor]:
    """(out, alpha) of GATv2 attention on view's pattern (see _backends.gatv2),
    differentiable once in xl, xr, att, et and b (through both outputs)."""
    return _gatv2(view.ptr, view.col, list(view.shape), xl, xr, att, et, b, seed, drop, scale, slope)


def run_gatv2(spec: SparseSpec, adjacency, x_src: Tensor, x_dst: Tensor, att: Tensor, negative_slope: float,
              dropout: float, training: bool, return_attention: bool, edge_term: Optional[Tensor],
              edge_score: Optional[Tensor]):
    """graph_attention_v2 against spec."""
    check_sparse(spec, adjacency)
    _check_features(adjacency, x_src, x_dst, att, dropout, edge_term, edge_score)
    seed, drop, scale = dropout_draw(dropout if training else 0.0, x_src.device)
    view = pattern_of(adjacency)
    nnz, (H, C) = view.col.shape[0], att.shape
    for name, t, want in (("edge_term", edge_term, (nnz, H, C)), ("edge_score", edge_score, (nnz, H))):
        if t is not None and tuple(t.shape) != want:
            raise ValueError(f"graph_attention_v2: {name} must be {want} (one row per stored entry), got "
                             f"{tuple(t.shape)}")
    out, alpha = gatv2(view, x_src, x_dst, att, edge_term, edge_score, seed, drop, scale, float(negative_slope))
    return (out, dropped(alpha, seed, drop, scale)) if return_attention else out



def _check_features(A, xl, xr, att, dropout, et, b) -> None:
    """What the spec leaves to the op: the rows, att and the edge terms against the
    adjacency, and dropout."""
    name = "graph_attention_v2"
    for arg, t in (("x_src", xl), ("x_dst", xr), ("att", att)):
        if not isinstance(t, Tensor):
            raise ValueError(f"{name}: {arg} must be a tensor, got {type(t).__name__}")
    for arg, t in (("edge_term", et), ("edge_score", b)):
        if t is not None and not isinstance(t, Tensor):
            raise ValueError(f"{name}: {arg} must be a tensor or None, got {type(t).__name__}")
    if xl.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{name} supports {dtype_names(SUPPORTED_DTYPES)} features, got {xl.dtype}")
    for arg, t in (("x_dst", xr), ("att", att), ("edge_term", et), ("edge_score", b)):
        if t is not None and t.dtype != xl.dtype:
            raise TypeError(f"{name}: {arg} must have x_src's dtype {xl.dtype}, got {t.dtype}")
    n, m = A.shape
    if xl.dim() != 3 or xl.shape[0] != m:
        raise ValueError(f"{name}: x_src must be (m, heads, features) with m = {m} (the adjacency's columns), got "
                         f"shape {tuple(xl.shape)}")
    H, C = xl.shape[1:]
    if tuple(xr.shape) != (n, H, C):
        raise ValueError(f"{name}: x_dst must be ({n}, {H}, {C}) (the adjacency's rows, x_src's heads and "
                         f"features), got {tuple(xr.shape)}")
    if tuple(att.shape) != (H, C):
        raise ValueError(f"{name}: att must be ({H}, {C}) (heads, features), got {tuple(att.shape)}")
    if any(t is not None and t.device != xl.device for t in (xr, att, et, b)) or A.device != xl.device:
        raise ValueError(f"{name}: the adjacency, x_src, x_dst, att, edge_term and edge_score must be on one device")
    if not 0.0 <= dropout <= 1.0:
        raise ValueError(f"{name}: dropout must be in [0, 1], got {dropout}")
