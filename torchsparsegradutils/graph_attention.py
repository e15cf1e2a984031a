"""graph_attention: the attention of a graph attention network (GAT) on a sparse pattern,
fused: scores (with an optional additive score per stored entry: GAT's edge features), softmax over each row's stored entries, dropout and the weighted sum of
the source rows, with no (edges x heads x features) intermediate.

On CPU the kernels are csrc/gat_forward.c (scores, softmax and sum, row by row),
csrc/gat_grad_scores.c (the gradient back through the sum, the softmax and LeakyReLU,
row by row) and csrc/gat_grad_src.c (the sums over each source node, without atomics),
called through _backends.gat / gat_grad; other devices take the same steps through
PyTorch gathers and index_add (with (nnz, H, F) temporaries).  Everything goes through
the custom operator tsgu::gat (_ops/gat.py), which torch.compile traces on a SparseCSR.
"""
from typing import Optional, Tuple, Union

import torch
from torch import Tensor

from . import _backends
from ._core.intake import as_csr
from ._core.sparse_csr import SparseCSR
from ._core.validate import SUPPORTED_DTYPES, dtype_names, eager_only
from ._core.view import CSRView, check_arrays
from ._ops.gat import gat

__all__ = ["graph_attention"]


def graph_attention(adjacency: Union[Tensor, SparseCSR], x: Tensor, score_src: Tensor, score_dst: Tensor,
                    negative_slope: float = 0.2, dropout: float = 0.0, training: bool = True,
                    return_attention: bool = False, edge_score: Optional[Tensor] = None
                    ) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    r"""Graph attention (Veličković et al.; PyTorch Geometric's ``GATConv`` message passing)
    over the stored entries of each row of ``adjacency``.

    Row ``i`` of the ``(n, m)`` adjacency is a target node and its stored columns ``j``
    the source nodes it attends to; with ``H`` heads of ``F`` features, for each head ``h``

    .. math::
        e_{ijh} = \mathrm{LeakyReLU}(s_{jh} + d_{ih} + c_{ijh}), \quad
        \alpha_{ijh} = \frac{\exp e_{ijh}}{\sum_{j'} \exp e_{ij'h}}, \quad
        out_{ih} = \sum_j \mathrm{dropout}(\alpha_{ijh})\, x_{jh}

    the sums over row ``i``'s stored entries (absent entries take no share; a row without
    entries gives zeros), ``c`` the optional ``edge_score`` of the entry (0 without it).  Dropout (only when ``training``) zeroes each ``alpha`` with
    probability ``dropout`` and scales the rest by ``1/(1 - dropout)``, its mask drawn from
    PyTorch's generator (results follow :func:`torch.manual_seed`).  The adjacency's
    values are not read.  Nothing of size ``nnz x H x F`` is made, forward or backward,
    on the CPU (CUDA takes PyTorch's ops, which do make it).

    Parameters
    ----------
    adjacency : 2-D sparse COO or CSR tensor, or a 2-D :class:`~torchsparsegradutils.SparseCSR`
        (what ``torch.compile(fullgraph=True)`` traces), ``(n, m)``: its pattern.
    x : ``(m, H, F)`` source features per head, float32 or float64.
    score_src : ``(m, H)``, ``s`` above (in GAT, ``(x * att_src).sum(-1)``).
    score_dst : ``(n, H)``, ``d`` above (in GAT, ``(x_dst * att_dst).sum(-1)``).
    negative_slope : LeakyReLU's slope for negative scores.
    dropout : the probability of dropping an attention weight, in ``[0, 1]``.
    training : apply dropout (as :func:`torch.nn.functional.dropout`'s ``training``).  The
        mask is not stored: a seed drawn from PyTorch's generator keys a counter-based
        hash of each (entry, head), which the forward and the backward both evaluate;
        ``dropout`` is applied in steps of 2^-24.
    return_attention : also return ``alpha`` ``(nnz, H)``, after dropout, one row per
        stored entry in the adjacency's CSR order (a COO adjacency's coalesced order).
    edge_score : ``(nnz, H)`` or None: ``c`` above, a score per stored entry and head added
        before LeakyReLU (in GAT with edge features, ``(lin_edge(edge_attr) * att_edge).sum(-1)``;
        ``log k`` on an entry standing for an edge repeated ``k`` times gives it the share of
        ``k`` copies).  One row per stored entry in the order of ``return_attention``'s
        ``alpha``, of ``x``'s dtype; its gradient (the scores' before LeakyReLU) costs no
        extra pass.

    Returns
    -------
    ``out`` ``(n, H, F)``, or ``(out, alpha)``; differentiable once in ``x``,
    ``score_src``, ``score_dst`` and ``edge_score`` (through ``alpha`` too).

    Raises
    ------
    ValueError
        An adjacency that is not a 2-D sparse COO/CSR tensor or SparseCSR, shapes that do
        not fit (``edge_score`` included), tensors on different devices, ``dropout`` outside ``[0, 1]``, malformed
        sparse structure.
    TypeError
        ``x`` not float32/float64, or the scores (``edge_score`` too) of another dtype.

    Examples
    --------
    >>> A = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]]).to_sparse_csr()
    >>> x = torch.arange(6.0).reshape(3, 1, 2)             # 3 sources, 1 head, 2 features
    >>> graph_attention(A, x, torch.zeros(3, 1), torch.zeros(2, 1))   # equal scores: the mean
    tensor([[[1., 2.]],
    <BLANKLINE>
            [[0., 0.]]])
    """
    _check(adjacency, x, score_src, score_dst, dropout, edge_score)
    seed, drop, scale = None, 0, 1.0
    if training and dropout > 0:
        seed = torch.randint(-2**63, 2**63 - 1, (1,), dtype=torch.int64, device=x.device)  # PyTorch's generator
        drop = round(dropout * 2**24)
        scale = 1.0 / (1.0 - dropout) if dropout < 1 else 0.0
    if isinstance(adjacency, SparseCSR):
        view = CSRView(adjacency.crow_indices, adjacency.col_indices, None, 1, *adjacency.size, adjacency.shape)
    else:
        view = _pattern(adjacency)
    if edge_score is not None and tuple(edge_score.shape) != (view.col.shape[0], x.shape[1]):
        raise ValueError(f"graph_attention: edge_score must be (nnz, heads) = ({view.col.shape[0]}, {x.shape[1]}) "
                         f"(one row per stored entry), got {tuple(edge_score.shape)}")
    out, alpha = gat(view, x, score_src, score_dst, edge_score, seed, drop, scale, float(negative_slope))
    if not return_attention:
        return out
    if drop:
        alpha = torch.where(_backends.gat_dropped(seed, *alpha.shape, drop), 0.0, alpha * scale)
    return out, alpha


@eager_only
def _pattern(A: Tensor) -> CSRView:
    """A torch sparse tensor's CSR pattern (a COO one's coalesced): a graph break under torch.compile."""
    return as_csr(A.detach())


def _check(A, x, s, d, dropout, e=None) -> None:
    if not isinstance(A, (Tensor, SparseCSR)) or A.layout not in (torch.sparse_coo, torch.sparse_csr):
        raise ValueError("graph_attention takes the adjacency as a 2-D sparse COO or CSR tensor or a SparseCSR, got "
                         f"{A.layout if isinstance(A, Tensor) else type(A).__name__}")
    if A.dim() != 2 or (isinstance(A, Tensor) and A.dense_dim() != 0):
        raise ValueError(f"graph_attention takes a 2-D adjacency (n, m) with no dense dimensions, got shape "
                         f"{tuple(A.shape)}")
    if isinstance(A, SparseCSR):
        check_arrays(A.crow_indices, A.col_indices, None, A.size)
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
