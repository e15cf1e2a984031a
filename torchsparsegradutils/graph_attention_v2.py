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

import torch
from torch import Tensor

from . import _backends
from ._core.intake import as_csr
from ._core.sparse_csr import SparseCSR
from ._core.validate import SUPPORTED_DTYPES, dtype_names, eager_only
from ._core.view import CSRView, check_arrays
from ._ops.gatv2 import gatv2

__all__ = ["graph_attention_v2"]


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
    _check(adjacency, x_src, x_dst, att, dropout, edge_term, edge_score)
    seed, drop, scale = None, 0, 1.0
    if training and dropout > 0:
        seed = torch.randint(-2**63, 2**63 - 1, (1,), dtype=torch.int64, device=x_src.device)  # PyTorch's generator
        drop = round(dropout * 2**24)
        scale = 1.0 / (1.0 - dropout) if dropout < 1 else 0.0
    if isinstance(adjacency, SparseCSR):
        view = CSRView(adjacency.crow_indices, adjacency.col_indices, None, 1, *adjacency.size, adjacency.shape)
    else:
        view = _pattern(adjacency)
    nnz, (H, C) = view.col.shape[0], att.shape
    for name, t, want in (("edge_term", edge_term, (nnz, H, C)), ("edge_score", edge_score, (nnz, H))):
        if t is not None and tuple(t.shape) != want:
            raise ValueError(f"graph_attention_v2: {name} must be {want} (one row per stored entry), got "
                             f"{tuple(t.shape)}")
    out, alpha = gatv2(view, x_src, x_dst, att, edge_term, edge_score, seed, drop, scale, float(negative_slope))
    if not return_attention:
        return out
    if drop:
        alpha = torch.where(_backends.gat_dropped(seed, *alpha.shape, drop), 0.0, alpha * scale)
    return out, alpha


@eager_only
def _pattern(A: Tensor) -> CSRView:
    """A torch sparse tensor's CSR pattern (a COO one's coalesced): a graph break under torch.compile."""
    return as_csr(A.detach())


def _check(A, xl, xr, att, dropout, et, b) -> None:
    name = "graph_attention_v2"
    if not isinstance(A, (Tensor, SparseCSR)) or A.layout not in (torch.sparse_coo, torch.sparse_csr):
        raise ValueError(f"{name} takes the adjacency as a 2-D sparse COO or CSR tensor or a SparseCSR, got "
                         f"{A.layout if isinstance(A, Tensor) else type(A).__name__}")
    if A.dim() != 2 or (isinstance(A, Tensor) and A.dense_dim() != 0):
        raise ValueError(f"{name} takes a 2-D adjacency (n, m) with no dense dimensions, got shape {tuple(A.shape)}")
    if isinstance(A, SparseCSR):
        check_arrays(A.crow_indices, A.col_indices, None, A.size)
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
