"""graph_attention_v2: the attention of GATv2 (Brody et al., "How Attentive are Graph
Attention Networks?") on a sparse pattern, fused: each stored entry's score computed
from its target's and its source's rows (the LeakyReLU inside the sum over features,
so GAT's split into per-node scores does not apply), the softmax over each row's stored
entries, dropout and the weighted sum of the source rows, with no (edges x heads x
features) intermediate.

On CPU the kernels are csrc/gatv2_forward.c (scores, softmax and sum, row by row),
csrc/gatv2_grad_rows.c (the gradient back through the sum, the softmax and the scores,
row by row: the target rows', the edge term's and each row's share of att's),
csrc/gatv2_grad_src.c (the sums over each source, without atomics) and
csrc/gatv2_grad_att.c (att's, the rows' shares summed), called through
_backends.gatv2 / gatv2_grad; CUDA takes the Triton kernels (_backends/triton/gatv2.py).
Everything goes through the custom operator tsgu::gatv2 (_ops/gatv2.py), which
torch.compile traces on a SparseCSR.
"""
from typing import Optional, Tuple, Union

import torch  # noqa: F401  (the examples' name)
from torch import Tensor

from ._core.sparse_csr import SparseCSR
from ._ops.gatv2 import run_gatv2
from .graph_attention import SPEC as _GAT_SPEC

__all__ = ["graph_attention_v2"]

SPEC = _GAT_SPEC._replace(name="graph_attention_v2")     # graph_attention's adjacency   (dtypes: x_src's)


def graph_attention_v2(adjacency: Union[Tensor, SparseCSR], x_src: Tensor, x_dst: Tensor, att: Tensor,
                       negative_slope: float = 0.2, dropout: float = 0.0, training: bool = True,
                       return_attention: bool = False, edge_term: Optional[Tensor] = None,
                       edge_score: Optional[Tensor] = None) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    r"""GATv2 attention (Brody et al.; PyTorch Geometric's ``GATv2Conv`` message passing)
    over the stored entries of each row of ``adjacency``.

    Row ``i`` of the ``(n, m)`` adjacency is a target node and its stored columns ``j``
    the source nodes it attends to; with ``H`` heads of ``C`` features, for each head ``h``

    .. math::
        e_{ijh} = \sum_c a_{hc}\, \mathrm{LeakyReLU}(l_{jhc} + r_{ihc} + t_{ijhc}) + b_{ijh},
        \quad \alpha_{ijh} = \frac{\exp e_{ijh}}{\sum_{j'} \exp e_{ij'h}}, \quad
        out_{ih} = \sum_j \mathrm{dropout}(\alpha_{ijh})\, l_{jh}

    with ``l = x_src``, ``r = x_dst``, ``a = att``, ``t`` the optional ``edge_term`` and
    ``b`` the optional ``edge_score`` (0 without them), the sums over row ``i``'s stored
    entries (a row without entries gives zeros).  Each score is computed from the two
    rows as the kernels walk the row: nothing of size ``nnz x H x C`` is made, forward or
    backward (but ``edge_term`` itself and its gradient).  Dropout (only when
    ``training``) zeroes each ``alpha`` with probability ``dropout`` and scales the rest
    by ``1/(1 - dropout)``, drawn as :func:`~torchsparsegradutils.graph_attention` draws
    it (the same seed gives the same mask).  The adjacency's values are not read.

    Parameters
    ----------
    adjacency : 2-D sparse COO or CSR tensor, or a 2-D :class:`~torchsparsegradutils.SparseCSR`
        (what ``torch.compile(fullgraph=True)`` traces), ``(n, m)``: its pattern.
    x_src : ``(m, H, C)`` the source rows (in GATv2, ``lin_l(x)``), float32 or float64:
        in the scores and the messages.
    x_dst : ``(n, H, C)`` the target rows (in GATv2, ``lin_r(x)``); may be ``x_src`` itself.
    att : ``(H, C)`` the attention vector, ``a`` above.
    negative_slope : LeakyReLU's slope for negative arguments.
    dropout : the probability of dropping an attention weight, in ``[0, 1]``.
    training : apply dropout (as :func:`torch.nn.functional.dropout`'s ``training``).
    return_attention : also return ``alpha`` ``(nnz, H)``, after dropout, one row per
        stored entry in the adjacency's CSR order (a COO adjacency's coalesced order).
    edge_term : ``(nnz, H, C)`` or None: ``t`` above, added inside LeakyReLU (in GATv2 with
        edge features, ``lin_edge(edge_attr)``), one row per stored entry in the order of
        ``alpha``, of ``x_src``'s dtype.
    edge_score : ``(nnz, H)`` or None: ``b`` above, added to each score (``log k`` on an
        entry standing for an edge repeated ``k`` times gives it the share of ``k`` copies).

    Returns
    -------
    ``out`` ``(n, H, C)``, or ``(out, alpha)``; differentiable once in ``x_src`` (as source
    of scores and as message), ``x_dst``, ``att``, ``edge_term`` and ``edge_score``
    (through ``alpha`` too).

    Raises
    ------
    ValueError
        An adjacency that is not a 2-D sparse COO/CSR tensor or SparseCSR, shapes that do
        not fit, tensors on different devices, ``dropout`` outside ``[0, 1]``, malformed
        sparse structure.
    TypeError
        ``x_src`` not float32/float64, or another operand of another dtype.

    Examples
    --------
    >>> A = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]]).to_sparse_csr()
    >>> x = torch.arange(6.0).reshape(3, 1, 2)             # 3 sources, 1 head, 2 features
    >>> graph_attention_v2(A, x, torch.zeros(2, 1, 2), torch.zeros(1, 2))   # att = 0: the mean
    tensor([[[1., 2.]],
    <BLANKLINE>
            [[0., 0.]]])
    """
    return run_gatv2(SPEC, adjacency, x_src, x_dst, att, negative_slope, dropout, training, return_attention,
                     edge_term, edge_score)
