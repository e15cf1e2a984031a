"""The graph layers' max aggregation (PyG's ``MaxAggregation``) as custom ops:
``tsgu::max_aggregation`` (forward: ``sparse_mm(A, x, "amax")``, with its checks),
``tsgu::max_aggregation_backward`` and ``tsgu::max_aggregation_backward2``; and
``tsgu::edge_structure_padded``, the adjacency of an ``edge_index`` (repeated edges merged
and counted) padded to a size known before it runs, an op so that a compiled layer builds
it inside its graph.

The gradient is PyG's, which differs from ``tsgu::spmm_arg``'s (arg.py) at ties: PyG
aggregates by ``torch.scatter_reduce(..., "amax", include_self=False)`` over the edges,
whose gradient splits ``G[i, k]`` evenly among every message equal to the maximum, and,
where the maximum is exactly 0, counts the 0 the scatter starts from as one more: ``k``
tied messages get ``G[i, k] / (k + 1)`` each (``messages``, where given, counts each
stored entry's messages: an edge given twice is two ties).  The backward walks the rows
in blocks of about ``_BLOCK`` products (never an edges x features temporary: a block's
is at most the output's size or ``_BLOCK``, whichever is larger).  It is itself a custom
op with a registered backward (ties held fixed, as PyG's are), so second derivatives
through the layers match PyG's; all three compile with ``fullgraph=True``.
"""
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from .. import _backends
from .._core.sparse_csr import SparseCSR
from .._core.structures import coo_structure
from .._core.validate import MM_DTYPES, ProductSpec, check_product
from .._core.view import entry_rows, view_of

_SPARSE_MM = ProductSpec("sparse_mm", MM_DTYPES)   # the contract of sparse_mm, whose amax this is
_BLOCK = 1 << 20        # products per block of rows in the backward (more where one row has more)


def max_aggregation(A: SparseCSR, x: Tensor, messages: Optional[Tensor] = None) -> Tensor:
    """``out[i, k] = max over A's stored (i, j) of A[i, j] * x[j, k]`` (0 for a row with no
    entries) for a 2-D ``A`` and ``x``, with PyG's gradient to ``x`` and to A's values."""
    return _max_aggregation(A.crow_indices, A.col_indices, list(A.size), A.values, messages, x)


@torch.library.custom_op("tsgu::max_aggregation", mutates_args=())
def _max_aggregation(ptr: Tensor, col: Tensor, shape: List[int], a: Tensor, messages: Optional[Tensor],
                     x: Tensor) -> Tensor:
    """sparse_mm(A, x, "amax") for the layers' A (2-D SparseCSR) and x (2-D), its checks included."""
    check_product(_SPARSE_MM, SparseCSR(ptr, col, a, tuple(shape)), x)
    return _backends.spmm_arg(view_of(ptr, col, a, None, shape), x, False, need_arg=False)[0]


@_max_aggregation.register_fake
def _(ptr, col, shape, a, messages, x):
    return x.new_empty((shape[0], x.shape[1]))


def edge_structure(edge_index: Tensor, n_src: int, n_dst: int) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(ptr, rows, cols, counts)``: the ``(n_dst, n_src)`` CSR pattern of the messages
    ``edge_index[0] -> edge_index[1]`` (row = target), entries sorted, an edge given k times
    one entry with ``counts`` k (int64); ``rows`` each entry's row.  ValueError for an id
    out of range (``coo_structure``'s check: in C on the CPU).  Its number of entries
    depends on the ids: see :func:`edge_structure_padded` for a compiled graph."""
    s = coo_structure(edge_index.flip(0).long().contiguous(), (n_dst, n_src))
    rows, cols = s.indices
    counts = s.values_of(torch.ones(edge_index.shape[1], dtype=torch.int64, device=edge_index.device))
    return s.ptr, rows, cols, counts


def padding_rows(num_edges: int, n_src: int) -> int:
    """The rows :func:`edge_structure_padded` adds below the n_dst targets."""
    return -(-num_edges // n_src) if n_src > 0 else 0


@torch.library.custom_op("tsgu::edge_structure_padded", mutates_args=())
def edge_structure_padded(edge_index: Tensor, n_src: int, n_dst: int) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """:func:`edge_structure` with shapes known before it runs (what a compiled graph
    needs without a graph break: an op whose output size depends on data breaks it): E
    entries (E the edges), the first ``nnz`` those of edge_structure, then ``E - nnz``
    entries with ``counts`` 0 in rows below the targets, entry ``s`` of them at row
    ``n_dst + s // n_src``, column ``s % n_src`` (strictly increasing along a row, as
    every kernel requires): a ``(n_dst + padding_rows(E, n_src), n_src)`` pattern whose
    rows past ``n_dst`` a caller drops."""
    ptr, rows, cols, counts = edge_structure(edge_index, n_src, n_dst)
    E, nnz, dev = edge_index.shape[1], cols.shape[0], edge_index.device
    pad = torch.arange(E - nnz, dtype=torch.int64, device=dev)
    ends = torch.arange(1, padding_rows(E, n_src) + 1, dtype=torch.int64, device=dev) * max(n_src, 1)
    return (torch.cat([ptr.long(), nnz + ends.clamp(max=E - nnz)]), torch.cat([rows.long(), n_dst + pad // n_src]),
            torch.cat([cols.long(), pad % max(n_src, 1)]), torch.cat([counts, torch.zeros_like(pad)]))


@edge_structure_padded.register_fake
def _(edge_index, n_src, n_dst):
    E = edge_index.shape[1]
    new = lambda k: edge_index.new_empty(k, dtype=torch.int64)  # noqa: E731
    return new(n_dst + padding_rows(E, n_src) + 1), new(E), new(E), new(E)


def _tie_blocks(ptr: Tensor, col: Tensor, a: Tensor, messages: Optional[Tensor], x: Tensor, out: Tensor):
    """Blocks of rows (r0, e0, e1, r, c, ae, xc, W): entries e0:e1, their rows ``r`` (from
    r0) and columns ``c``, their values ``ae`` (column), the gathered ``xc = x[c]`` and
    ``W``, the share of ``G[r, k]`` each entry's product receives: 1 / (the ties of
    row r at k) for a product equal to ``out[r, k]`` (times its messages), else 0."""
    n, p = out.shape
    if col.numel() == 0 or p == 0:
        return
    rows, col = entry_rows(ptr), col.long()
    per = max(n, _BLOCK // p, 1)            # products per block: the output's size or _BLOCK
    starts = torch.arange(0, col.numel(), per, device=ptr.device, dtype=ptr.dtype)
    cuts = sorted(set(torch.searchsorted(ptr, starts).tolist()) | {n})
    ends = ptr[cuts].tolist()
    for r0, r1, e0, e1 in zip(cuts[:-1], cuts[1:], ends[:-1], ends[1:]):
        if e0 == e1:
            continue
        r, c, ae = rows[e0:e1] - r0, col[e0:e1], a[e0:e1].unsqueeze(1)
        xc = x.index_select(0, c)
        top = out[r0:r1]
        tie = (xc * ae) == top.index_select(0, r)                   # the products, as the forward's
        weight = tie.to(x.dtype) if messages is None else tie * messages[e0:e1].unsqueeze(1).to(x.dtype)
        ties = torch.zeros_like(top).index_add_(0, r, weight) + (top == 0)
        yield r0, e0, e1, r, c, ae, xc, torch.where(tie, weight / ties.index_select(0, r), 0.0)


@torch.library.custom_op("tsgu::max_aggregation_backward", mutates_args=())
def _max_aggregation_backward(ptr: Tensor, col: Tensor, a: Tensor, messages: Optional[Tensor], x: Tensor,
                              out: Tensor, G: Tensor) -> Tuple[Tensor, Tensor]:
    """(da, dx): each G[i, k] split among the messages of row i whose product equals
    out[i, k] (each entry counting its messages), plus one where out[i, k] == 0 (the
    start value PyG's scatter counts, whose share is dropped)."""
    da, dx = torch.zeros(a.shape, dtype=a.dtype, device=a.device), torch.zeros_like(x)
    for r0, e0, e1, r, c, ae, xc, W in _tie_blocks(ptr, col, a, messages, x, out):
        share = W * G[r0:].index_select(0, r)                       # dL/d(product)
        dx.index_add_(0, c, share * ae)
        da[e0:e1] = (share * xc).sum(1)
    return da, dx


@_max_aggregation_backward.register_fake
def _(ptr, col, a, messages, x, out, G):
    return a.new_empty(a.shape), torch.empty_like(x)


@torch.library.custom_op("tsgu::max_aggregation_backward2", mutates_args=())
def _max_aggregation_backward2(ptr: Tensor, col: Tensor, a: Tensor, messages: Optional[Tensor], x: Tensor,
                               out: Tensor, G: Tensor, gda: Tensor, gdx: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    """The backward's own (gG, ga, gx), given the gradients gda, gdx of its outputs: the
    backward is linear in G, a and x once the ties are fixed (they are constant almost
    everywhere), ``da[e] = sum_k W G[r] x[c]`` and ``dx[c] += W G[r] a[e]``, so
    ``gG[r] += W (gda[e] x[c] + a[e] gdx[c])``, ``ga[e] = sum_k W G[r] gdx[c]`` and
    ``gx[c] += W G[r] gda[e]``."""
    gG, ga, gx = torch.zeros_like(G), torch.zeros(a.shape, dtype=a.dtype, device=a.device), torch.zeros_like(x)
    for r0, e0, e1, r, c, ae, xc, W in _tie_blocks(ptr, col, a, messages, x, out):
        share, gdxc, gdae = W * G[r0:].index_select(0, r), gdx.index_select(0, c), gda[e0:e1].unsqueeze(1)
        gG[r0:].index_add_(0, r, W * (gdae * xc + ae * gdxc))
        ga[e0:e1] = (share * gdxc).sum(1)
        gx.index_add_(0, c, share * gdae)
    return gG, ga, gx


@_max_aggregation_backward2.register_fake
def _(ptr, col, a, messages, x, out, G, gda, gdx):
    return torch.empty_like(G), a.new_empty(a.shape), torch.empty_like(x)


def _setup(ctx, inputs, output):
    ptr, col, shape, a, messages, x = inputs
    ctx.save_for_backward(ptr, col, a, messages, x, output)


def _backward(ctx, G):
    ptr, col, a, messages, x, out = ctx.saved_tensors
    da, dx = torch.ops.tsgu.max_aggregation_backward(ptr, col, a, messages, x, out, G)
    return None, None, None, da if ctx.needs_input_grad[3] else None, None, dx if ctx.needs_input_grad[5] else None


def _setup_backward(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _backward_backward(ctx, gda, gdx):
    ptr, col, a, messages, x, out, G = ctx.saved_tensors
    gda = torch.zeros_like(a) if gda is None else gda
    gdx = torch.zeros_like(x) if gdx is None else gdx
    gG, ga, gx = torch.ops.tsgu.max_aggregation_backward2(ptr, col, a, messages, x, out, G, gda, gdx)
    need = ctx.needs_input_grad
    return None, None, ga if need[2] else None, None, gx if need[4] else None, None, gG if need[6] else None


_max_aggregation.register_autograd(_backward, setup_context=_setup)
_max_aggregation_backward.register_autograd(_backward_backward, setup_context=_setup_backward)
