"""Dense references: each op's computation in dense PyTorch, what the registry's cases and
the op's own tests compare it with."""
import torch

import torchsparsegradutils as tsgu

from support.operands import compressed_positions


def dense_product(C) -> torch.Tensor:
    """The dense matrix of a sparse product C (a torch sparse tensor or SparseCSR),
    differentiable in its values (PyTorch's to_dense() cannot differentiate a batched CSR)."""
    if isinstance(C, tsgu.SparseCSR) or (C.layout == torch.sparse_csr and C.dim() == 3):
        ptr, col, values = (C.crow_indices, C.col_indices, C.values) if isinstance(C, tsgu.SparseCSR) else \
            (C.crow_indices(), C.col_indices(), C.values())
        rows, cols = compressed_positions(ptr, col)
        b, n, m = (C.shape[0] if len(C.shape) == 3 else 1), C.shape[-2], C.shape[-1]
        return torch.zeros(b * n, m, dtype=values.dtype).index_put((rows, cols), values.reshape(-1)).reshape(C.shape)
    return C.to_dense()


def dense_reduce(Dv: torch.Tensor, pattern: torch.Tensor, B: torch.Tensor, reduce: str) -> torch.Tensor:
    """torch.sparse.mm(A, B, reduce) in dense PyTorch, in float32 at least (a 16-bit
    result rounded once, as the kernels round it): the (.., n, m, p) products of A's
    stored entries (`pattern`) reduced over m, 0 for a row without entries."""
    dtype = Dv.dtype
    work = torch.promote_types(dtype, torch.float32)
    P = Dv.to(work).unsqueeze(-1) * B.to(work).unsqueeze(-3)
    mask = pattern.unsqueeze(-1)
    count = pattern.sum(-1, keepdim=True)
    if reduce == "mean" or P.shape[-2] == 0:
        out = torch.where(mask, P, 0).sum(-2) / count.clamp(min=1)
    else:
        fill = torch.where(mask, P, float("inf") if reduce == "amin" else float("-inf"))
        out = fill.amin(-2) if reduce == "amin" else fill.amax(-2)
    return torch.where(count > 0, out, 0).to(dtype)


def dense_trisolve(M, B, upper, unit, transpose):
    if unit:
        M = M + torch.eye(M.shape[-1], dtype=M.dtype)
    if transpose:
        return torch.linalg.solve_triangular(M.transpose(-2, -1), B, upper=not upper)
    return torch.linalg.solve_triangular(M, B, upper=upper)


def dense_logsumexp(Dv, pattern, dim, keepdim, include_zeros):
    if not include_zeros:
        Dv = torch.where(pattern, Dv, torch.full_like(Dv, float("-inf")))
    return torch.logsumexp(Dv, dim, keepdim=keepdim)


def dense_softmax(Dv, pattern, dim, log):
    """The masked dense softmax: the absent entries are -inf (an empty group gives NaN,
    read nowhere)."""
    X = torch.where(pattern, Dv, torch.full_like(Dv, float("-inf")))
    return (torch.log_softmax if log else torch.softmax)(X, dim)


def dense_gcn_adjacency(edge_index: torch.Tensor, n: int, w: torch.Tensor) -> torch.Tensor:
    """D^-1/2 Â D^-1/2, Â[target, source] the summed weights with PyG's remaining self loops
    (an explicit loop kept once, the last listed weight; 1 elsewhere); differentiable in w."""
    tgt, src = edge_index[1].long(), edge_index[0].long()
    loop = tgt == src
    A = torch.zeros(n, n, dtype=w.dtype).index_put((tgt[~loop], src[~loop]), w[~loop], accumulate=True)
    diag = torch.ones(n, dtype=w.dtype)
    for e in torch.nonzero(loop).flatten().tolist():
        diag = diag.index_put((tgt[e:e + 1],), w[e:e + 1])
    A = A + torch.diag(diag)
    d = A.sum(1).rsqrt()
    return d[:, None] * A * d[None, :]


SAGE_AGGRS = ("mean", "max", "sum")


def dense_sage(x_src, x_dst, edge_index, aggr, Wl, b, Wr):
    """PyTorch Geometric's SAGEConv by scatter over the listed edges (source -> target):
    a repeated edge is a message each time; a node without neighbours aggregates to 0."""
    src, dst = edge_index[0].long(), edge_index[1].long()
    msg, n = x_src[src], x_dst.shape[0]
    if aggr == "max":
        agg = x_src.new_zeros(n, x_src.shape[1]).scatter_reduce(0, dst[:, None].expand_as(msg), msg, "amax",
                                                                include_self=False)
    else:
        agg = x_src.new_zeros(n, x_src.shape[1]).index_add(0, dst, msg)
        if aggr == "mean":
            agg = agg / torch.bincount(dst, minlength=n).clamp(min=1)[:, None].to(x_src.dtype)
    out = agg @ Wl.t()
    out = out + b if b is not None else out
    return out + x_dst @ Wr.t() if Wr is not None else out


def dense_graph_attention(pattern, x, s, d, slope=0.2, edge_score=None):
    """graph_attention in dense PyTorch: per head, the softmax over each row of
    LeakyReLU(s[j] + d[i] (+ edge_score at the entry)) masked to the (n, m) boolean
    pattern (absent entries -inf; a row without entries gives zeros), then alpha @ x; x
    (m, H, F), s (m, H), d (n, H), edge_score (nnz, H) in the pattern's row-major order."""
    z = s.t()[:, None, :] + d.t()[:, :, None]
    if edge_score is not None:
        z = z + dense_edge_score(pattern, edge_score)
    e = torch.nn.functional.leaky_relu(z, slope).masked_fill(~pattern, float("-inf"))
    alpha = torch.softmax(e, -1).nan_to_num(0.0)
    return torch.einsum("hnm,mhf->nhf", alpha, x)


def dense_graph_attention_v2(pattern, xl, xr, att, slope=0.2, edge_term=None, edge_score=None):
    """(out (n, H, C), alpha (nnz, H)): graph_attention_v2 in dense PyTorch: per head, the
    softmax over each row of sum_c att[h,c] LeakyReLU(xl[j,h,c] + xr[i,h,c] (+ edge_term))
    (+ edge_score), masked to the (n, m) boolean pattern (absent entries -inf; a row
    without entries gives zeros), then alpha @ xl; the (nnz, ...) operands and alpha in the
    pattern's row-major order.  Builds (n, m, H, C): small cases only."""
    u = xl[None, :] + xr[:, None]                                  # (n, m, H, C)
    if edge_term is not None:
        mask = pattern[..., None, None].expand(u.shape)
        u = u + torch.zeros(u.shape, dtype=u.dtype).masked_scatter(mask, edge_term)
    z = (torch.nn.functional.leaky_relu(u, slope) * att).sum(-1)   # (n, m, H)
    if edge_score is not None:
        mask = pattern[..., None].expand(z.shape)
        z = z + torch.zeros(z.shape, dtype=z.dtype).masked_scatter(mask, edge_score)
    alpha = torch.softmax(z.masked_fill(~pattern[..., None], float("-inf")), 1).nan_to_num(0.0)
    return torch.einsum("nmh,mhc->nhc", alpha, xl), alpha[pattern]


def dense_edge_score(pattern, edge_score):
    """(H, n, m): edge_score (nnz, H), one row per True of the (n, m) pattern in row-major
    order, at its entry (zeros elsewhere); differentiable."""
    H = edge_score.shape[1]
    mask = pattern.expand(H, *pattern.shape)
    return torch.zeros(mask.shape, dtype=edge_score.dtype).masked_scatter(mask, edge_score.t().contiguous())


def dense_gat_conv(x, edge_index, W, att_src, att_dst, b, concat, loops, slope=0.2):
    """GATConv in dense PyTorch with PyG's semantics: each edge (source -> target) counted
    once per occurrence (a repeated edge's copies each take the share exp(e)/sum); with
    loops, the given self loops dropped and one per node added.  Per head, the softmax
    over each row of LeakyReLU(s[j] + d[i]) + log(count), then alpha @ h."""
    n, (_, H, C) = x.shape[0], att_src.shape
    tgt, src = edge_index[1].long(), edge_index[0].long()
    if loops:
        keep = tgt != src
        tgt, src = torch.cat([tgt[keep], torch.arange(n)]), torch.cat([src[keep], torch.arange(n)])
    count = torch.zeros(n, n, dtype=x.dtype).index_put((tgt, src), torch.ones(tgt.shape[0], dtype=x.dtype),
                                                      accumulate=True)
    h = (x @ W.t()).reshape(n, H, C)
    s, d = (h * att_src).sum(-1), (h * att_dst).sum(-1)
    z = torch.nn.functional.leaky_relu(s.t()[:, None, :] + d.t()[:, :, None], slope) + count.clamp(min=1).log()
    alpha = torch.softmax(z.masked_fill(count == 0, float("-inf")), -1).nan_to_num(0.0)
    out = torch.einsum("hnm,mhf->nhf", alpha, h)
    return (out.reshape(n, H * C) if concat else out.mean(1)) + b
