"""Shared test helpers: fixed seeds, random sparse operands in every layout and
memory arrangement, dense references, the registry of public ops (one `Op`
entry per op) that test_hygiene.py and test_properties.py sweep, and a runner
for calls that might crash the interpreter (they run in a child process).

Test files import what they need with ``from conftest import ...``.
"""
import contextlib
import json
import os
import resource
import subprocess
import sys
import textwrap
import zlib
from dataclasses import dataclass, field
from typing import Callable, Dict, Optional, Tuple

import pytest
import torch

# JAX (tests of the JAX bridge) on the CPU, beside the torch CPU tensors the tests
# build, also where a GPU build of JAX is installed; and without taking the GPU's
# memory ahead of the tests that use it
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import torchsparsegradutils as tsgu

# Set by .ci/sanitize when the C extension is an ASan+UBSan build: tests that
# need a memory limit (RLIMIT_AS and ASan's shadow memory do not mix) or that
# measure peak memory skip themselves under it.
SANITIZED = bool(os.environ.get("TSGU_SANITIZE"))
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(tsgu.__file__)))


# ---------------------------------------------------------------- seeds and threads
def seeded(*key) -> torch.Generator:
    """A generator seeded from `key`; the same seed in every process (unlike hash())."""
    return torch.Generator().manual_seed(zlib.crc32(repr(key).encode()))


@pytest.fixture(autouse=True)
def _fixed_global_seed():
    """Tests that draw from torch's global generator get the same numbers every run."""
    torch.manual_seed(0)


@contextlib.contextmanager
def num_threads(t: int):
    old = torch.get_num_threads()
    torch.set_num_threads(t)
    try:
        yield
    finally:
        torch.set_num_threads(old)


# ---------------------------------------------------------------- sparse operands
def random_dense(batch, n, m, nnz, dtype, gen, empty_rows=True):
    """Dense (batch, n, m) with exactly min(nnz, cells) nonzeros per item; row 0 empty if asked."""
    out = torch.zeros(batch, n, m, dtype=dtype)
    first = 1 if empty_rows and n > 1 else 0
    cells = (n - first) * m
    k = min(nnz, cells)
    for b in range(batch):
        pos = torch.randperm(cells, generator=gen)[:k] + first * m
        vals = torch.randn(k, generator=gen, dtype=dtype)
        out[b].view(-1)[pos] = torch.where(vals == 0, torch.ones_like(vals), vals)
    return out


# COO layouts: the index array as coalesce() leaves it, uncoalesced (duplicates,
# shuffled), a slice of a wider buffer, column-major, every other column of a
# buffer, and one entry repeated through an expanded (stride-0) index array.
# The coalesced arrangements are built with is_coalesced=True, so the op reads
# the strided array itself.  CSR: plain, or crow/col/values as strided views.
COO_LAYOUTS = ("coo", "coo_uncoalesced", "coo_sliced", "coo_colmajor", "coo_step", "coo_expanded")
CSR_LAYOUTS = ("csr", "csr_strided")
LAYOUTS = COO_LAYOUTS + CSR_LAYOUTS
FULL_RANK_LAYOUTS = tuple(lay for lay in LAYOUTS if lay != "coo_expanded")   # one entry: singular for n > 1


def _strided(t: torch.Tensor, how: str) -> torch.Tensor:
    """t (1D or 2D) with the same values in another memory arrangement."""
    if how == "sliced":            # a prefix of a longer buffer (what coalesce() returns)
        return torch.cat([t, t], -1)[..., : t.shape[-1]]
    if how == "colmajor":
        return t.t().contiguous().t() if t.dim() == 2 else t
    if how == "step":              # every other element of a buffer twice as long
        return torch.stack([t, t], -1).reshape(*t.shape[:-1], 2 * t.shape[-1])[..., ::2]
    raise ValueError(how)


def to_sparse(D: torch.Tensor, layout: str, itype=torch.int64, gen=None) -> torch.Tensor:
    """A sparse tensor in `layout` (see LAYOUTS) for the dense (n, m) or (b, n, m) D.
    "coo_expanded" keeps only D's first stored entry (its indices are one column
    expanded), so take the reference from the returned tensor, not from D."""
    if layout.startswith("csr"):
        S = D.to_sparse_csr()
        crow, col, val = S.crow_indices().to(itype), S.col_indices().to(itype), S.values()
        if layout == "csr_strided":
            crow, col, val = _strided(crow, "step"), _strided(col, "step"), _strided(val, "step")
        return torch.sparse_csr_tensor(crow, col, val, D.shape)
    A = D.to_sparse().coalesce()
    idx, val = A.indices(), A.values()
    if layout == "coo":
        return A
    if layout == "coo_unflagged":      # sorted and unique, but not flagged coalesced
        return torch.sparse_coo_tensor(idx, val, D.shape)
    if layout in ("coo_sliced", "coo_colmajor", "coo_step"):
        return torch.sparse_coo_tensor(_strided(idx, layout[4:]), val, D.shape, is_coalesced=True)
    if layout == "coo_expanded":
        k = min(val.numel(), 1) * 3
        parts = val[:1].repeat(k) * torch.tensor([0.5, 0.25, 0.25], dtype=val.dtype)[:k]
        return torch.sparse_coo_tensor(idx[:, :1].expand(-1, k), parts, D.shape)
    assert layout == "coo_uncoalesced", layout
    nd = max(1, val.numel() // 3) if val.numel() else 0
    part = torch.rand(nd, generator=gen, dtype=val.dtype)
    val = val.clone()
    dup_val = val[:nd] * part
    val[:nd] -= dup_val
    idx2 = torch.cat([idx, idx[:, :nd]], 1)
    val2 = torch.cat([val, dup_val])
    perm = torch.randperm(val2.numel(), generator=gen)
    return torch.sparse_coo_tensor(idx2[:, perm], val2[perm], D.shape)


def values_of(A: torch.Tensor) -> torch.Tensor:
    return A._values() if A.layout == torch.sparse_coo else A.values()


def structure_of(A: torch.Tensor) -> Tuple[torch.Tensor, ...]:
    """The index arrays of A as stored (no copy, strides kept)."""
    if A.layout == torch.sparse_coo:
        return (A._indices(),)
    return A.crow_indices(), A.col_indices()


def leaf_like(t: torch.Tensor) -> torch.Tensor:
    """A fresh leaf tensor with t's values, sizes and strides."""
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype).copy_(t)


def rebuild(A: torch.Tensor, values: torch.Tensor, ours: bool = True) -> torch.Tensor:
    """A's structure (its own index arrays) holding `values`, made by the usual
    constructor: torch.sparse_coo_tensor (keeping A's coalesced flag), or for CSR
    our sparse_csr_tensor (`ours`) or torch's."""
    if A.layout == torch.sparse_coo:
        return torch.sparse_coo_tensor(A._indices(), values, A.shape, is_coalesced=A.is_coalesced())
    make = tsgu.sparse_csr_tensor if ours else torch.sparse_csr_tensor
    return make(A.crow_indices(), A.col_indices(), values, A.shape)


def entry_indices(A: torch.Tensor) -> Tuple[torch.Tensor, ...]:
    """(batch?, row, col) of every stored entry in A's value order, by torch ops alone."""
    if A.layout == torch.sparse_coo:
        return tuple(A._indices().long())
    crow, col = A.crow_indices().long(), A.col_indices().long()
    n = A.shape[-2]
    counts = (crow[..., 1:] - crow[..., :-1]).reshape(-1)
    rows = torch.repeat_interleave(torch.arange(counts.numel()), counts)
    if A.dim() == 3:
        return rows // n, rows % n, col.reshape(-1)
    return rows, col


def dense_of(A: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """The dense matrix of A's structure holding `values` (duplicates summed),
    differentiable in `values`: the reference every op is compared with."""
    out = torch.zeros(A.shape, dtype=values.dtype)
    return out.index_put(entry_indices(A), values.reshape(-1), accumulate=True)


def pattern_of(A: torch.Tensor) -> torch.Tensor:
    """Boolean (..., n, m): where A stores an entry."""
    return dense_of(A, torch.ones(values_of(A).shape, dtype=torch.float64)) > 0


# ---------------------------------------------------------------- dense operands
B_MODES = ("contig", "colmajor", "sliced", "expanded", "neg")


def dense_operand(shape, dtype, gen, mode: str = "contig") -> torch.Tensor:
    """A random dense tensor in one memory arrangement: contiguous, column-major,
    a slice of a wider buffer, expanded (stride 0 on the second-to-last dim), or
    with PyTorch's negative bit set (is_neg(): its values are minus its memory)."""
    X = torch.randn(shape, generator=gen, dtype=dtype)
    if mode == "contig" or X.dim() == 0 and mode != "neg" or X.dim() == 1 and mode == "colmajor":
        return X
    if mode == "colmajor":
        return X.transpose(-1, -2).contiguous().transpose(-1, -2)
    if mode == "sliced":
        return torch.cat([X, X], -1)[..., : X.shape[-1]]
    if mode == "expanded":
        if X.dim() < 2:
            return X[:1].expand(X.shape)
        return X[..., :1, :].expand(X.shape)
    if mode == "neg":
        return (-X)._neg_view()
    raise ValueError(mode)


# ---------------------------------------------------------------- the op registry
@dataclass(frozen=True)
class Spec:
    """What to build: A's layout, batching, dtypes and sizes; `variant` picks an
    op's own options (upper/transpose, dim/keepdim, ...); `ours` builds CSR with
    our sparse_csr_tensor rather than torch's."""
    layout: str = "csr"
    batched: bool = False
    itype: torch.dtype = torch.int64
    dtype: torch.dtype = torch.float64
    n: int = 7
    m: int = 5
    p: int = 3
    nnz: int = 12
    bmode: str = "contig"
    empty_rows: bool = True
    variant: int = 0
    ours: bool = True
    seed: int = 0


@dataclass
class Case:
    """One call of an op.  `leaves` are its floating-point inputs by name (A's
    values first, as "values", for ops on a sparse A); `structure` the integer
    arrays it reads; `build(values)` makes the sparse A (None for dense-only
    ops); `apply(A or first leaf, *other leaves)` calls the op; `ref(*leaves)`
    is the same computation in dense PyTorch."""
    leaves: Dict[str, torch.Tensor]
    structure: Tuple[torch.Tensor, ...]
    apply: Callable
    ref: Callable
    build: Optional[Callable] = None

    def run(self, *leaves):
        first = self.build(leaves[0]) if self.build else leaves[0]
        return self.apply(first, *leaves[1:])


FLOAT_TOL = {torch.float32: dict(rtol=2e-4, atol=2e-4), torch.float64: dict(rtol=1e-9, atol=1e-10)}
# 16-bit values (sparse_mm): the op sums in float32 and rounds once, the dense
# reference in its own way; a few units in the last place apart at most
HALF_DTYPES = (torch.float16, torch.bfloat16)
HALF_TOL = {torch.float16: dict(rtol=4e-3, atol=4e-3), torch.bfloat16: dict(rtol=3e-2, atol=3e-2)}


@dataclass(frozen=True)
class Op:
    """A public op as the sweeps see it.  make(spec) -> Case.  `must_raise`: the
    leaves its backward reads, so that an in-place edit of one of them between
    forward and backward must raise autograd's version-counter error.
    `malformed`: extra name -> source of bad-input cases (see child_outcomes);
    `malformed_call`: the call, on a malformed sparse `A`, that must raise
    ValueError.  `large`: a spec big enough that every kernel splits across
    two threads."""
    name: str
    make: Callable[[Spec], Case]
    layouts: Tuple[str, ...] = LAYOUTS
    batched: bool = True
    dtypes: Tuple[torch.dtype, ...] = (torch.float32, torch.float64)
    itypes: Tuple[torch.dtype, ...] = (torch.int32, torch.int64)
    tol: Dict = field(default_factory=lambda: dict(FLOAT_TOL))
    must_raise: Tuple[str, ...] = ("values",)
    malformed_call: Optional[str] = None
    malformed: Dict[str, str] = field(default_factory=dict)
    malformed_match: str = "malformed sparse matrix"
    large: Spec = Spec()
    variants: int = 1
    sparse_input: bool = True        # the op takes a sparse A built from values by the test
    function: Optional[str] = None   # the public function's name, where it is not `name`

    @property
    def public(self) -> str:
        return self.function or self.name

    def fn(self):
        """The public function, or a pytest skip when this build does not have it."""
        fn = getattr(tsgu, self.public, None)
        if fn is None:
            pytest.skip(f"torchsparsegradutils.{self.public} is not available in this build")
        return fn


def _sparse_case(spec: Spec, D: torch.Tensor, others: Dict[str, torch.Tensor], apply, ref) -> Case:
    """A Case for an op on a sparse A made from D in spec.layout; ref(Dv, *others)
    gets the dense matrix of the values."""
    A = to_sparse(D, spec.layout, spec.itype, seeded("layout", spec))
    values = leaf_like(values_of(A))
    return Case({"values": values, **others}, structure_of(A), apply,
                lambda v, *rest: ref(dense_of(A, v), *rest),
                build=lambda v: rebuild(A, v, spec.ours))


def _batch(spec: Spec) -> int:
    return 2 if spec.batched else 1


def _squeeze(D: torch.Tensor, spec: Spec) -> torch.Tensor:
    return D if spec.batched else D[0]


def _lead(spec: Spec):
    return (2,) if spec.batched else ()


def _make_mm(spec: Spec) -> Case:
    gen = seeded("sparse_mm", spec)
    D = _squeeze(random_dense(_batch(spec), spec.n, spec.m, spec.nnz, spec.dtype, gen, spec.empty_rows), spec)
    B = dense_operand(_lead(spec) + (spec.m, spec.p), spec.dtype, gen, spec.bmode)
    return _sparse_case(spec, D, {"B": B}, lambda A, B: tsgu.sparse_mm(A, B), lambda Dv, B: Dv @ B)


# sparse_mm's reduce besides "sum": the variants of the op "sparse_mm_reduce"
REDUCTIONS = ("mean", "amax", "amin")


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


def _make_mm_reduce(spec: Spec) -> Case:
    reduce = REDUCTIONS[spec.variant]
    gen = seeded("sparse_mm_reduce", spec)
    D = _squeeze(random_dense(_batch(spec), spec.n, spec.m, spec.nnz, spec.dtype, gen, spec.empty_rows), spec)
    B = dense_operand(_lead(spec) + (spec.m, spec.p), spec.dtype, gen, spec.bmode)
    case = _sparse_case(spec, D, {"B": B}, lambda A, B: tsgu.sparse_mm(A, B, reduce), lambda Dv, B: Dv)
    A = case.build(case.leaves["values"].detach())
    pattern = pattern_of(A)
    case.ref = lambda v, B: dense_reduce(dense_of(A, v), pattern, B, reduce)
    return case


def tri_dense(batch, n, upper, unit, dtype, gen, density=0.4):
    """Dense (batch, n, n) triangular with one shared pattern (batched CSR needs equal
    nnz) and a diagonal in [2, 3) (none if unit)."""
    mask = torch.rand(n, n, generator=gen) < density
    D = torch.randn(batch, n, n, generator=gen, dtype=dtype) * mask
    D = D.triu(1) if upper else D.tril(-1)
    if not unit:
        D = D + torch.diag_embed(2 + torch.rand(batch, n, generator=gen, dtype=dtype))
    return D


def tri_options(variant: int, layout: str):
    """(upper, unitriangular, transpose) of a triangular-solve variant; a one-entry
    A ("coo_expanded") is singular unless unitriangular."""
    return bool(variant & 1), bool(variant & 2) or layout == "coo_expanded", bool(variant & 4)


def dense_trisolve(M, B, upper, unit, transpose):
    if unit:
        M = M + torch.eye(M.shape[-1], dtype=M.dtype)
    if transpose:
        return torch.linalg.solve_triangular(M.transpose(-2, -1), B, upper=not upper)
    return torch.linalg.solve_triangular(M, B, upper=upper)


def _make_trisolve(spec: Spec) -> Case:
    gen = seeded("sparse_triangular_solve", spec)
    upper, unit, transpose = tri_options(spec.variant, spec.layout)
    density = min(1.0, spec.nnz / max(1, spec.n * spec.n))
    D = _squeeze(tri_dense(_batch(spec), spec.n, upper, unit, spec.dtype, gen, density), spec)
    B = dense_operand(_lead(spec) + (spec.n, spec.p), spec.dtype, gen, spec.bmode)
    return _sparse_case(
        spec, D, {"B": B},
        lambda A, B: tsgu.sparse_triangular_solve(A, B, upper=upper, unitriangular=unit, transpose=transpose),
        lambda Dv, B: dense_trisolve(Dv, B, upper, unit, transpose))


def spd_dense(n, nnz, dtype, gen):
    """A symmetric, strictly diagonally dominant (so SPD) (n, n) with about nnz off-diagonal entries."""
    M = random_dense(1, n, n, nnz // 2, dtype, gen, empty_rows=False)[0]
    S = M + M.t()
    S.fill_diagonal_(0)
    return S + torch.diag(S.abs().sum(1) + 1 + torch.rand(n, generator=gen, dtype=dtype))


def _rhs(spec: Spec, rows: int, gen) -> torch.Tensor:
    """B of a 2D system: (rows,) for odd variants, else (rows, p)."""
    shape = (rows,) if spec.variant & 1 else (rows, spec.p)
    return dense_operand(shape, spec.dtype, gen, spec.bmode)


def _solver_tol(dtype):
    return 1e-12 if dtype == torch.float64 else 1e-6


def _make_generic_solve(spec: Spec) -> Case:
    from torchsparsegradutils.utils import MINRESSettings
    gen = seeded("sparse_generic_solve", spec)
    D = spd_dense(spec.n, spec.nnz, spec.dtype, gen)
    B = _rhs(spec, spec.n, gen)
    settings = MINRESSettings(minres_tolerance=_solver_tol(spec.dtype))

    def ref(Dv, B):
        return torch.linalg.solve(Dv, B)
    return _sparse_case(spec, D, {"B": B}, lambda A, B: tsgu.sparse_generic_solve(A, B, settings=settings), ref)


def tall_dense(rows, cols, nnz, dtype, gen):
    """(rows, cols), rows >= cols, full column rank: a dominant diagonal on top of random entries."""
    D = random_dense(1, rows, cols, nnz, dtype, gen, empty_rows=True)[0]
    D[:cols] += torch.diag(3 + torch.rand(cols, generator=gen, dtype=dtype))
    return D


def _make_lstsq(spec: Spec) -> Case:
    gen = seeded("sparse_generic_lstsq", spec)
    rows = spec.m + spec.n
    D = tall_dense(rows, spec.m, spec.nnz, spec.dtype, gen)
    B = _rhs(spec, rows, gen)

    def ref(Dv, B):
        X = torch.linalg.lstsq(Dv, B.unsqueeze(-1) if B.dim() == 1 else B).solution
        return X.squeeze(-1) if B.dim() == 1 else X
    return _sparse_case(spec, D, {"B": B}, lambda A, B: tsgu.sparse_generic_lstsq(A, B), ref)


def _make_csr_tensor(spec: Spec) -> Case:
    gen = seeded("sparse_csr_tensor", spec)
    D = random_dense(1, spec.n, spec.m, spec.nnz, spec.dtype, gen, spec.empty_rows)[0]
    A = to_sparse(D, spec.layout, spec.itype)
    crow, col = A.crow_indices(), A.col_indices()
    return Case({"values": leaf_like(A.values())}, (crow, col),
                lambda v: tsgu.sparse_csr_tensor(crow, col, v, A.shape).to_dense(),
                lambda v: dense_of(A, v))


def _make_coo_tensor(spec: Spec) -> Case:
    """sparse_mm of our sparse_coo_tensor: the values gradient comes back on the pattern."""
    gen = seeded("sparse_coo_tensor", spec)
    D = _squeeze(random_dense(_batch(spec), spec.n, spec.m, spec.nnz, spec.dtype, gen, spec.empty_rows), spec)
    A = to_sparse(D, spec.layout, spec.itype, seeded("layout", spec))
    idx = A._indices()
    B = dense_operand(_lead(spec) + (spec.m, spec.p), spec.dtype, gen, spec.bmode)
    return Case({"values": leaf_like(A._values()), "B": B}, (idx,),
                lambda v, B: tsgu.sparse_mm(tsgu.sparse_coo_tensor(idx, v, A.shape), B),
                lambda v, B: dense_of(A, v) @ B)


def lse_options(variant: int, batched: bool):
    """(dim, keepdim, include_zeros) of a logsumexp variant; the batch axis is never reduced."""
    dims = [(1,), (2,), (1, 2)] if batched else [(0,), (1,), (0, 1)]
    dim = dims[variant % 3]
    return (dim[0] if len(dim) == 1 else dim), bool(variant & 4), not variant & 8


def dense_logsumexp(Dv, pattern, dim, keepdim, include_zeros):
    if not include_zeros:
        Dv = torch.where(pattern, Dv, torch.full_like(Dv, float("-inf")))
    return torch.logsumexp(Dv, dim, keepdim=keepdim)


def _lse_ref(A, f):
    pattern = pattern_of(A)
    return lambda v: f(dense_of(A, v), pattern)


def _make_logsumexp(spec: Spec) -> Case:
    gen = seeded("sparse_logsumexp", spec)
    dim, keepdim, zeros = lse_options(spec.variant, spec.batched)
    D = _squeeze(random_dense(_batch(spec), spec.n, spec.m, spec.nnz, spec.dtype, gen, spec.empty_rows), spec)
    case = _sparse_case(spec, D, {},
                        lambda A: tsgu.sparse_logsumexp(A, dim, keepdim=keepdim, include_zeros=zeros),
                        lambda Dv: Dv)
    A = case.build(case.leaves["values"].detach())
    case.ref = _lse_ref(A, lambda Dv, pat: dense_logsumexp(Dv, pat, dim, keepdim, zeros))
    return case


def _make_bidir(spec: Spec) -> Case:
    gen = seeded("sparse_bidir_logsumexp", spec)
    zeros = not spec.variant & 1
    D = _squeeze(random_dense(_batch(spec), spec.n, spec.m, spec.nnz, spec.dtype, gen, spec.empty_rows), spec)
    case = _sparse_case(spec, D, {}, lambda A: tsgu.sparse_bidir_logsumexp(A, include_zeros=zeros),
                        lambda Dv: Dv)
    A = case.build(case.leaves["values"].detach())
    case.ref = _lse_ref(A, lambda Dv, pat: (dense_logsumexp(Dv, pat, -2, False, zeros),
                                            dense_logsumexp(Dv, pat, -1, False, zeros)))
    return case


def _make_gather_mm(spec: Spec) -> Case:
    """a (N, D1) = (n, m), b (R, D1, D2) = (3, m, p), idx (N,) of spec.itype."""
    gen = seeded("gather_mm", spec)
    R = 3
    a = dense_operand((spec.n, spec.m), spec.dtype, gen, spec.bmode)
    b = torch.randn(R, spec.m, spec.p, generator=gen, dtype=spec.dtype)
    idx = torch.randint(0, R, (spec.n,), generator=gen).to(spec.itype)
    return Case({"a": a, "b": b}, (idx,), lambda a, b: tsgu.gather_mm(a, b, idx),
                lambda a, b: (a.unsqueeze(1) @ b[idx.long()]).squeeze(1))


def _make_segment_mm(spec: Spec) -> Case:
    """a (N, D1) = (n, m) in R = 4 segments (some empty), b (R, D1, D2) = (4, m, p)."""
    gen = seeded("segment_mm", spec)
    R = 4
    cuts = torch.sort(torch.randint(0, spec.n + 1, (R - 1,), generator=gen)).values
    seglen = torch.diff(torch.cat([torch.tensor([0]), cuts, torch.tensor([spec.n])]))
    a = dense_operand((spec.n, spec.m), spec.dtype, gen, spec.bmode)
    b = torch.randn(R, spec.m, spec.p, generator=gen, dtype=spec.dtype)

    def ref(a, b):
        parts = torch.split(a, seglen.tolist())
        return torch.cat([x @ b[r] for r, x in enumerate(parts)]).reshape(spec.n, spec.p)
    return Case({"a": a, "b": b}, (seglen,), lambda a, b: tsgu.segment_mm(a, b, seglen), ref)


# Malformed sparse structure, as sources of square (3, 3) or (2, 3, 3) matrices, so
# every sparse op can be given each one.  Every case must end in ValueError.
def _csr_src(crow, col, size=(3, 3), itype="torch.int64"):
    nnz = len(col[0]) if isinstance(col[0], list) else len(col)
    vals = f"torch.ones({len(col)}, {nnz})" if isinstance(col[0], list) else f"torch.ones({nnz})"
    return (f"torch.sparse_csr_tensor(torch.tensor({crow}, dtype={itype}), torch.tensor({col}, dtype={itype}), "
            f"{vals}, {size})")


def _coo_src(idx, size=(3, 3)):
    return f"torch.sparse_coo_tensor(torch.tensor({idx}), torch.ones({len(idx[0])}), {size})"


MALFORMED = {
    "csr_col_too_large": _csr_src([0, 1, 2, 2], [0, 3]),
    "csr_col_negative": _csr_src([0, 1, 2, 2], [0, -1]),
    "csr_col_huge_int32": _csr_src([0, 1, 2, 2], [0, 2**31 - 1], itype="torch.int32"),
    "csr_col_huge_int64": _csr_src([0, 1, 2, 2], [0, 2**62]),                 # finding 5 (spmm prefetch)
    "csr_crow_decreasing": _csr_src([0, 2, 1, 3], [0, 1, 2]),
    "csr_crow_last_not_nnz": _csr_src([0, 1, 2, 5], [0, 1]),
    "csr_crow_first_not_zero": _csr_src([1, 1, 2, 2], [0, 1]),
    "csr_crow_negative": _csr_src([0, -5, 2, 2], [0, 1]),
    "csr_crow_huge_int64": _csr_src([0, 2**62, 2, 2], [0, 1]),                # finding 5 (row cost)
    "csr_crow_huge_middle": _csr_src([0, 1, 2**62, 2], [0, 1]),
    "csr_cols_unsorted": _csr_src([0, 2, 2, 2], [2, 0]),
    "csr_cols_repeated": _csr_src([0, 2, 2, 2], [1, 1]),
    "csr_batched_bad_item": _csr_src([[0, 1, 2, 3], [0, 2, 1, 3]], [[0, 1, 2], [0, 1, 2]], (2, 3, 3)),
    "coo_row_too_large": _coo_src([[0, 7], [0, 1]]),
    "coo_col_too_large": _coo_src([[0, 1], [0, 3]]),
    "coo_negative": _coo_src([[0, -1], [0, 1]]),
    "coo_huge_int64": _coo_src([[0, 2**62], [0, 1]]),
    "coo_col_would_fold": _coo_src([[0, 0], [0, 5]]),
    "coo_batch_too_large": _coo_src([[0, 2], [0, 1], [0, 1]], (2, 3, 3)),
    "coo_false_coalesced_flag": f"torch.sparse_coo_tensor(torch.tensor([[1, 0], [0, 1]]), torch.ones(2), (3, 3), "
                                f"is_coalesced=True)",
    "coo_one_entry_strided_out_of_range": "torch.sparse_coo_tensor(torch.tensor([[5, 0], [0, 0]])[:, :1], "
                                          "torch.ones(1), (3, 3))",
    "coo_expanded_out_of_range": "torch.sparse_coo_tensor(torch.tensor([[5], [0]]).expand(2, 3), torch.ones(3), (3, 3))",
}
MALFORMED_BATCHED = ("csr_batched_bad_item", "coo_batch_too_large")


OPS = [
    Op("sparse_mm", _make_mm, must_raise=("values", "B"), dtypes=tuple(FLOAT_TOL) + HALF_DTYPES,
       tol={**FLOAT_TOL, **HALF_TOL},
       malformed_call="sparse_mm(A, torch.ones(*A.shape[:-2], A.shape[-1], 2))",
       large=Spec(batched=True, n=700, m=600, p=24, nnz=12000, dtype=torch.float32, itype=torch.int32)),
    # sparse_mm(A, B, reduce) with reduce "mean", "amax", "amin" (variants 0-2); large: amax
    Op("sparse_mm_reduce", _make_mm_reduce, function="sparse_mm", must_raise=("values", "B"),
       dtypes=tuple(FLOAT_TOL) + HALF_DTYPES, tol={**FLOAT_TOL, **HALF_TOL}, variants=len(REDUCTIONS),
       malformed_call="sparse_mm(A, torch.ones(*A.shape[:-2], A.shape[-1], 2), 'amax')",
       large=Spec(batched=True, n=2000, m=1500, p=140, nnz=20000, dtype=torch.float32, itype=torch.int32,
                  variant=1)),
    Op("sparse_triangular_solve", _make_trisolve,
       malformed_call="sparse_triangular_solve(A, torch.ones(*A.shape[:-1], 1), upper=True)",
       large=Spec(batched=True, n=300, p=6, nnz=4000), variants=8),
    Op("sparse_generic_solve", _make_generic_solve, layouts=FULL_RANK_LAYOUTS, batched=False,
       tol={torch.float32: dict(rtol=2e-3, atol=2e-3), torch.float64: dict(rtol=1e-7, atol=1e-9)},
       malformed_call="sparse_generic_solve(A, torch.ones(A.shape[0]))",
       large=Spec(n=3000, p=3, nnz=200000), variants=2),
    Op("sparse_generic_lstsq", _make_lstsq, layouts=FULL_RANK_LAYOUTS, batched=False,
       tol={torch.float32: dict(rtol=2e-3, atol=2e-3), torch.float64: dict(rtol=1e-6, atol=1e-8)},
       malformed_call="sparse_generic_lstsq(A, torch.ones(A.shape[0]))",
       large=Spec(n=4000, m=2000, p=1, nnz=600000), variants=2),
    Op("sparse_csr_tensor", _make_csr_tensor, layouts=CSR_LAYOUTS, batched=False, must_raise=(),
       dtypes=tuple(FLOAT_TOL) + HALF_DTYPES, tol={**FLOAT_TOL, **HALF_TOL},
       malformed_call="sparse_mm(sparse_csr_tensor(A.crow_indices(), A.col_indices(), "
                      "A.values().requires_grad_(), A.shape), torch.ones(A.shape[-1], 2)).sum().backward()",
       large=Spec(n=2000, m=2000, nnz=600000), sparse_input=False),
    Op("sparse_coo_tensor", _make_coo_tensor, layouts=COO_LAYOUTS, itypes=(torch.int64,), must_raise=("values", "B"),
       dtypes=tuple(FLOAT_TOL) + HALF_DTYPES, tol={**FLOAT_TOL, **HALF_TOL},
       malformed_call="sparse_mm(sparse_coo_tensor(A._indices(), A._values().requires_grad_(), A.shape, "
                      "is_coalesced=A.is_coalesced()), torch.ones(*A.shape[:-2], A.shape[-1], 2)).sum().backward()",
       large=Spec(layout="coo", batched=True, n=700, m=600, p=8, nnz=12000), sparse_input=False),
    Op("sparse_logsumexp", _make_logsumexp,
       malformed_call="sparse_logsumexp(A, dim=A.dim() - 1)",
       large=Spec(batched=True, n=1000, m=800, nnz=300000), variants=16),
    Op("sparse_bidir_logsumexp", _make_bidir,
       malformed_call="sparse_bidir_logsumexp(A)",
       large=Spec(batched=True, n=1000, m=800, nnz=300000), variants=2),
    Op("gather_mm", _make_gather_mm, layouts=("dense",), batched=False, must_raise=("a", "b"),
       malformed={
           "idx_too_large": "a, b = torch.randn(4, 3), torch.randn(2, 3, 5)\n"
                            "idx = torch.tensor([0, 1, 2, 0])\ninputs = [a, b, idx]\ncall = lambda: gather_mm(a, b, idx)",
           "idx_negative": "a, b = torch.randn(4, 3), torch.randn(2, 3, 5)\n"
                           "idx = torch.tensor([0, -1, 1, 0])\ninputs = [a, b, idx]\ncall = lambda: gather_mm(a, b, idx)",
           "idx_huge_int32": "a, b = torch.randn(4, 3), torch.randn(2, 3, 5)\n"
                             "idx = torch.tensor([0, 2**31 - 1, 1, 0], dtype=torch.int32)\ninputs = [a, b, idx]\n"
                             "call = lambda: gather_mm(a, b, idx)",
       }, malformed_match="",
       large=Spec(n=20000, m=32, p=32), sparse_input=False),
    Op("segment_mm", _make_segment_mm, layouts=("dense",), batched=False, itypes=(torch.int64,),
       must_raise=("a", "b"),
       malformed={
           "seglen_negative": "a, b = torch.randn(4, 3), torch.randn(3, 3, 5)\n"
                              "s = torch.tensor([3, -1, 2])\ninputs = [a, b, s]\ncall = lambda: segment_mm(a, b, s)",
           "seglen_sum_short": "a, b = torch.randn(4, 3), torch.randn(3, 3, 5)\n"
                               "s = torch.tensor([1, 1, 1])\ninputs = [a, b, s]\ncall = lambda: segment_mm(a, b, s)",
           "seglen_sum_long": "a, b = torch.randn(4, 3), torch.randn(3, 3, 5)\n"
                              "s = torch.tensor([2, 2, 2])\ninputs = [a, b, s]\ncall = lambda: segment_mm(a, b, s)",
           "seglen_huge": "a, b = torch.randn(4, 3), torch.randn(3, 3, 5)\n"
                          "s = torch.tensor([2**62, 4 - 2**62, 0])\ninputs = [a, b, s]\n"
                          "call = lambda: segment_mm(a, b, s)",
       }, malformed_match="",
       large=Spec(n=20000, m=32, p=32), sparse_input=False),
]
OPS_BY_NAME = {op.name: op for op in OPS}


def malformed_cases(op: Op) -> Dict[str, str]:
    """name -> child source (defining `inputs` and `call`) of every bad-input case of op."""
    cases = dict(op.malformed)
    if op.malformed_call:
        for name, src in MALFORMED.items():
            if (name in MALFORMED_BATCHED and not op.batched) or name.split("_")[0] not in op.layouts:
                continue
            cases[name] = f"A = {src}\ninputs = [A]\ncall = lambda: {op.malformed_call}"
    return cases


def run_case(case: Case, requires=None, gmode: str = "contig"):
    """Forward and backward of `case` with the named leaves requiring grad (all by
    default); returns (outputs, {name: grad}).  The upstream gradients are fixed
    random tensors in the memory arrangement `gmode` (see dense_operand)."""
    names = list(case.leaves) if requires is None else list(requires)
    leaves = [t.detach().requires_grad_(k in names) for k, t in case.leaves.items()]
    out = case.run(*leaves)
    outs = out if isinstance(out, tuple) else (out,)
    if names:
        grads = [dense_operand(o.shape, o.dtype, seeded("G", tuple(o.shape)), gmode) for o in outs]
        torch.autograd.backward(outs, grads)
    grads = {k: t.grad for k, t in zip(case.leaves, leaves) if k in names}
    return tuple(o.detach() for o in outs), grads


# ---------------------------------------------------------------- child processes
CHILD_PRELUDE = """
import warnings, torch
warnings.simplefilter("ignore")
import torchsparsegradutils as tsgu
from torchsparsegradutils import *
"""


def child_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
    return env


def run_child(code: str, timeout: float = 120, memory_limit: Optional[int] = None,
              env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    """Run `code` (after CHILD_PRELUDE) in a fresh interpreter, so that a crash
    fails the calling test instead of killing pytest; memory_limit caps the
    address space (RLIMIT_AS, bytes; not under SANITIZED, where ASan's shadow
    memory needs terabytes of it); env adds environment variables.  Returns the
    CompletedProcess (text)."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
    return subprocess.run([sys.executable, "-c", CHILD_PRELUDE + textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, env={**child_env(), **(env or {})},
                          preexec_fn=limit if memory_limit is not None else None)


_CASE_RUNNER = """
import json, sys

def arrays(t):
    if t.layout == torch.sparse_coo:
        return [t._indices(), t._values()]
    if t.layout == torch.sparse_csr:
        return [t.crow_indices(), t.col_indices(), t.values()]
    return [t]

def run(src):
    ns = dict(globals())
    before = None
    try:
        exec(src, ns)
        before = [a.clone() for t in ns["inputs"] for a in arrays(t)]
        ns["call"]()
        outcome = ["OK", ""]
    except Exception as e:
        outcome = [type(e).__name__, str(e)]
    after = [a for t in ns.get("inputs", []) for a in arrays(t)]
    if before is not None and not all(torch.equal(x, y) for x, y in zip(before, after)):
        outcome = ["MODIFIED", "an input was modified"]
    return outcome

for name, src in json.loads(sys.stdin.read()):
    print(MARK + json.dumps(["START", name]), flush=True)
    print(MARK + json.dumps(["END", name] + run(src)), flush=True)
"""
_MARK = "@@tsgu-case "     # starts the runner's own lines in the child's stdout


def child_outcomes(cases: Dict[str, str], timeout: float = 300) -> Dict[str, Tuple[str, str]]:
    """Run every case (a source defining `inputs`, the tensors that must stay
    unchanged, and `call`, a thunk) in child processes: one runs the cases in
    turn and, after a crash, a fresh one goes on with the rest.  Returns
    name -> (outcome, message): outcome is the exception's type name, "OK",
    "MODIFIED" (an input changed), or "CRASH" (message: exit status and stderr)."""
    todo = list(cases.items())
    results: Dict[str, Tuple[str, str]] = {}
    while todo:
        r = subprocess.run([sys.executable, "-c", CHILD_PRELUDE + f"MARK = {_MARK!r}\n" + _CASE_RUNNER],
                           input=json.dumps(todo), capture_output=True, text=True, timeout=timeout, env=child_env())
        started = None
        for line in r.stdout.splitlines():
            if not line.startswith(_MARK):
                continue
            msg = json.loads(line[len(_MARK):])
            if msg[0] == "START":
                started = msg[1]
            elif msg[0] == "END":
                results[msg[1]] = (msg[2], msg[3])
                started = None
        if started is None and r.returncode == 0:
            break
        if started is None:      # died outside any case
            started = next(name for name, _ in todo if name not in results)
        err = r.stderr if len(r.stderr) <= 4000 else r.stderr[:2000] + "\n...\n" + r.stderr[-2000:]
        results[started] = ("CRASH", f"exit status {r.returncode}: {err}")   # a sanitizer report opens with its cause
        todo = [(name, src) for name, src in todo if name not in results]
    return results
