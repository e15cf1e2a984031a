"""Grouped products (gather_mm, segment_mm): dense rows, each group by its own matrix."""
import torch

from ..._core.native import STATUS


def group_rows(idx: torch.Tensor, R: int):
    """(off, perm) as cpu.group_rows gives them."""
    if idx.numel() and bool(((idx < 0) | (idx >= R)).any()):
        raise ValueError(STATUS["EGROUP"])
    off = torch.zeros(R + 1, dtype=torch.int64, device=idx.device)
    torch.cumsum(torch.bincount(idx, minlength=R), 0, out=off[1:])
    return off, torch.argsort(idx, stable=True)


def grouped_mm(off: torch.Tensor, perm, a: torch.Tensor, M: torch.Tensor) -> torch.Tensor:
    """out[i] = a[i] @ M[r] for the rows i of group r (perm None: group r is the rows
    off[r]..off[r+1]-1)."""
    if M.dim() != 3 or M.shape[:2] != (off.shape[0] - 1, a.shape[1]):     # as the C glue checks
        raise ValueError(f"b must have shape ({off.shape[0] - 1}, {a.shape[1]}, P), got {tuple(M.shape)}")
    lengths = _group_lengths(off, perm, a.shape[0])        # checked before perm is read through
    parts = torch.split(_in_group_order(a, perm), lengths)
    out = torch.cat([p @ M[r] for r, p in enumerate(parts)]) if parts else a.new_empty(0, M.shape[2])
    return out if perm is None else torch.empty_like(out).index_copy_(0, perm, out)


def grouped_mm_tn(off: torch.Tensor, perm, a: torch.Tensor, G: torch.Tensor) -> torch.Tensor:
    """out[r] = sum over the rows i of group r of a[i]^T G[i]."""
    if G.dim() != 2 or G.shape[0] != a.shape[0]:                          # as the C glue checks
        raise ValueError(f"grad must have shape ({a.shape[0]}, P), got {tuple(G.shape)}")
    out = torch.empty(off.shape[0] - 1, a.shape[1], G.shape[1], dtype=a.dtype, device=a.device)
    lengths = _group_lengths(off, perm, a.shape[0])
    for r, (ap, gp) in enumerate(zip(torch.split(_in_group_order(a, perm), lengths),
                                     torch.split(_in_group_order(G, perm), lengths))):
        torch.mm(ap.t(), gp, out=out[r])
    return out


def _group_lengths(off: torch.Tensor, perm, n: int):
    """The group sizes of offsets off as a list, the grouping checked as the C kernels
    check it (csrc/groups_check.c)."""
    lengths = torch.diff(off).tolist()
    if off[0] != 0 or sum(lengths) != n or min(lengths, default=0) < 0:
        raise ValueError(STATUS["EGROUP"])
    if perm is not None and n and (perm.shape != (n,) or bool(((perm < 0) | (perm >= n)).any())
                                   or bool((torch.bincount(perm, minlength=n) != 1).any())):
        raise ValueError(STATUS["EGROUP"])
    return lengths


def _in_group_order(X: torch.Tensor, perm) -> torch.Tensor:
    return X if perm is None else X.index_select(0, perm)
