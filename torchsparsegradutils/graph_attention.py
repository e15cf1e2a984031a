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

from ._core.sparse_csr import SparseCSR
from ._core.validate import SparseSpec
from ._ops.gat import run_gat

__all__ = ["graph_attention"]

_NOT_ADJACENCY = (ValueError, "{name} takes the adjacency as a 2-D sparse COO or CSR tensor or a SparseCSR, got {got}")
_NOT_2D = (ValueError, "{name} takes a 2-D adjacency (n, m) with no dense dimensions, got shape {shape}")
SPEC = SparseSpec("graph_attention", (torch.sparse_coo, torch.sparse_csr), (2,), not_sparse=_NOT_ADJACENCY,
                  bad_layout=_NOT_ADJACENCY, bad_rank=_NOT_2D, hybrid=_NOT_2D, values=False)   # dtypes: x's


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
    return run_gat(SPEC, adjacency, x, score_src, score_dst, negative_slope, dropout, training, return_attention,
                   edge_score)
