"""GATv2 attention (graph_attention_v2) in PyTorch's ops: the fallback for devices
without kernels of ours, with the C kernels' meaning and dropout draw."""
import torch

from ..._core.view import CSRView
from ._common import global_csr
from .gat import _gat_weights
from .softmax import softmax


# As cpu.gatv2 / gatv2_grad, by gathers and index_add over the entries.  These build
# (nnz, H, C) temporaries (the rows u = xl[j] + xr[i] (+ et) and the gathered rows of
# G): CUDA without Triton pays that memory; the C kernels on CPU and Triton do not.
def _rows(A: CSRView, xl: torch.Tensor, xr: torch.Tensor, et):
    """(rows, cols, u): each entry's row and column, and u = xl[j] + xr[i] (+ et) (nnz, H, C)."""
    _, rows, cols = global_csr(A._replace(values=None))
    u = xl.index_select(0, cols) + xr.index_select(0, rows)
    return rows, cols, u if et is None else u + et


def gatv2(A: CSRView, xl: torch.Tensor, xr: torch.Tensor, att: torch.Tensor, et, b, seed, drop: int,
          scale: float, slope: float):
    """As cpu.gatv2: the scores from the two rows, their softmax over each row, the weighted rows of xl."""
    rows, cols, u = _rows(A, xl, xr, et)
    z = (torch.nn.functional.leaky_relu(u, slope) * att).sum(-1)
    if b is not None:
        z = z + b
    alpha = softmax(A._replace(values=z), True, False)
    w = _gat_weights(alpha, seed, drop, scale)
    out = xl.new_zeros(A.nrows, *xl.shape[1:]).index_add_(0, rows, w.unsqueeze(-1) * xl.index_select(0, cols))
    return out, alpha


def gatv2_grad(A: CSRView, xl: torch.Tensor, xr: torch.Tensor, att: torch.Tensor, et, seed, drop: int,
               scale: float, slope: float, alpha: torch.Tensor, G: torch.Tensor, galpha):
    """As cpu.gatv2_grad."""
    rows, cols, u = _rows(A, xl, xr, et)
    Gi = G.index_select(0, rows)
    ga = _gat_weights((Gi * xl.index_select(0, cols)).sum(-1), seed, drop, scale)
    if galpha is not None:
        ga = ga + galpha
    c = alpha.new_zeros(A.nrows, alpha.shape[1]).index_add_(0, rows, alpha * ga)
    gz = alpha * (ga - c.index_select(0, rows))
    k = torch.where(u > 0, u.new_ones(()), u.new_full((), slope))      # slope in u's dtype, not float32
    du = gz.unsqueeze(-1) * att * k
    gatt = (gz.unsqueeze(-1) * (k * u)).sum(0)
    gxr = torch.zeros_like(xr).index_add_(0, rows, du)
    msg = _gat_weights(alpha, seed, drop, scale).unsqueeze(-1) * Gi
    gxl = torch.zeros_like(xl).index_add_(0, cols, msg + du)
    return gxl, gxr, gatt, None if et is None else du, gz
