"""Graph attention on a pattern (graph_attention): scores at the stored entries, a softmax
over each row's stored entries, and the product with them as values, fused (never an
E x H x F temporary).

The pattern S (n, m) of a 2-D SparseCSR (values unused); x (m, H, F), s (m, H), d (n, H),
e (nnz, H) a score per stored entry added to s[j] + d[i] (or None); dropout: seed None or
an int64 tensor of one element, drop (of 2^24) and scale (see _backends.gat); slope
LeakyReLU's:
    tsgu::gat(x, s, d, e)  = (out, alpha): out (n, H, F), alpha (nnz, H) the attention weights (before dropout)
    tsgu::gat_grad(x, s, d, e, alpha, G, galpha) = (dx, ds, dd, de), given the gradients G of
                          out and galpha (or None) of alpha; de (the scores' gradient) is made
                          whether or not e is given (the kernels need it anyway)
with the derivative
    gat:      (dx, ds, dd, de) = gat_grad(...)   (no second derivative)

run_gat is graph_attention; dropout_draw, pattern_of and dropped are graph_attention_v2's too.
"""
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from .. import _backends
from .._core.intake import as_csr
from .._core.sparse_csr import SparseCSR
from .._core.validate import SUPPORTED_DTYPES, SparseSpec, check_sparse, dtype_names, eager_only
from .._core.view import CSRView, check_arrays, kernel_array, view_of


def _opt(t: Optional[Tensor]) -> Optional[Tensor]:
    return None if t is None else kernel_array(t)


@torch.library.custom_op("tsgu::gat", mutates_args=())
def _gat(ptr: Tensor, col: Tensor, shape: List[int], x: Tensor, s: Tensor, d: Tensor, e: Optional[Tensor],
         seed: Optional[Tensor], drop: int, scale: float, slope: float) -> Tuple[Tensor, Tensor]:
    return _backends.gat(view_of(ptr, col, None, None, shape), kernel_array(x), kernel_array(s), kernel_array(d),
                         _opt(e), seed, drop, scale, slope)


@torch.library.custom_op("tsgu::gat_grad", mutates_args=())
def _gat_grad(ptr: Tensor, col: Tensor, shape: List[int], x: Tensor, s: Tensor, d: Tensor, e: Optional[Tensor],
              seed: Optional[Tensor], drop: int, scale: float, slope: float, alpha: Tensor, G: Tensor,
              galpha: Optional[Tensor]) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    return _backends.gat_grad(view_of(ptr, col, None, None, shape), kernel_array(x), kernel_array(s),
                              kernel_array(d), _opt(e), seed, drop, scale, slope, kernel_array(alpha),
                              kernel_array(G), _opt(galpha))


@_gat.register_fake
def _(ptr, col, shape, x, s, d, e, seed, drop, scale, slope):
    check_arrays(ptr, col, None, shape)
    return x.new_empty(shape[0], *x.shape[1:]), x.new_empty(col.shape[0], x.shape[1])


@_gat_grad.register_fake
def _(ptr, col, shape, x, s, d, e, seed, drop, scale, slope, alpha, G, galpha):
    check_arrays(ptr, col, None, shape)
    return torch.empty_like(x), torch.empty_like(s), torch.empty_like(d), torch.empty_like(alpha)


def _gat_setup(ctx, inputs, output):
    ptr, col, shape, x, s, d, e, seed, drop, scale, slope = inputs
    ctx.shape, ctx.dropout, ctx.slope = shape, (drop, scale), slope
    ctx.save_for_backward(ptr, col, x, s, d, e, seed, output[1])
    ctx.set_materialize_grads(False)          # an unused alpha's gradient stays None: no (nnz, H) zeros


def _gat_backward(ctx, G, galpha):
    ptr, col, x, s, d, e, seed, alpha = ctx.saved_tensors
    if G is None:
        G = x.new_zeros(ctx.shape[0], *x.shape[1:])
    gx, gs, gd, ge = _gat_grad(ptr, col, ctx.shape, x, s, d, e, seed, *ctx.dropout, ctx.slope, alpha, G, galpha)
    need = ctx.needs_input_grad
    return (None, None, None, gx if need[3] else None, gs if need[4] else None, gd if need[5] else None,
            ge if need[6] else None, None, None, None, None)


_gat.register_autograd(_gat_backward, setup_context=_gat_setup)


def gat(view: CSRView, x: Tensor, s: Tensor, d: Tensor, e: Optional[Tensor], seed: Optional[Tensor], drop: int,
        scale: float, slope: float) -> Tuple[Tensor, Tensor]:
    """(out, alpha) of graph attention on view's pattern (see _backends.gat), differentiable
    once in x, s, d and e (through both outputs)."""
    return _gat(view.ptr, view.col, list(view.shape), x, s, d, e, seed, drop, scale, slope)


def run_gat(spec: SparseSpec, adjacency, x: Tensor, score_src: Tensor, score_dst: Tensor, negative_slope: float,
            dropout: float, training: bool, return_attention: bool, edge_score: Optional[Tensor]):
    """graph_attention against spec."""
    check_sparse(spec, adjacency)
    _check_features(adjacency, x, score_src, score_dst, dropout, edge_score)
    seed, drop, scale = dropout_draw(dropout if training else 0.0, x.device)
    view = pattern_of(adjacency)
    if edge_score is not None and tuple(edge_score.shape) != (view.col.shape[0], x.shape[1]):
        raise ValueError(f"graph_attention: edge_score must be (nnz, heads) = ({view.col.shape[0]}, {x.shape[1]}) "
                         f"(one row per stored entry), got {tuple(edge_score.shape)}")
    out, alpha = gat(view, x, score_src, score_dst, edge_score, seed, drop, scale, float(negative_slope))
    return (out, dropped(alpha, seed, drop, scale)) if return_attention else out


def dropout_draw(dropout: float, device: torch.device):
    """(seed, drop, scale) of the kernels' dropout (see _backends.gat): the seed drawn from
    PyTorch's generator, None without dropout."""
    if not dropout > 0:
        return None, 0, 1.0
    seed = torch.randint(-2**63, 2**63 - 1, (1,), dtype=torch.int64, device=device)
    return seed, round(dropout * 2**24), 1.0 / (1.0 - dropout) if dropout < 1 else 0.0


def pattern_of(adjacency) -> CSRView:
    """The adjacency's CSR pattern, values unused: a SparseCSR's arrays, or a torch sparse
    tensor's (a COO one's coalesced)."""
    if isinstance(adjacency, SparseCSR):
        return CSRView(adjacency.crow_indices, adjacency.col_indices, None, 1, *adjacency.size, adjacency.shape)
    return _pattern(adjacency)


@eager_only
def _pattern(A: Tensor) -> CSRView:
    """A torch sparse tensor's CSR pattern: a graph break under torch.compile."""
    return as_csr(A.detach())


def dropped(alpha: Tensor, seed: Optional[Tensor], drop: int, scale: float) -> Tensor:
    """The attention weights after the forward's dropout."""
    if not drop:
        return alpha
    return torch.where(_backends.gat_dropped(seed, *alpha.shape, drop), 0.0, alpha * scale)


def _check_features(A, x, s, d, dropout, e) -> None:
    """What the spec leaves to the op: the features and scores against the adjacency, and dropout."""
    for name, t in (("x", x), ("score_src", s), ("score_dst", d)):
        if not isinstance(t, Tensor):
            raise ValueError(f"graph_attention: {name} must be a tensor, got {type(t).__name__}")
    if x.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"graph_attention supports {dtype_names(SUPPORTED_DTYPES)} features, got {x.dtype}")
    if s.dtype != x.dtype or d.dtype != x.dtype:
        raise TypeError(f"graph_attention: score_src and score_dst must have x's dtype {x.dtype}, got {s.dtype} "
                        f"and {d.dtype}")
    n, m = A.shape
    if x.dim() != 3 or x.shape[0] != m:
        raise ValueError(f"graph_attention: x must be (m, heads, features) with m = {m} (the adjacency's "
                         f"columns), got shape {tuple(x.shape)}")
    H = x.shape[1]
    if tuple(s.shape) != (m, H) or tuple(d.shape) != (n, H):
        raise ValueError(f"graph_attention: score_src must be ({m}, {H}) and score_dst ({n}, {H}), got "
                         f"{tuple(s.shape)} and {tuple(d.shape)}")
    if not (x.device == s.device == d.device == A.device):
        raise ValueError("graph_attention: the adjacency, x, score_src and score_dst must be on one device")
    if e is not None:
        if not isinstance(e, Tensor):
            raise ValueError(f"graph_attention: edge_score must be a tensor or None, got {type(e).__name__}")
        if e.dtype != x.dtype:
            raise TypeError(f"graph_attention: edge_score must have x's dtype {x.dtype}, got {e.dtype}")
        if e.device != x.device:
            raise ValueError("graph_attention: edge_score must be on x's device")
        if e.dim() != 2:
            raise ValueError(f"graph_attention: edge_score must be (nnz, heads), got shape {tuple(e.shape)}")
    if not 0.0 <= dropout <= 1.0:
        raise ValueError(f"graph_attention: dropout must be in [0, 1], got {dropout}")
