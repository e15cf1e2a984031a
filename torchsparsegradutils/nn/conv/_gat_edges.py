"""GATConv's and GATv2Conv's edges, as PyTorch Geometric handles them: the given self loops removed and
one per node added, repeated edges merged into one pattern entry (their copies' share
folded into an additive score), the added loops' edge_attr by fill_value, and the
attention weights' output forms (per edge, or a torch sparse tensor for a sparse
adjacency); for GATv2Conv, the per-entry edge terms and repeated edges' scores
(_v2_entry_terms)."""
import math
from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F

from ..._core.intake import checked_view
from ..._core.sparse_csr import SparseCSR
from ..._core.structures import coo_structure
from ..._core.torch_sparse import coo_tensor, csr_tensor
from ..._core.view import entry_rows
from ._edge_index import cached, is_sparse_adjacency, sparse_entries


class _Dup(NamedTuple):
    """The repeated edges of a plan: occ, the positions (in plan.edge_index) of the copies
    of entries stored more than once; slot, each copy's group (0..S-1); entries, the
    pattern entry of each group; single, the positions of the edges stored once."""
    occ: torch.Tensor
    slot: torch.Tensor
    entries: torch.Tensor
    single: torch.Tensor


class _Plan(NamedTuple):
    """A (n_target, n_source) SparseCSR pattern, each (target, source) once; edge_index (2,
    E') PyG's edges after its self-loop handling; inv (E',) each edge's entry; keep (E,)
    bool, which given edges were kept (None without self loops); kept_targets their
    targets; rows (nnz,) each entry's row; dup, the repeated edges (None if none)."""
    A: SparseCSR
    edge_index: torch.Tensor
    inv: torch.Tensor
    keep: Optional[torch.Tensor]
    kept_targets: Optional[torch.Tensor]
    rows: torch.Tensor
    dup: Optional[_Dup]


def _build_plan(edge_index: torch.Tensor, n_src: int, n_dst: int, loops: Optional[int]) -> _Plan:
    """_Plan of edge_index (2, E) on (n_src sources, n_dst targets); loops: the number of
    self loops to add after removing the given ones (None: leave the edges as they are)."""
    ei = edge_index.long()
    src, dst = ei[0], ei[1]
    if ei.numel() and (int(ei.min()) < 0 or int(src.max()) >= n_src or int(dst.max()) >= n_dst):
        raise ValueError(f"edge_index has a node id out of range: sources must be in [0, {n_src}) and targets "
                         f"in [0, {n_dst})")
    keep = kept_targets = None
    if loops is not None:
        keep = src != dst
        src, dst = src[keep], dst[keep]
        kept_targets = dst
        ar = torch.arange(loops, device=ei.device)
        src, dst = torch.cat([src, ar]), torch.cat([dst, ar])
        ei = torch.stack([src, dst])
    stride = max(n_src, 1)
    uniq, inv, counts = torch.unique(dst * stride + src, sorted=True, return_inverse=True, return_counts=True)
    rows, cols = uniq // stride, uniq % stride
    ptr = torch.zeros(n_dst + 1, dtype=torch.int64, device=ei.device)
    torch.cumsum(torch.bincount(rows, minlength=n_dst), 0, out=ptr[1:])
    A = SparseCSR(ptr, cols, torch.ones(1, device=ei.device).expand(cols.shape[0]), (n_dst, n_src))
    dup = None
    multi = counts > 1
    if bool(multi.any()):
        entries = multi.nonzero().reshape(-1)
        slot_of = torch.full_like(counts, -1)
        slot_of[entries] = torch.arange(entries.shape[0], device=ei.device)
        occ_slot = slot_of[inv]
        occ = (occ_slot >= 0).nonzero().reshape(-1)
        dup = _Dup(occ, occ_slot[occ], entries, (occ_slot < 0).nonzero().reshape(-1))
    return _Plan(A, ei, inv, keep, kept_targets, rows, dup)


def _entry_scores(plan: _Plan, s, d, e_occ, slope: float):
    """(edge_score (nnz, heads) or None, share (copies, heads) or None): the additive score
    of each pattern entry, and each repeated edge's copy's share of its entry's weight.
    An edge stored once takes its own edge score.  An entry standing for k copies with
    scores z + e_1..e_k (z = s[j] + d[i]) gets c with LeakyReLU(z + c) = log sum_k
    exp(LeakyReLU(z + e_k)): its softmax weight is the copies' summed, and out and every
    gradient are PyG's (c is differentiable in s, d and the e_k)."""
    nnz, H = plan.A.col_indices.shape[0], s.shape[1]
    if plan.dup is None:
        if e_occ is None:
            return None, None
        return e_occ.new_zeros(nnz, H).index_add(0, plan.inv, e_occ), None
    if slope < 0:
        raise ValueError(f"GATConv: a repeated edge needs negative_slope >= 0 (LeakyReLU invertible), got {slope}")
    dup = plan.dup
    z0 = s.index_select(0, plan.A.col_indices[dup.entries]) + d.index_select(0, plan.rows[dup.entries])
    z = z0.index_select(0, dup.slot)
    if e_occ is not None:
        z = z + e_occ.index_select(0, dup.occ)
    w = F.leaky_relu(z, slope)
    S = dup.entries.shape[0]
    mx = w.detach().new_full((S, H), -math.inf).scatter_reduce(0, dup.slot[:, None].expand(-1, H), w.detach(),
                                                                 "amax")
    lse = torch.log(w.new_zeros(S, H).index_add(0, dup.slot, torch.exp(w - mx.index_select(0, dup.slot)))) + mx
    inverse = lse if slope == 0 else torch.where(lse > 0, lse, lse * (1.0 / slope))   # lse > 0 when slope == 0
    c = inverse - z0
    e_entry = c.new_zeros(nnz, H).index_add(0, dup.entries, c)
    if e_occ is not None:
        e_entry = e_entry.index_add(0, plan.inv.index_select(0, dup.single), e_occ.index_select(0, dup.single))
    return e_entry, torch.exp(w - lse.index_select(0, dup.slot))


def _loop_attr(ea: torch.Tensor, targets: torch.Tensor, N: int, fill) -> torch.Tensor:
    """(N, D): the self loops' edge_attr by fill_value, as PyG's add_self_loops: a constant,
    or the reduction of the node's incoming edges' (ea (E, D), their targets)."""
    D = ea.shape[1]
    if isinstance(fill, torch.Tensor):
        t = fill.to(ea.device, ea.dtype)
        return (t if t.dim() == 2 else t.reshape(1, -1)).expand(N, D).contiguous()
    if not isinstance(fill, str):
        return ea.new_full((N, D), float(fill))
    idx = targets[:, None].expand(-1, D)
    if fill in ("add", "sum"):
        return ea.new_zeros(N, D).scatter_add(0, idx, ea)
    if fill == "mean":
        count = ea.new_zeros(N).index_add(0, targets, ea.new_ones(targets.shape[0])).clamp(min=1)
        return ea.new_zeros(N, D).scatter_add(0, idx, ea) / count[:, None]
    if fill == "mul":
        return ea.new_ones(N, D).scatter_reduce(0, idx, ea, "prod", include_self=True)
    return ea.new_zeros(N, D).scatter_reduce(0, idx, ea, "a" + fill, include_self=False)


def _csr_of(adj: torch.Tensor) -> SparseCSR:
    """A torch sparse CSC matrix's pattern as a SparseCSR."""
    rows, cols, _ = sparse_entries(adj)
    s = coo_structure(torch.stack([rows, cols]), tuple(adj.shape))
    cols = s.indices[-1]
    return SparseCSR(s.ptr, cols, torch.ones(1, device=cols.device).expand(cols.shape[0]), tuple(adj.shape))


def _sparse_weights(given, A, alpha: torch.Tensor) -> torch.Tensor:
    """alpha (nnz, heads) on the pattern A (what the attention ran on) as a torch sparse
    tensor (n_target, n_source, heads): COO for a COO adjacency, else CSR."""
    if isinstance(A, SparseCSR):
        ptr, col = A.crow_indices, A.col_indices
    else:
        ptr, col = _pattern_arrays(A)
    n, m = A.shape if not isinstance(A, SparseCSR) else A.size
    size = (n, m, alpha.shape[1])
    if isinstance(given, torch.Tensor) and given.layout == torch.sparse_coo:
        idx = torch.stack([entry_rows(ptr), col.long()])
        return coo_tensor(idx, alpha, size, is_coalesced=True)
    return csr_tensor(ptr, col, alpha, size)


def _layer_plan(layer, edge_index, n_src: int, n_dst: int, loops: int, device) -> _Plan:
    """The attention pattern of a GAT layer's edge_index (or sparse adjacency) with PyG's
    self-loop handling (layer.add_self_loops), its repeated edges merged: cached on the
    layer while the same contents come back."""
    with_loops = layer.add_self_loops
    if is_sparse_adjacency(edge_index):
        rows, cols, _ = sparse_entries(edge_index)
        ei = torch.stack([cols.long(), rows.long()])       # (source, target)
        key = ("sparse", edge_index.layout if isinstance(edge_index, torch.Tensor) else "SparseCSR",
               n_src, n_dst, loops, device, with_loops)
    else:
        ei = edge_index
        key = ("edge_index", n_src, n_dst, loops, device, with_loops)
    return cached(layer, key, ei, lambda: _build_plan(ei.to(device), n_src, n_dst, loops if with_loops else None))


def _plan_edge_attr(edge_attr, edge_index, plan: _Plan, loops: int, edge_dim: int, fill_value,
                    dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """(E', edge_dim): a GAT layer's edge_attr ((E,) or (E, edge_dim), checked) for every
    edge of plan.edge_index: the kept edges', then the self loops' by fill_value; cast
    to dtype first where given."""
    if not isinstance(edge_attr, torch.Tensor):
        raise ValueError(f"edge_attr must be a tensor or None, got {type(edge_attr).__name__}")
    E = edge_index.shape[1]
    ea = edge_attr.reshape(-1, 1) if edge_attr.dim() == 1 else edge_attr
    if ea.dim() != 2 or ea.shape[0] != E or ea.shape[1] != edge_dim:
        raise ValueError(f"edge_attr must be (E, edge_dim) = ({E}, {edge_dim}), got {tuple(edge_attr.shape)}")
    if dtype is not None:
        ea = ea.to(dtype)
    if plan.keep is not None:
        ea = ea[plan.keep]
        ea = torch.cat([ea, _loop_attr(ea, plan.kept_targets, loops, fill_value)])
    return ea


def _layer_output(out: torch.Tensor, alpha, concat: bool, res, bias, sparse_given, A, plan: Optional[_Plan], share):
    """A GAT layer's result as PyG returns it, from the attention's output (n, H, C) and
    weights alpha (per entry of A; None unless asked for): heads concatenated (concat) or
    averaged, the residual res and the bias added (each None where absent); with alpha,
    (out, weights) in PyG's form: for a sparse adjacency given (sparse_given, else None)
    the sparse tensor of the weights on its pattern, else (edge_index, one weight per
    edge occurrence, a repeated edge's split by `share`) from the plan."""
    out = out.flatten(1) if concat else out.mean(1)
    if res is not None:
        out = out + res
    if bias is not None:
        out = out + bias
    if alpha is None:
        return out
    if sparse_given is not None:
        return out, (_sparse_weights(sparse_given, A, alpha), alpha)
    alpha_occ = alpha.index_select(0, plan.inv)
    if share is not None:
        occ = plan.dup.occ
        alpha_occ = alpha_occ.index_copy(0, occ, alpha_occ.index_select(0, occ) * share)
    return out, (plan.edge_index, alpha_occ)


def _pattern_arrays(A: torch.Tensor):
    """(row pointers, columns) of a 2-D torch sparse tensor (a COO one's coalesced pattern)."""
    view = checked_view(A.detach())
    return view.ptr, view.col


def _v2_entry_terms(plan: _Plan, xl, xr, att, ea_occ, W_edge, slope: float):
    """GATv2Conv's per-entry operands of graph_attention_v2 on plan's pattern, for xl (m,
    H, C), xr (n, H, C), att (H, C), ea_occ (E', D) the edges' edge_attr in plan.edge_index's
    order (or None) and W_edge (H*C, D): (edge_term (nnz, H, C) or None, edge_score (nnz, H)
    or None, share (copies, H) or None).  An edge stored once takes lin_edge of its own
    edge_attr as its edge term.  An entry standing for k copies takes none (0), and the
    additive score lse_k(z_k) - z_0 (z_k a copy's score with its edge term, z_0 the entry's
    without): its softmax weight is the copies' summed, so out and every gradient are PyG's
    (copies with different edge_attr included); share is each copy's part of it."""
    nnz, (H, C) = plan.A.col_indices.shape[0], att.shape
    dup = plan.dup
    et = None
    if ea_occ is not None:
        single = plan.inv if dup is None else plan.inv.index_select(0, dup.single)
        src = ea_occ if dup is None else ea_occ.index_select(0, dup.single)
        ea = ea_occ.new_zeros(nnz, ea_occ.shape[1]).index_copy(0, single, src)
        et = F.linear(ea, W_edge).view(nnz, H, C)
    if dup is None:
        return et, None, None
    u0 = xl.index_select(0, plan.A.col_indices[dup.entries]) + xr.index_select(0, plan.rows[dup.entries])
    z0 = (F.leaky_relu(u0, slope) * att).sum(-1)
    u = u0.index_select(0, dup.slot)
    if ea_occ is not None:
        u = u + F.linear(ea_occ.index_select(0, dup.occ), W_edge).view(-1, H, C)
    z = (F.leaky_relu(u, slope) * att).sum(-1)
    S = dup.entries.shape[0]
    mx = z.detach().new_full((S, H), -math.inf).scatter_reduce(0, dup.slot[:, None].expand(-1, H), z.detach(),
                                                                 "amax")
    lse = torch.log(z.new_zeros(S, H).index_add(0, dup.slot, torch.exp(z - mx.index_select(0, dup.slot)))) + mx
    b = z0.new_zeros(nnz, H).index_add(0, dup.entries, lse - z0)
    return et, b, torch.exp(z - lse.index_select(0, dup.slot))
