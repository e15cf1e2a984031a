"""Graph attention (graph_attention): the scores' softmax over each row, the dropout
draw of the C kernels bit for bit, the weighted rows of x, and the gradient."""
import torch

from ..._core.view import CSRView
from ._common import global_csr
from .softmax import softmax


# As cpu.gat / gat_grad, by gathers and index_add over the entries.  These build
# (nnz, H, F) temporaries (the gathered rows of x and of G), and the dropout draw
# (nnz, H) int64 ones: CUDA without kernels of ours pays that memory; the C kernels on
# CPU do not.
def _signed(c: int) -> int:
    return c - 2**64 if c >= 2**63 else c


_GOLDEN, _MIX1, _MIX2 = _signed(0x9E3779B97F4A7C15), _signed(0xBF58476D1CE4E5B9), _signed(0x94D049BB133111EB)


def _shifted(z: torch.Tensor, k: int) -> torch.Tensor:
    """z >> k of an int64 taken as unsigned (a logical shift)."""
    return (z >> k) & ((1 << (64 - k)) - 1)


def gat_dropped(seed: torch.Tensor, nnz: int, heads: int, drop: int) -> torch.Tensor:
    """bool (nnz, heads): True where the draw of element q = e*heads + h, SplitMix64's
    finaliser of seed + (q+1) * golden ratio (int64 arithmetic wraps as uint64), has its
    top 24 bits below drop: csrc/tsgu_gat.h's tsgu_gat_draw, bit for bit."""
    q = torch.arange(1, nnz * heads + 1, dtype=torch.int64, device=seed.device)
    z = seed.reshape(()) + q * _GOLDEN
    z = (z ^ _shifted(z, 30)) * _MIX1
    z = (z ^ _shifted(z, 27)) * _MIX2
    return (_shifted(z ^ _shifted(z, 31), 40) < drop).reshape(nnz, heads)


def _gat_scores(A: CSRView, s: torch.Tensor, d: torch.Tensor, e):
    """(rows, cols, z): each entry's row and column, and z = s[j] + d[i] (+ e) (nnz, H)."""
    _, rows, cols = global_csr(A._replace(values=None))
    z = s.index_select(0, cols) + d.index_select(0, rows)
    return rows, cols, z if e is None else z + e


def _gat_weights(alpha: torch.Tensor, seed, drop: int, scale: float) -> torch.Tensor:
    """alpha with dropout: 0 where dropped, times scale elsewhere."""
    if not drop:
        return alpha
    return torch.where(gat_dropped(seed, *alpha.shape, drop), 0.0, alpha * scale)


def gat(A: CSRView, x: torch.Tensor, s: torch.Tensor, d: torch.Tensor, e, seed, drop: int, scale: float,
        slope: float):
    """As cpu.gat: the softmax of each row's scores, then the weighted rows of x."""
    rows, cols, z = _gat_scores(A, s, d, e)
    alpha = softmax(A._replace(values=torch.nn.functional.leaky_relu(z, slope)), True, False)
    w = _gat_weights(alpha, seed, drop, scale)
    out = x.new_zeros(A.nrows, *x.shape[1:]).index_add_(0, rows, w.unsqueeze(-1) * x.index_select(0, cols))
    return out, alpha


def gat_grad(A: CSRView, x: torch.Tensor, s: torch.Tensor, d: torch.Tensor, e, seed, drop: int, scale: float,
             slope: float, alpha: torch.Tensor, G: torch.Tensor, galpha):
    """As cpu.gat_grad."""
    rows, cols, z = _gat_scores(A, s, d, e)
    Gi = G.index_select(0, rows)
    ga = _gat_weights((Gi * x.index_select(0, cols)).sum(-1), seed, drop, scale)
    if galpha is not None:
        ga = ga + galpha
    c = alpha.new_zeros(A.nrows, alpha.shape[1]).index_add_(0, rows, alpha * ga)
    ge = alpha * (ga - c.index_select(0, rows))
    dz = torch.where(z > 0, ge, slope * ge)
    gd = torch.zeros_like(d).index_add_(0, rows, dz)
    gs = torch.zeros_like(s).index_add_(0, cols, dz)
    gx = torch.zeros_like(x).index_add_(0, cols, _gat_weights(alpha, seed, drop, scale).unsqueeze(-1) * Gi)
    return gx, gs, gd, dz
