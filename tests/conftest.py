"""Shared test helpers: fixed seeds, random sparse operands in every layout and
memory arrangement, dense references, the registry of public ops and surfaces (one
`Op` entry each: the ops, SparseCSR and its to_torch, the nn layers, the distribution,
the encoder, the custom operators called directly) that test_hygiene.py and
test_properties.py sweep, and a runner
for calls that might crash the interpreter (they run in a child process).

Test files import what they need with ``from conftest import ...``.
"""
import contextlib
import importlib
import json
import os
import resource
import subprocess
import sys
import textwrap
import types
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
from torchsparsegradutils import _backends

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


@pytest.fixture(params=["c_kernels", "torch_ops"])
def path(request, monkeypatch):
    """Run a CPU test through the C kernels, and through the torch-ops route that other
    devices take (forced on the CPU)."""
    monkeypatch.setattr(_backends, "force_torch_ops", request.param == "torch_ops")
    return request.param


def assert_layer_matches(ours, theirs, x, adjacency):
    """ours(x, adjacency) equals theirs (a reference layer with the same weights) in its
    output and its gradients w.r.t. x and every parameter, and ours on x made sparse
    (the same numbers) gives the same output.  Returns theirs' output."""
    a, b = theirs(x, adjacency), ours(x, adjacency)
    torch.testing.assert_close(b, a)
    G = torch.randn_like(a)
    for g, r in zip(torch.autograd.grad(b, [x, *ours.parameters()], G),
                    torch.autograd.grad(a, [x, *theirs.parameters()], G)):
        torch.testing.assert_close(g, r)
    torch.testing.assert_close(ours(x.detach().to_sparse(), adjacency), a.detach())
    return a


@contextlib.contextmanager
def num_threads(t: int):
    old = torch.get_num_threads()
    torch.set_num_threads(t)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def assert_compiles_like_eager(model, *inputs):
    """model(*inputs) under torch.compile(fullgraph=True) (no graph break) gives the eager
    output and parameter gradients (of the output's sum of squares)."""
    torch._dynamo.reset()
    try:
        out_c = torch.compile(model, fullgraph=True, backend="aot_eager")(*inputs)
        grads_c = torch.autograd.grad(out_c.square().sum(), list(model.parameters()))
    finally:
        torch._dynamo.reset()
    out_e = model(*inputs)
    grads_e = torch.autograd.grad(out_e.square().sum(), list(model.parameters()))
    torch.testing.assert_close(out_c, out_e, rtol=1e-5, atol=1e-5)
    for gc, ge in zip(grads_c, grads_e):
        torch.testing.assert_close(gc, ge, rtol=1e-5, atol=1e-5)


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
    rows, col = compressed_positions(A.crow_indices(), A.col_indices())
    n = A.shape[-2]
    if A.dim() == 3:
        return rows // n, rows % n, col
    return rows, col


def compressed_positions(crow: torch.Tensor, col: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """(row, column) of every entry of CSR arrays, by torch ops alone: for a batch,
    (b, n+1) pointers or the stacked (b*n+1,) ones, the global row k*n + i."""
    crow = crow.long()
    counts = (crow[..., 1:] - crow[..., :-1]).reshape(-1)
    return torch.repeat_interleave(torch.arange(counts.numel()), counts), col.long().reshape(-1)


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
    # what a value dtype outside op.dtypes raises (None: nothing to check, e.g. the op takes any)
    dtype_error: Optional[Tuple[type, str]] = (TypeError, "supports float32 and float64 values")
    # the layouts of MALFORMED that malformed_call takes (default: op.layouts)
    malformed_layouts: Optional[Tuple[str, ...]] = None
    # False: the op runs only kernels that other ops' sweeps run (so the comparison of
    # the portable kernels with the AVX2 ones is theirs)
    own_kernels: bool = True
    # True: its results also pass through PyTorch's dense matrix products (the layers' linear
    # maps), whose bits may depend on PyTorch's thread count (MKL on Intel hosts); see
    # test_hygiene.test_same_bits_for_1_and_2_threads
    dense_products: bool = False
    # the public object's path, where it is not `name` (two entries for one function)
    function: Optional[str] = None

    def available(self):
        """The public object the name (or `function`) reaches (a dotted path under
        torchsparsegradutils, or under torch for "torch.ops.tsgu.<op>"), or None when this
        build does not have it."""
        parts = (self.function or self.name).split(".")
        obj = torch if parts[0] == "torch" else tsgu
        for part in parts[1:] if parts[0] == "torch" else parts:
            if isinstance(obj, types.ModuleType) and not hasattr(obj, part):
                try:
                    importlib.import_module(f"{obj.__name__}.{part}")
                except ImportError:
                    return None
            obj = getattr(obj, part, None)
            if obj is None:
                return None
        return obj

    def fn(self):
        """available(), or a pytest skip when this build does not have it."""
        fn = self.available()
        if fn is None:
            pytest.skip(f"{self.name} is not available in this build")
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


def shared_pattern_dense(batch, n, m, nnz, dtype, gen, empty_rows=True):
    """random_dense with one pattern for all batch items (values differ): the product of
    two such batches has one entry count per item, as PyTorch's batched CSR needs."""
    pattern = random_dense(1, n, m, nnz, dtype, gen, empty_rows) != 0
    vals = torch.randn(batch, n, m, generator=gen, dtype=dtype)
    return torch.where(pattern, torch.where(vals == 0, torch.ones_like(vals), vals), torch.zeros_like(vals))


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


def _make_mm_sparse(spec: Spec) -> Case:
    """sparse_mm(A, B) with B sparse in A's layout too: A (n, m), B (m, p) with about half
    its cells stored, both batches on one pattern each (see shared_pattern_dense)."""
    gen = seeded("sparse_mm_sparse", spec)
    DA = _squeeze(shared_pattern_dense(_batch(spec), spec.n, spec.m, spec.nnz, spec.dtype, gen, spec.empty_rows), spec)
    DB = _squeeze(shared_pattern_dense(_batch(spec), spec.m, spec.p, (spec.m * spec.p + 1) // 2, spec.dtype, gen,
                                       False), spec)
    B = to_sparse(DB, spec.layout, spec.itype, seeded("layout B", spec))
    case = _sparse_case(spec, DA, {"B_values": leaf_like(values_of(B))},
                        lambda A, bv: dense_product(tsgu.sparse_mm(A, rebuild(B, bv, spec.ours))), lambda Dv: Dv)
    A = case.build(case.leaves["values"].detach())
    case.ref = lambda v, bv: dense_of(A, v) @ dense_of(B, bv)
    case.structure = case.structure + structure_of(B)
    return case


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


def softmax_options(variant: int):
    """(dim, log) of a softmax variant: rows (-1) or columns (-2); softmax or log-softmax."""
    return (-1, -2)[variant & 1], bool(variant & 2)


def dense_softmax(Dv, pattern, dim, log):
    """The masked dense softmax: the absent entries are -inf (an empty group gives NaN,
    read nowhere)."""
    X = torch.where(pattern, Dv, torch.full_like(Dv, float("-inf")))
    return (torch.log_softmax if log else torch.softmax)(X, dim)


def stored_values(out):
    """The values of a softmax's sparse result, differentiable: a SparseCSR's, a CSR's or
    a (coalesced) COO's, in the order of its sorted positions."""
    return out.values if isinstance(out, tsgu.SparseCSR) else out.values()


def _softmax_fn(variant: int):
    dim, log = softmax_options(variant)
    fn = tsgu.sparse_log_softmax if log else tsgu.sparse_softmax
    return lambda A: stored_values(fn(A, dim))


def _softmax_ref(pattern, dense, variant: int, shape):
    """v -> the masked dense softmax of dense(v) at the pattern, in shape"""
    dim, log = softmax_options(variant)
    return lambda v: dense_softmax(dense(v), pattern, dim, log)[pattern].reshape(shape)


def _make_softmax(spec: Spec) -> Case:
    """sparse_softmax / sparse_log_softmax (by variant) of a torch sparse A; the output is
    its values (on the coalesced pattern)."""
    gen = seeded("sparse_softmax", spec)
    D = _squeeze(random_dense(_batch(spec), spec.n, spec.m, spec.nnz, spec.dtype, gen, spec.empty_rows), spec)
    case = _sparse_case(spec, D, {}, _softmax_fn(spec.variant), lambda Dv: Dv)
    A = case.build(case.leaves["values"].detach())
    shape = case.run(case.leaves["values"].detach()).shape
    case.ref = _softmax_ref(pattern_of(A), lambda v: dense_of(A, v), spec.variant, shape)
    return case


def _make_softmax_sparse_csr(spec: Spec) -> Case:
    """sparse_softmax / sparse_log_softmax of a SparseCSR (the custom op's road)."""
    gen = seeded("SparseCSR.softmax", spec)
    D = _squeeze(random_dense(_batch(spec), spec.n, spec.m, spec.nnz, spec.dtype, gen, spec.empty_rows), spec)
    S, values, dense = _components(spec, D)
    pattern = dense(torch.ones(values.shape, dtype=torch.float64)) > 0
    return Case({"values": values}, (S.crow_indices, S.col_indices), _softmax_fn(spec.variant),
                _softmax_ref(pattern, dense, spec.variant, values.shape), build=lambda v: S._replace(values=v))


HEADS = 3      # the heads of the registry's multi-head cases


def _heads_components(spec: Spec, name: str):
    """(SparseCSR of a random A in spec.layout, leaf (.., nnz, HEADS) values in its order,
    dense(v): the (.., n, m, HEADS) tensor of the pattern holding v, pattern (.., n, m))."""
    gen = seeded(name, spec)
    D = _squeeze(random_dense(_batch(spec), spec.n, spec.m, spec.nnz, spec.dtype, gen, spec.empty_rows), spec)
    S, values, dense = _components(spec, D)
    heads = leaf_like(torch.randn((*values.shape, HEADS), generator=gen, dtype=torch.float64).to(spec.dtype))
    pattern = dense(torch.ones(values.shape, dtype=torch.float64)) > 0

    def dense_heads(v):
        return torch.stack([dense(v[..., h]) for h in range(HEADS)], -1)
    return S, heads, dense_heads, pattern


def _make_softmax_heads(spec: Spec) -> Case:
    """sparse_softmax / sparse_log_softmax of a SparseCSR with (.., nnz, HEADS) values: each
    head the masked dense softmax of its own values."""
    S, values, dense, pattern = _heads_components(spec, "SparseCSR.softmax_heads")
    dim, log = softmax_options(spec.variant)

    def ref(v):
        return torch.stack([dense_softmax(D, pattern, dim, log)[pattern] for D in dense(v).unbind(-1)], -1) \
            .reshape(values.shape)
    return Case({"values": values}, (S.crow_indices, S.col_indices), _softmax_fn(spec.variant), ref,
                build=lambda v: S._replace(values=v))


# ---------------------------------------------------------------- sampled_addmm
def sampled_addmm_options(variant: int):
    """(beta, alpha) of a sampled_addmm variant: 1 and 1, or -0.5 and 2."""
    return (1.0, 1.0) if variant == 0 else (-0.5, 2.0)


def _sampled_addmm_operands(spec: Spec, gen):
    """X (.., n, p) and Y (.., p, m), Y in spec.bmode's memory arrangement."""
    X = torch.randn(_lead(spec) + (spec.n, spec.p), generator=gen, dtype=spec.dtype)
    return X, dense_operand(_lead(spec) + (spec.p, spec.m), spec.dtype, gen, spec.bmode)


def _sampled_addmm_ref(pattern, dense, variant: int, shape):
    """(v, X, Y) -> beta * dense(v) + alpha * X @ Y at the pattern, in shape"""
    beta, alpha = sampled_addmm_options(variant)
    return lambda v, X, Y: (beta * dense(v) + alpha * (X @ Y))[pattern].reshape(shape)


def _make_sampled_addmm(spec: Spec) -> Case:
    """sampled_addmm of a torch sparse A (beta, alpha by variant); the output is its values."""
    gen = seeded("sampled_addmm", spec)
    D = _squeeze(random_dense(_batch(spec), spec.n, spec.m, spec.nnz, spec.dtype, gen, spec.empty_rows), spec)
    X, Y = _sampled_addmm_operands(spec, gen)
    beta, alpha = sampled_addmm_options(spec.variant)
    case = _sparse_case(spec, D, {"X": X, "Y": Y},
                        lambda A, X, Y: stored_values(tsgu.sampled_addmm(A, X, Y, beta, alpha)), None)
    A = case.build(case.leaves["values"].detach())
    pattern = pattern_of(A)        # the result's values: A's (a COO's on its coalesced pattern)
    shape = values_of(A).shape if A.layout == torch.sparse_csr else (int(pattern.sum()),)
    case.ref = _sampled_addmm_ref(pattern, lambda v: dense_of(A, v), spec.variant, shape)
    return case


def _make_sampled_addmm_sparse_csr(spec: Spec) -> Case:
    """sampled_addmm of a SparseCSR (the custom op tsgu::sddmm's road)."""
    gen = seeded("SparseCSR.sampled_addmm", spec)
    D = _squeeze(random_dense(_batch(spec), spec.n, spec.m, spec.nnz, spec.dtype, gen, spec.empty_rows), spec)
    S, values, dense = _components(spec, D)
    X, Y = _sampled_addmm_operands(spec, gen)
    beta, alpha = sampled_addmm_options(spec.variant)
    pattern = dense(torch.ones(values.shape, dtype=torch.float64)) > 0
    return Case({"values": values, "X": X, "Y": Y}, (S.crow_indices, S.col_indices),
                lambda S, X, Y: tsgu.sampled_addmm(S, X, Y, beta, alpha).values,
                _sampled_addmm_ref(pattern, dense, spec.variant, values.shape), build=lambda v: S._replace(values=v))


def _make_sampled_addmm_heads(spec: Spec) -> Case:
    """sampled_addmm of a 2-D SparseCSR with (nnz, HEADS) values, X (HEADS, n, p), Y (HEADS, p, m)."""
    S, values, dense, pattern = _heads_components(spec, "SparseCSR.sampled_addmm_heads")
    gen = seeded("sampled_addmm heads operands", spec)
    X = torch.randn(HEADS, spec.n, spec.p, generator=gen, dtype=spec.dtype)
    Y = dense_operand((HEADS, spec.p, spec.m), spec.dtype, gen, spec.bmode)
    beta, alpha = sampled_addmm_options(spec.variant)

    def ref(v, X, Y):
        return (beta * dense(v) + alpha * (X @ Y).movedim(0, -1))[pattern]
    return Case({"values": values, "X": X, "Y": Y}, (S.crow_indices, S.col_indices),
                lambda S, X, Y: tsgu.sampled_addmm(S, X, Y, beta, alpha).values, ref,
                build=lambda v: S._replace(values=v))


_SAMPLED_ADDMM_XY = ("torch.ones(*A.shape[:-1], 2, dtype=A.dtype), "
                     "torch.ones(*A.shape[:-2], 2, A.shape[-1], dtype=A.dtype)")


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


# ------------------------------------------------------------ the newer surfaces
# SparseCSR (sparse_mm on it, and its to_torch), the nn layers, the distribution, the
# encoder and the custom operators called directly, as Ops of the same registry.
def _components(spec: Spec, D: torch.Tensor):
    """(SparseCSR of A in spec.layout, leaf values in its order, dense(v) of its pattern)."""
    from torchsparsegradutils._core.intake import as_csr
    A = to_sparse(D, spec.layout, spec.itype, seeded("layout", spec))
    view = as_csr(A)
    S = tsgu.SparseCSR(view.ptr, view.col, view.values, tuple(A.shape))
    rows, cols = compressed_positions(view.ptr, view.col)
    b, n, m = (D.shape[0] if D.dim() == 3 else 1), D.shape[-2], D.shape[-1]

    def dense(v):
        return torch.zeros(b * n, m, dtype=v.dtype).index_put((rows, cols), v.reshape(-1), accumulate=True) \
            .reshape(D.shape)
    return S, leaf_like(view.values), dense


def _make_sparse_csr_mm(spec: Spec) -> Case:
    """sparse_mm on a SparseCSR (torch's batched CSR, or the stacked rows of a COO batch)."""
    gen = seeded("SparseCSR", spec)
    D = _squeeze(random_dense(_batch(spec), spec.n, spec.m, spec.nnz, spec.dtype, gen, spec.empty_rows), spec)
    S, values, dense = _components(spec, D)
    B = dense_operand(_lead(spec) + (spec.m, spec.p), spec.dtype, gen, spec.bmode)
    return Case({"values": values, "B": B}, (S.crow_indices, S.col_indices), lambda S, B: tsgu.sparse_mm(S, B),
                lambda v, B: dense(v) @ B, build=lambda v: S._replace(values=v))


def _make_to_torch(spec: Spec) -> Case:
    """sparse_mm of the torch sparse tensor to_torch gives (PyTorch's own to_dense() cannot
    differentiate a batched CSR tensor)."""
    gen = seeded("SparseCSR.to_torch", spec)
    D = _squeeze(random_dense(_batch(spec), spec.n, spec.m, spec.nnz, spec.dtype, gen, spec.empty_rows), spec)
    S, values, dense = _components(spec, D)
    B = dense_operand(_lead(spec) + (spec.m, spec.p), spec.dtype, gen, spec.bmode)
    return Case({"values": values, "B": B}, (S.crow_indices, S.col_indices),
                lambda S, B: tsgu.sparse_mm(S.to_torch(), B), lambda v, B: dense(v) @ B,
                build=lambda v: S._replace(values=v))


_SPARSE_CSR_OF_A = ("(SparseCSR(A.crow_indices(), A.col_indices(), A.values(), tuple(A.shape)) "
                    "if A.layout == torch.sparse_csr else SparseCSR.from_torch(A))")


def _src(setup: str, call: str) -> str:
    """A bad-input case (see child_outcomes): `setup` defines the inputs, `call` the call."""
    return f"{setup}\ninputs = [t for t in locals().values() if isinstance(t, torch.Tensor)]\ncall = lambda: {call}"


# bad SparseCSR components, as (setup, the SparseCSR, a B for sparse_mm): the setup's
# components are those of a 2D (2, 3) matrix with 2 entries
_OK_CSR = "crow, col, v = torch.tensor([0, 1, 2]), torch.tensor([0, 2]), torch.ones(2)"
_BAD_COMPONENTS = {
    "values_2d_for_1d_crow": (_OK_CSR, "SparseCSR(crow, col, v[None], (2, 3))", "torch.ones(3, 1)"),
    "values_1d_for_batched_crow": (_OK_CSR, "SparseCSR(crow.repeat(2, 1), col.repeat(2, 1), v.repeat(2), (2, 2, 3))",
                                   "torch.ones(2, 3, 1)"),
    "size_4d": (_OK_CSR, "SparseCSR(crow, col, v, (1, 1, 2, 3))", "torch.ones(1, 1, 3, 1)"),
    "size_negative": (_OK_CSR, "SparseCSR(crow, col, v, (2, -3))", "torch.ones(3, 1)"),
    "crow_too_short": (_OK_CSR, "SparseCSR(crow[:2], col, v, (2, 3))", "torch.ones(3, 1)"),
    "stacked_col_out_of_range": ("crow, col = torch.tensor([0, 1, 2, 3, 4]), torch.tensor([0, 1, 0, 7])",
                                 "SparseCSR(crow, col, torch.ones(4), (2, 2, 3))", "torch.ones(2, 3, 1)"),
}
SPARSE_CSR_MALFORMED = {name: _src(setup, f"sparse_mm({S}, {B})") for name, (setup, S, B) in _BAD_COMPONENTS.items()}
TO_TORCH_MALFORMED = {name: _src(setup, f"{S}.to_torch()") for name, (setup, S, _) in _BAD_COMPONENTS.items()}


def _make_sparse_linear(spec: Spec) -> Case:
    """SparseLinear(m -> n) on the pattern of A (in spec.layout), through functional_call, so
    that its values and bias are the test's leaves; x (p, m), or (2, p, m) batched."""
    gen = seeded("SparseLinear", spec)
    D = random_dense(1, spec.n, spec.m, spec.nnz, spec.dtype, gen, spec.empty_rows)[0]
    import torchsparsegradutils.nn as tnn
    layer = tnn.SparseLinear(spec.m, spec.n, pattern=to_sparse(D, spec.layout, spec.itype, seeded("layout", spec)),
                             dtype=spec.dtype)
    rows, cols = compressed_positions(layer.crow_indices, layer.col_indices)
    leaves = {"values": torch.randn(layer.nnz, generator=gen, dtype=spec.dtype),
              "bias": torch.randn(spec.n, generator=gen, dtype=spec.dtype),
              "x": dense_operand(_lead(spec) + (spec.p, spec.m), spec.dtype, gen, spec.bmode)}

    def ref(v, b, x):
        W = torch.zeros(spec.n, spec.m, dtype=v.dtype).index_put((rows, cols), v)
        return x @ W.t() + b
    return Case(leaves, (layer.crow_indices, layer.col_indices),
                lambda v, b, x: torch.func.functional_call(layer, {"values": v, "bias": b}, (x,)), ref)


def _edge_index(spec: Spec, gen) -> torch.Tensor:
    """spec.nnz random edges (repeats and self loops allowed) among spec.n nodes."""
    return torch.randint(0, spec.n, (2, spec.nnz), generator=gen).to(spec.itype)


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


def _make_gcn_adjacency(spec: Spec) -> Case:
    """sparse_mm(gcn_adjacency(edge_index, n, edge_weight), B) (no n x n matrix, however many nodes)."""
    gen = seeded("gcn_norm", spec)
    ei = _edge_index(spec, gen)
    w = torch.rand(spec.nnz, generator=gen, dtype=spec.dtype) + 0.5
    B = dense_operand((spec.n, spec.p), spec.dtype, gen, spec.bmode)
    import torchsparsegradutils.nn as tnn
    return Case({"edge_weight": w, "B": B}, (ei,),
                lambda w, B: tsgu.sparse_mm(tnn.gcn_adjacency(ei, spec.n, edge_weight=w, dtype=w.dtype), B),
                lambda w, B: dense_gcn_adjacency(ei, spec.n, w) @ B)


def _make_gcn_conv(spec: Spec) -> Case:
    """GCNConv(m -> p) on spec.n nodes, its weight and bias the test's leaves."""
    gen = seeded("GCNConv", spec)
    ei = _edge_index(spec, gen)
    import torchsparsegradutils.nn as tnn
    conv = tnn.GCNConv(spec.m, spec.p).to(spec.dtype)
    leaves = {"x": dense_operand((spec.n, spec.m), spec.dtype, gen, spec.bmode),
              "weight": torch.randn(spec.p, spec.m, generator=gen, dtype=spec.dtype),
              "bias": torch.randn(spec.p, generator=gen, dtype=spec.dtype)}

    def ref(x, W, b):
        return dense_gcn_adjacency(ei, spec.n, torch.ones(spec.nnz, dtype=x.dtype)) @ (x @ W.t()) + b
    return Case(leaves, (ei,),
                lambda x, W, b: torch.func.functional_call(conv, {"lin.weight": W, "bias": b}, (x, ei)), ref)


def _make_gin_conv(spec: Spec) -> Case:
    """GINConv(Linear(m -> p), train_eps=True) on spec.n nodes, x, the Linear's weight and
    bias and eps the test's leaves (an edge listed twice sums twice, a self loop is one
    more term)."""
    gen = seeded("GINConv", spec)
    ei = _edge_index(spec, gen)
    import torchsparsegradutils.nn as tnn
    conv = tnn.GINConv(torch.nn.Linear(spec.m, spec.p), train_eps=True).to(spec.dtype)
    leaves = {"x": dense_operand((spec.n, spec.m), spec.dtype, gen, spec.bmode),
              "weight": torch.randn(spec.p, spec.m, generator=gen, dtype=spec.dtype),
              "bias": torch.randn(spec.p, generator=gen, dtype=spec.dtype),
              "eps": torch.rand(1, generator=gen, dtype=spec.dtype)}

    def ref(x, W, b, eps):
        A = torch.zeros(spec.n, spec.n, dtype=x.dtype).index_put(
            (ei[1].long(), ei[0].long()), torch.ones(spec.nnz, dtype=x.dtype), accumulate=True)
        return ((1 + eps) * x + A @ x) @ W.t() + b
    return Case(leaves, (ei,),
                lambda x, W, b, eps: torch.func.functional_call(conv, {"nn.weight": W, "nn.bias": b, "eps": eps},
                                                                (x, ei)), ref)


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


def _make_sage_conv(spec: Spec) -> Case:
    """SAGEConv(m -> p) on spec.n nodes, aggr SAGE_AGGRS[spec.variant], its weights and
    bias the test's leaves."""
    gen = seeded("SAGEConv", spec)
    ei = _edge_index(spec, gen)
    aggr = SAGE_AGGRS[spec.variant]
    import torchsparsegradutils.nn as tnn
    conv = tnn.SAGEConv(spec.m, spec.p, aggr=aggr).to(spec.dtype)
    leaves = {"x": dense_operand((spec.n, spec.m), spec.dtype, gen, spec.bmode),
              "weight_l": torch.randn(spec.p, spec.m, generator=gen, dtype=spec.dtype),
              "bias": torch.randn(spec.p, generator=gen, dtype=spec.dtype),
              "weight_r": torch.randn(spec.p, spec.m, generator=gen, dtype=spec.dtype)}

    def apply(x, Wl, b, Wr):
        return torch.func.functional_call(conv, {"lin_l.weight": Wl, "lin_l.bias": b, "lin_r.weight": Wr}, (x, ei))
    return Case(leaves, (ei,), apply, lambda x, Wl, b, Wr: dense_sage(x, x, ei, aggr, Wl, b, Wr))


# ---------------------------------------------------- graph attention (graph_attention, nn.GATConv)
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


def dense_edge_score(pattern, edge_score):
    """(H, n, m): edge_score (nnz, H), one row per True of the (n, m) pattern in row-major
    order, at its entry (zeros elsewhere); differentiable."""
    H = edge_score.shape[1]
    mask = pattern.expand(H, *pattern.shape)
    return torch.zeros(mask.shape, dtype=edge_score.dtype).masked_scatter(mask, edge_score.t().contiguous())


def _make_graph_attention(spec: Spec) -> Case:
    """graph_attention on the pattern of a sparse A in spec.layout (its values unread), with
    1 + spec.variant heads of spec.p features; leaves x, score_src, score_dst, and an
    edge_score per stored entry with variant 1."""
    gen = seeded("graph_attention", spec)
    D = random_dense(1, spec.n, spec.m, spec.nnz, spec.dtype, gen, spec.empty_rows)[0]
    A = to_sparse(D, spec.layout, spec.itype, seeded("layout", spec))
    pattern, H = pattern_of(A), 1 + spec.variant
    leaves = {"x": dense_operand((spec.m, H, spec.p), spec.dtype, gen, spec.bmode),
              "score_src": dense_operand((spec.m, H), spec.dtype, gen, spec.bmode),
              "score_dst": dense_operand((spec.n, H), spec.dtype, gen, spec.bmode)}
    if spec.variant:
        leaves["edge_score"] = dense_operand((int(pattern.sum()), H), spec.dtype, gen, spec.bmode)
        return Case(leaves, structure_of(A), lambda x, s, d, e: tsgu.graph_attention(A, x, s, d, 0.2, edge_score=e),
                    lambda x, s, d, e: dense_graph_attention(pattern, x, s, d, 0.2, e))
    return Case(leaves, structure_of(A), lambda x, s, d: tsgu.graph_attention(A, x, s, d, 0.2),
                lambda x, s, d: dense_graph_attention(pattern, x, s, d))


# (heads, concat, add_self_loops) of the GATConv variants
GAT_VARIANTS = ((1, True, True), (3, True, True), (3, False, True), (2, True, False))


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


def _make_gat_conv(spec: Spec) -> Case:
    """GATConv(m -> p, heads, concat, add_self_loops by GAT_VARIANTS[spec.variant]) on spec.n
    nodes; its weight, attention vectors and bias the test's leaves."""
    gen = seeded("GATConv", spec)
    ei = _edge_index(spec, gen)
    heads, concat, loops = GAT_VARIANTS[spec.variant]
    import torchsparsegradutils.nn as tnn
    conv = tnn.GATConv(spec.m, spec.p, heads=heads, concat=concat, add_self_loops=loops).to(spec.dtype)
    leaves = {"x": dense_operand((spec.n, spec.m), spec.dtype, gen, spec.bmode),
              "weight": torch.randn(heads * spec.p, spec.m, generator=gen, dtype=spec.dtype),
              "att_src": torch.randn(1, heads, spec.p, generator=gen, dtype=spec.dtype),
              "att_dst": torch.randn(1, heads, spec.p, generator=gen, dtype=spec.dtype),
              "bias": torch.randn(heads * spec.p if concat else spec.p, generator=gen, dtype=spec.dtype)}

    def apply(x, W, a_src, a_dst, b):
        params = {"lin.weight": W, "att_src": a_src, "att_dst": a_dst, "bias": b}
        return torch.func.functional_call(conv, params, (x, ei))
    return Case(leaves, (ei,), apply, lambda x, W, a_src, a_dst, b: dense_gat_conv(x, ei, W, a_src, a_dst, b,
                                                                                    concat, loops))


GCN_MALFORMED = {
    "node_id_negative": "torch.tensor([[0, -1], [1, 0]])",
    "node_id_too_large": "torch.tensor([[0, 1], [3, 0]])",
    "node_id_huge_int64": "torch.tensor([[0, 2**62], [1, 0]])",
    "node_id_huge_int32": "torch.tensor([[0, 2**31 - 1], [1, 0]], dtype=torch.int32)",
    "edge_index_1d": "torch.tensor([0, 1])",
    "edge_index_3_rows": "torch.tensor([[0, 1], [1, 0], [0, 0]])",
}


def _gcn_malformed(call: str) -> Dict[str, str]:
    return {name: _src(f"e = {src}", call) for name, src in GCN_MALFORMED.items()}


def _make_mvn(spec: Spec) -> Case:
    """log_prob of SparseMultivariateNormal in form spec.variant (bit 0: precision, bit 1:
    LDL^T) against torch.distributions.MultivariateNormal of the dense factor."""
    from torch.distributions import MultivariateNormal
    precision, ldlt = bool(spec.variant & 1), bool(spec.variant & 2)
    gen = seeded("SparseMultivariateNormal", spec)
    n = spec.n
    density = min(1.0, spec.nnz / max(1, n * n))
    D = _squeeze(tri_dense(_batch(spec), n, False, ldlt, spec.dtype, gen, density), spec)
    others = {"loc": torch.randn(_lead(spec) + (n,), generator=gen, dtype=spec.dtype),
              "x": torch.randn(_lead(spec) + (n,), generator=gen, dtype=spec.dtype)}
    if ldlt:
        others["diagonal"] = torch.rand(_lead(spec) + (n,), generator=gen, dtype=spec.dtype) + 0.5
    kw = "precision_tril" if precision else "scale_tril"
    import torchsparsegradutils.distributions as tdist

    def apply(F, loc, x, *diag):
        return tdist.SparseMultivariateNormal(loc, *diag, **{kw: F}).log_prob(x)

    def ref(Fd, loc, x, *diag):
        L = Fd + torch.eye(n, dtype=Fd.dtype) if ldlt else Fd
        if not precision:
            return MultivariateNormal(loc, scale_tril=L * diag[0].sqrt().unsqueeze(-2) if ldlt else L).log_prob(x)
        M = L @ ((diag[0].unsqueeze(-1) if ldlt else 1) * L.transpose(-1, -2))
        return MultivariateNormal(loc, precision_matrix=M).log_prob(x)
    return _sparse_case(spec, D, others, apply, ref)


# encoder configurations by variant: (radius, volume_shape, diag, upper, relation) for sizes n, m
ENCODER_VARIANTS = (
    lambda n, m: (1.5, (2, n, m), True, None, "inter"),
    lambda n, m: (1.0, (1, n * m), False, None, "indep"),
    lambda n, m: (1.5, (3, n, m), True, False, "intra"),
    lambda n, m: (2.0, (1, n, m), False, True, "indep"),
)


def _make_encoder(spec: Spec) -> Case:
    """sparse_mm(PairwiseEncoder(...)(values), B) against the matrix built from
    calc_pairwise_coo_indices_nd's pairs (the pattern found another way)."""
    from torchsparsegradutils.encoders import PairwiseEncoder, calc_pairwise_coo_indices_nd
    gen = seeded("PairwiseEncoder", spec)
    args = ENCODER_VARIANTS[spec.variant](spec.n, spec.m)
    csr = spec.layout == "csr"
    enc = PairwiseEncoder(*args, layout=torch.sparse_csr if csr else torch.sparse_coo,
                          indices_dtype=spec.itype if csr else torch.int64)
    pairs = calc_pairwise_coo_indices_nd(*args)
    assert list(pairs) == enc.offsets
    V = enc.volume_numel
    leaves = {"values": torch.randn(_lead(spec) + (len(enc.offsets),) + args[1], generator=gen, dtype=spec.dtype),
              "B": dense_operand(_lead(spec) + (V, spec.p), spec.dtype, gen, spec.bmode)}

    def ref(values, B):
        flat = values.reshape(*_lead(spec), len(pairs), V)
        M = values.new_zeros(*_lead(spec), V, V)
        for k, (rows, cols) in enumerate(pairs.values()):
            M[..., rows, cols] = flat[..., k, rows]
        return M @ B
    return Case(leaves, (), lambda values, B: tsgu.sparse_mm(enc(values), B), ref)


_ENC = "enc = tsgu.encoders.PairwiseEncoder(1.5, (2, 3, 3))\nv = torch.randn(len(enc.offsets), 2, 3, 3)"
ENCODER_MALFORMED = {
    "values_wrong_offsets": _src(_ENC, "enc(v[1:])"),
    "values_wrong_volume": _src(_ENC, "enc(v[..., 1:])"),
    "values_too_many_dims": _src(_ENC, "enc(v[None, None])"),
    "values_not_a_tensor": _src(_ENC, "enc(v.tolist())"),
    "volume_shape_negative": _src("", "tsgu.encoders.PairwiseEncoder(1.0, (1, -3))"),
    "volume_shape_1d": _src("", "tsgu.encoders.PairwiseEncoder(1.0, (4,))"),
    "radius_below_one": _src("", "tsgu.encoders.PairwiseEncoder(0.5, (1, 3))"),
    "relation_unknown": _src("", "tsgu.encoders.PairwiseEncoder(1.0, (2, 3), channel_voxel_relation='x')"),
    "layout_strided": _src("", "tsgu.encoders.PairwiseEncoder(1.0, (1, 3), layout=torch.strided)"),
}


# the custom operators, called directly on a pattern's arrays (as a compiled program passes them)
def _op_components(spec: Spec, D: torch.Tensor):
    """(pattern args (ptr, col, rows=None, shape), leaf values in its order, dense(v))."""
    S, values, dense = _components(spec, D)
    return (S.crow_indices, S.col_indices, None, list(S.size)), values, dense


def _op_sparse_case(spec: Spec, D: torch.Tensor, others, apply, ref) -> Case:
    """A Case of a custom op on A's pattern: apply(pattern, v, *others), ref(dense(v), *others)."""
    pattern, values, dense = _op_components(spec, D)
    return Case({"values": values, **others}, pattern[:2], lambda v, *rest: apply(pattern, v, *rest),
                lambda v, *rest: ref(dense(v), *rest))


def _random_sparse(spec: Spec, name: str):
    gen = seeded(name, spec)
    return gen, _squeeze(random_dense(_batch(spec), spec.n, spec.m, spec.nnz, spec.dtype, gen, spec.empty_rows), spec)


def _make_op_spmm(spec: Spec) -> Case:
    gen, D = _random_sparse(spec, "tsgu::spmm")
    X = dense_operand(_lead(spec) + (spec.m, spec.p), spec.dtype, gen, spec.bmode)
    return _op_sparse_case(spec, D, {"X": X}, lambda pat, v, X: torch.ops.tsgu.spmm(*pat, v, X), lambda Dv, X: Dv @ X)


def _make_op_spmm_t(spec: Spec) -> Case:
    gen, D = _random_sparse(spec, "tsgu::spmm_t")
    Y = dense_operand(_lead(spec) + (spec.n, spec.p), spec.dtype, gen, spec.bmode)
    return _op_sparse_case(spec, D, {"Y": Y}, lambda pat, v, Y: torch.ops.tsgu.spmm_t(*pat, v, Y),
                           lambda Dv, Y: Dv.transpose(-2, -1) @ Y)


def _make_op_sddmm(spec: Spec) -> Case:
    gen, D = _random_sparse(spec, "tsgu::sddmm")
    pattern, _, _ = _op_components(spec, D)
    rows, cols = compressed_positions(pattern[0], pattern[1])
    U = dense_operand(_lead(spec) + (spec.n, spec.p), spec.dtype, gen, spec.bmode)
    V = dense_operand(_lead(spec) + (spec.m, spec.p), spec.dtype, gen, spec.bmode)

    def ref(U, V):
        return (U @ V.transpose(-2, -1)).reshape(-1, spec.m)[rows, cols].reshape(pattern[1].shape)
    return Case({"U": U, "V": V}, pattern[:2], lambda U, V: torch.ops.tsgu.sddmm(*pattern, U, V), ref)


def _make_op_trisolve(spec: Spec) -> Case:
    gen = seeded("tsgu::trisolve", spec)
    upper, unit, transpose = tri_options(spec.variant, spec.layout)
    density = min(1.0, spec.nnz / max(1, spec.n * spec.n))
    D = _squeeze(tri_dense(_batch(spec), spec.n, upper, unit, spec.dtype, gen, density), spec)
    B = dense_operand(_lead(spec) + (spec.n, spec.p), spec.dtype, gen, spec.bmode)
    return _op_sparse_case(spec, D, {"B": B},
                           lambda pat, v, B: torch.ops.tsgu.trisolve(*pat, v, B, upper, unit, transpose),
                           lambda Dv, B: dense_trisolve(Dv, B, upper, unit, transpose))


LSE_MODES = ("rows", "cols", "all", "both")


def _make_op_lse(spec: Spec) -> Case:
    """tsgu::lse in mode spec.variant % 4, absent entries zeros for variants < 4; the output
    always has a batch axis, and "both" pads the shorter result with -inf."""
    gen, D = _random_sparse(spec, "tsgu::lse")
    mode, zeros = LSE_MODES[spec.variant % 4], spec.variant < 4
    pattern, values, dense = _op_components(spec, D)
    stored = dense(torch.ones(values.shape, dtype=torch.float64)) > 0

    def ref(v):
        X, P = dense(v), stored
        if X.dim() == 2:
            X, P = X.unsqueeze(0), P.unsqueeze(0)
        if not zeros:
            X = torch.where(P, X, torch.full_like(X, float("-inf")))
        if mode != "both":
            return torch.logsumexp(X, {"rows": 2, "cols": 1, "all": (1, 2)}[mode])
        cols, rows = torch.logsumexp(X, 1), torch.logsumexp(X, 2)
        width = max(X.shape[1:])
        return torch.stack([torch.nn.functional.pad(t, (0, width - t.shape[-1]), value=float("-inf"))
                            for t in (cols, rows)])
    return Case({"values": values}, pattern[:2],
                lambda v: torch.ops.tsgu.lse(pattern[0], pattern[1], pattern[3], v, mode, zeros), ref)


def _make_op_softmax(spec: Spec) -> Case:
    """tsgu::softmax by rows (even variants) or columns, softmax or log-softmax (variants 2, 3)."""
    _, D = _random_sparse(spec, "tsgu::softmax")
    dim, log = softmax_options(spec.variant)
    pattern, values, dense = _op_components(spec, D)
    stored = dense(torch.ones(values.shape, dtype=torch.float64)) > 0
    return Case({"values": values}, pattern[:2],
                lambda v: torch.ops.tsgu.softmax(pattern[0], pattern[1], pattern[3], v, dim == -1, log),
                _softmax_ref(stored, dense, spec.variant, values.shape))


def _grouping(spec: Spec, gen, R: int):
    """(off, perm, relation of each row) of spec.n rows in R groups: by relation
    indices (variant 0; perm an argsort) or consecutive segments (variant 1; perm None)."""
    if spec.variant == 0:
        rel = torch.randint(0, R, (spec.n,), generator=gen)
        perm = torch.argsort(rel, stable=True)
    else:
        rel, perm = torch.sort(torch.randint(0, R, (spec.n,), generator=gen)).values, None
    off = torch.zeros(R + 1, dtype=torch.int64)
    off[1:] = torch.bincount(rel, minlength=R).cumsum(0)
    return off, perm, rel


def _make_op_grouped_mm(spec: Spec) -> Case:
    gen = seeded("tsgu::grouped_mm", spec)
    off, perm, rel = _grouping(spec, gen, 3)
    a = dense_operand((spec.n, spec.m), spec.dtype, gen, spec.bmode)
    M = torch.randn(3, spec.m, spec.p, generator=gen, dtype=spec.dtype)
    return Case({"a": a, "M": M}, tuple(t for t in (off, perm) if t is not None),
                lambda a, M: torch.ops.tsgu.grouped_mm(off, perm, a, M),
                lambda a, M: (a.unsqueeze(1) @ M[rel]).squeeze(1))


def _make_op_grouped_mm_tn(spec: Spec) -> Case:
    gen = seeded("tsgu::grouped_mm_tn", spec)
    off, perm, rel = _grouping(spec, gen, 3)
    a = dense_operand((spec.n, spec.m), spec.dtype, gen, spec.bmode)
    G = torch.randn(spec.n, spec.p, generator=gen, dtype=spec.dtype)
    return Case({"a": a, "G": G}, tuple(t for t in (off, perm) if t is not None),
                lambda a, G: torch.ops.tsgu.grouped_mm_tn(off, perm, a, G),
                lambda a, G: torch.zeros(3, spec.m, spec.p, dtype=a.dtype).index_add(
                    0, rel, a.unsqueeze(2) * G.unsqueeze(1)))


def _op_src(call: str, setup: str = _OK_CSR) -> str:
    return _src(setup + "\nt = torch.ops.tsgu\nL = torch.zeros(1, 2)", call)


# direct calls with a bad argument the public functions never pass (their own checks)
CUSTOM_OP_MALFORMED = {
    "spmm_size_4d": _op_src("t.spmm(crow, col, None, [1, 1, 2, 3], v, torch.ones(3, 1))"),
    "spmm_size_1d": _op_src("t.spmm(crow, col, None, [3], v, torch.ones(3, 1))"),
    "spmm_values_2d": _op_src("t.spmm(crow, col, None, [2, 3], v[None], torch.ones(3, 1))"),
    "spmm_values_too_few": _op_src("t.spmm(crow, col, None, [2, 3], v[:1], torch.ones(3, 1))"),
    "spmm_crow_too_long": _op_src("t.spmm(torch.tensor([0, 1, 2, 2]), col, None, [2, 3], v, torch.ones(3, 1))"),
    "spmm_rows_wrong_length": _op_src("t.spmm(crow, col, torch.tensor([0, 1, 2]), [2, 3], v, torch.ones(6, 1))"),
    "spmm_t_size_4d": _op_src("t.spmm_t(crow, col, None, [1, 1, 2, 3], v, torch.ones(2, 1))"),
    "sddmm_size_4d": _op_src("t.sddmm(crow, col, None, [1, 1, 2, 3], torch.ones(2, 1), torch.ones(3, 1))"),
    "trisolve_values_2d": _op_src("t.trisolve(crow, col, None, [2, 2], v[None], torch.ones(2, 1), False, False, "
                                  "False)", "crow, col, v = torch.tensor([0, 1, 2]), torch.tensor([0, 1]), "
                                            "torch.ones(2)"),
    "lse_mode_unknown": _op_src("t.lse(crow, col, [2, 3], v, 'row', True)"),
    "lse_grad_mode_unknown": _op_src("t.lse_grad(crow, col, [2, 3], v, L, L, 'row')"),
    "lse_wsum_mode_unknown": _op_src("t.lse_wsum(crow, col, [2, 3], v, L, v, 'row')"),
    "lse_size_4d": _op_src("t.lse(crow, col, [1, 1, 2, 3], v, 'rows', True)"),
    "lse_grad_values_2d": _op_src("t.lse_grad(crow, col, [2, 3], v[None], L, L, 'rows')"),
}
_GROUPS = "a, M, G = torch.randn(4, 3), torch.randn(2, 3, 5), torch.randn(4, 5)\nt = torch.ops.tsgu"
GROUPED_MALFORMED = {
    "perm_all_zeros": _src(_GROUPS, "t.grouped_mm(torch.tensor([0, 1, 4]), torch.zeros(4, dtype=torch.int64), a, M)"),
    "perm_repeated": _src(_GROUPS, "t.grouped_mm(torch.tensor([0, 1, 4]), torch.tensor([0, 1, 1, 3]), a, M)"),
    "perm_too_large": _src(_GROUPS, "t.grouped_mm(torch.tensor([0, 1, 4]), torch.tensor([0, 1, 2, 4]), a, M)"),
    "perm_negative": _src(_GROUPS, "t.grouped_mm(torch.tensor([0, 1, 4]), torch.tensor([0, -1, 2, 3]), a, M)"),
    "perm_short": _src(_GROUPS, "t.grouped_mm(torch.tensor([0, 1, 4]), torch.tensor([0, 1, 2]), a, M)"),
    "off_decreasing": _src(_GROUPS, "t.grouped_mm(torch.tensor([0, 3, 2]), None, a, M)"),
    "off_not_ending_at_rows": _src(_GROUPS, "t.grouped_mm(torch.tensor([0, 1, 5]), None, a, M)"),
    "off_more_groups_than_M": _src(_GROUPS, "t.grouped_mm(torch.tensor([0, 1, 2, 4]), None, a, M)"),
    "M_of_another_inner_size": _src(_GROUPS, "t.grouped_mm(torch.tensor([0, 1, 4]), None, a, M[:, :2])"),
    "tn_grad_of_other_rows": _src(_GROUPS, "t.grouped_mm_tn(torch.tensor([0, 1, 4]), None, a, G[:3])"),
    "tn_perm_all_zeros": _src(_GROUPS, "t.grouped_mm_tn(torch.tensor([0, 1, 4]), torch.zeros(4, dtype=torch.int64), "
                                       "a, G)"),
    "tn_off_negative": _src(_GROUPS, "t.grouped_mm_tn(torch.tensor([0, -1, 4]), None, a, G)"),
    "group_rows_idx_too_large": _src(_GROUPS, "t.group_rows(torch.tensor([0, 2, 1]), 2)"),
    "group_rows_idx_negative": _src(_GROUPS, "t.group_rows(torch.tensor([0, -1, 1]), 2)"),
}


def _op_call(op: str, rest: str) -> str:
    """The malformed_call of a custom op on a CSR A of MALFORMED (a COO index array is no
    argument of theirs)."""
    return f"torch.ops.tsgu.{op}(A.crow_indices(), A.col_indices(), None, list(A.shape), {rest})"


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
    "coo_false_coalesced_flag": "torch.sparse_coo_tensor(torch.tensor([[1, 0], [0, 1]]), torch.ones(2), (3, 3), "
                                "is_coalesced=True)",
    # flagged coalesced, rows in order, but a position repeated / columns out of order in a row:
    # every op must raise as sparse_mm does, whatever route takes A in (issue 26)
    "coo_false_coalesced_repeated": "torch.sparse_coo_tensor(torch.tensor([[0, 1, 1], [0, 2, 2]]), "
                                    "torch.tensor([1.0, 2.0, 3.0]), (3, 3), is_coalesced=True)",
    "coo_false_coalesced_cols_unsorted": "torch.sparse_coo_tensor(torch.tensor([[0, 1, 1], [0, 2, 1]]), "
                                         "torch.ones(3), (3, 3), is_coalesced=True)",
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
    # sparse_mm(A, B) with a sparse B (in A's layout); malformed A, then malformed B
    Op("sparse_mm_sparse", _make_mm_sparse, function="sparse_mm", must_raise=("values", "B_values"),
       dtypes=tuple(FLOAT_TOL) + HALF_DTYPES, tol={**FLOAT_TOL, **HALF_TOL},
       malformed_call="sparse_mm(A, torch.ones(*A.shape[:-2], A.shape[-1], 2).to_sparse())",
       malformed={f"B_{name}": f"A = {src}\ninputs = [A]\n"
                               f"call = lambda: sparse_mm(torch.ones(*A.shape[:-2], 2, A.shape[-2]).to_sparse(), A)"
                  for name, src in MALFORMED.items()},
       large=Spec(batched=True, n=700, m=600, p=500, nnz=12000, dtype=torch.float32, itype=torch.int32)),
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
    # variants: rows / columns, softmax / log-softmax (softmax_options); the backward
    # reads the output alone, so an edit of the values after the forward is harmless
    Op("sparse_softmax", _make_softmax, must_raise=(), dtypes=tuple(FLOAT_TOL) + HALF_DTYPES,
       tol={**FLOAT_TOL, **HALF_TOL}, malformed_call="sparse_softmax(A)",
       large=Spec(batched=True, n=1000, m=800, nnz=300000), variants=4),
    Op("SparseCSR.softmax", _make_softmax_sparse_csr, function="sparse_log_softmax", must_raise=(),
       dtypes=tuple(FLOAT_TOL) + HALF_DTYPES, tol={**FLOAT_TOL, **HALF_TOL},
       malformed_call=f"sparse_log_softmax({_SPARSE_CSR_OF_A}, -2)", malformed_layouts=("csr",),
       large=Spec(batched=True, n=1000, m=800, nnz=300000), variants=4, sparse_input=False, own_kernels=False),
    Op("SparseCSR.softmax_heads", _make_softmax_heads, function="sparse_softmax", must_raise=(),
       dtypes=tuple(FLOAT_TOL) + HALF_DTYPES, tol={**FLOAT_TOL, **HALF_TOL},
       malformed_call=f"sparse_softmax({_SPARSE_CSR_OF_A}._replace(values=torch.stack([A.values()] * 2, -1)))",
       malformed_layouts=("csr",), large=Spec(batched=True, n=1000, m=800, nnz=300000), variants=4,
       sparse_input=False, own_kernels=True),
    # variants: (beta, alpha) (sampled_addmm_options); the backward reads X and Y, not A's values
    Op("sampled_addmm", _make_sampled_addmm, must_raise=("X", "Y"),
       malformed_call=f"sampled_addmm(A, {_SAMPLED_ADDMM_XY})",
       large=Spec(batched=True, n=1000, m=800, p=16, nnz=300000), variants=2),
    Op("SparseCSR.sampled_addmm", _make_sampled_addmm_sparse_csr, function="sampled_addmm", must_raise=("X", "Y"),
       malformed_call=f"sampled_addmm({_SPARSE_CSR_OF_A}, {_SAMPLED_ADDMM_XY})", malformed_layouts=("csr",),
       large=Spec(batched=True, n=1000, m=800, p=16, nnz=300000), variants=2, sparse_input=False, own_kernels=False),
    Op("SparseCSR.sampled_addmm_heads", _make_sampled_addmm_heads, function="sampled_addmm", batched=False,
       must_raise=("X", "Y"), malformed_call=f"sampled_addmm({_SPARSE_CSR_OF_A}._replace(values=A.values()[:, None]), "
                                             "torch.ones(1, 3, 2), torch.ones(1, 2, 3))",
       malformed_layouts=("csr",), large=Spec(n=1000, m=800, p=16, nnz=300000), variants=2, sparse_input=False,
       own_kernels=False),
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
    # ---- the newer surfaces
    Op("SparseCSR", _make_sparse_csr_mm, must_raise=("values", "B"), dtypes=tuple(FLOAT_TOL) + HALF_DTYPES,
       tol={**FLOAT_TOL, **HALF_TOL}, malformed=SPARSE_CSR_MALFORMED, malformed_match="",
       malformed_call=f"sparse_mm({_SPARSE_CSR_OF_A}, torch.ones(*A.shape[:-2], A.shape[-1], 2))",
       large=Spec(batched=True, n=700, m=600, p=24, nnz=12000, dtype=torch.float32, itype=torch.int32),
       sparse_input=False, own_kernels=False),
    Op("SparseCSR.to_torch", _make_to_torch, must_raise=("values", "B"), malformed=TO_TORCH_MALFORMED,
       malformed_match="", malformed_call=f"{_SPARSE_CSR_OF_A}.to_torch()", dtype_error=None,
       large=Spec(batched=True, n=300, m=300, nnz=4000), sparse_input=False, own_kernels=False),
    Op("nn.SparseLinear", _make_sparse_linear, batched=True, must_raise=("values", "x"),
       dtypes=tuple(FLOAT_TOL) + HALF_DTYPES, tol={**FLOAT_TOL, **HALF_TOL},
       malformed_call="tsgu.nn.SparseLinear(A.shape[-1], A.shape[-2], pattern=A)", malformed_match="",
       large=Spec(n=600, m=700, p=64, nnz=30000, dtype=torch.float32, itype=torch.int32), sparse_input=False,
       own_kernels=False),
    Op("nn.gcn_adjacency", _make_gcn_adjacency, layouts=("dense",), batched=False, must_raise=(),
       malformed=_gcn_malformed("tsgu.nn.gcn_adjacency(e, 3)"), malformed_match="", dtype_error=None,
       large=Spec(n=20000, nnz=400000), sparse_input=False, own_kernels=False),
    Op("nn.GCNConv", _make_gcn_conv, layouts=("dense",), batched=False, must_raise=("x", "weight"),
       malformed=_gcn_malformed("tsgu.nn.GCNConv(2, 2)(torch.randn(3, 2), e)"), malformed_match="",
       dtype_error=None,
       large=Spec(n=5000, m=16, p=16, nnz=100000), sparse_input=False, own_kernels=False,
       dense_products=True),
    Op("nn.GINConv", _make_gin_conv, layouts=("dense",), batched=False, must_raise=("x", "weight"),
       malformed=_gcn_malformed("tsgu.nn.GINConv(torch.nn.Linear(2, 2))(torch.randn(3, 2), e)"),
       malformed_match="", dtype_error=None,
       large=Spec(n=5000, m=16, p=16, nnz=100000), sparse_input=False, own_kernels=False,
       dense_products=True),
    # SAGEConv with aggr "mean", "max", "sum" (variants 0-2)
    Op("nn.SAGEConv", _make_sage_conv, layouts=("dense",), batched=False, must_raise=("x",),
       malformed=_gcn_malformed("tsgu.nn.SAGEConv(2, 2)(torch.randn(3, 2), e)"), malformed_match="",
       dtype_error=None, variants=len(SAGE_AGGRS),
       large=Spec(n=5000, m=16, p=16, nnz=100000), sparse_input=False, own_kernels=False,
       dense_products=True),
    # ---- graph attention: the op on a sparse A's pattern (1 head, or 2 with an edge_score:
    # variants 0-1), and GATConv (GAT_VARIANTS)
    Op("graph_attention", _make_graph_attention, batched=False,
       must_raise=("x", "score_src", "score_dst", "edge_score"),
       dtype_error=(TypeError, "supports float32 and float64"), variants=2,
       malformed_call="graph_attention(A, torch.ones(A.shape[-1], 1, 2), torch.ones(A.shape[-1], 1), "
                      "torch.ones(A.shape[-2], 1))",
       large=Spec(n=600, m=500, p=16, nnz=30000, dtype=torch.float32, itype=torch.int32, variant=1),
       sparse_input=False),
    Op("nn.GATConv", _make_gat_conv, layouts=("dense",), batched=False, must_raise=("x", "weight"),
       malformed=_gcn_malformed("tsgu.nn.GATConv(2, 2)(torch.randn(3, 2), e)"), malformed_match="",
       dtype_error=None, variants=len(GAT_VARIANTS),
       large=Spec(n=5000, m=16, p=16, nnz=100000, variant=1), sparse_input=False, own_kernels=False,
       dense_products=True),
    Op("distributions.SparseMultivariateNormal", _make_mvn, layouts=FULL_RANK_LAYOUTS, must_raise=(),
       malformed_call="tsgu.distributions.SparseMultivariateNormal(torch.zeros(A.shape[:-1]), scale_tril=A, "
                      "validate_args=False).log_prob(torch.zeros(A.shape[:-1]))",
       large=Spec(batched=True, n=300, nnz=6000), variants=4, own_kernels=False),
    Op("encoders.PairwiseEncoder", _make_encoder, layouts=("coo", "csr"), must_raise=("B",),
       malformed=ENCODER_MALFORMED, malformed_match="",
       dtype_error=(ValueError, "must be either torch.float32 or torch.float64"),
       large=Spec(layout="csr", batched=True, n=60, m=60, p=16), variants=len(ENCODER_VARIANTS), sparse_input=False,
       own_kernels=False),
    Op("torch.ops.tsgu.spmm", _make_op_spmm, must_raise=("values", "X"), malformed=CUSTOM_OP_MALFORMED,
       malformed_match="", malformed_call=_op_call("spmm", "A.values(), torch.ones(*A.shape[:-2], A.shape[-1], 2)"),
       malformed_layouts=("csr",), dtype_error=None,
       large=Spec(batched=True, n=700, m=600, p=24, nnz=12000, dtype=torch.float32, itype=torch.int32),
       sparse_input=False, own_kernels=False),
    Op("torch.ops.tsgu.spmm_t", _make_op_spmm_t, must_raise=("values", "Y"),
       malformed_call=_op_call("spmm_t", "A.values(), torch.ones(*A.shape[:-1], 2)"), malformed_layouts=("csr",),
       dtype_error=None, large=Spec(batched=True, n=700, m=600, p=24, nnz=12000), sparse_input=False,
       own_kernels=False),
    Op("torch.ops.tsgu.sddmm", _make_op_sddmm, must_raise=("U", "V"),
       malformed_call=_op_call("sddmm", "torch.ones(*A.shape[:-1], 2), torch.ones(*A.shape[:-2], A.shape[-1], 2)"),
       malformed_layouts=("csr",), dtype_error=None,
       large=Spec(batched=True, n=700, m=600, p=24, nnz=12000), sparse_input=False, own_kernels=False),
    Op("torch.ops.tsgu.trisolve", _make_op_trisolve, layouts=FULL_RANK_LAYOUTS, must_raise=("values",),
       malformed_call=_op_call("trisolve", "A.values(), torch.ones(*A.shape[:-1], 1), True, False, False"),
       malformed_layouts=("csr",), dtype_error=None, large=Spec(batched=True, n=300, p=6, nnz=4000), variants=8,
       sparse_input=False, own_kernels=False),
    Op("torch.ops.tsgu.lse", _make_op_lse, must_raise=("values",),
       malformed_call="torch.ops.tsgu.lse(A.crow_indices(), A.col_indices(), list(A.shape), A.values(), 'rows', True)",
       malformed_layouts=("csr",), dtype_error=None, large=Spec(batched=True, n=1000, m=800, nnz=300000),
       variants=8, sparse_input=False, own_kernels=False),
    Op("torch.ops.tsgu.softmax", _make_op_softmax, must_raise=(), dtypes=tuple(FLOAT_TOL) + HALF_DTYPES,
       tol={**FLOAT_TOL, **HALF_TOL},
       malformed_call="torch.ops.tsgu.softmax(A.crow_indices(), A.col_indices(), list(A.shape), A.values(), True, False)",
       malformed_layouts=("csr",), dtype_error=None, large=Spec(batched=True, n=1000, m=800, nnz=300000),
       variants=4, sparse_input=False, own_kernels=False),
    Op("torch.ops.tsgu.grouped_mm", _make_op_grouped_mm, layouts=("dense",), batched=False, itypes=(torch.int64,),
       must_raise=("a", "M"), malformed=GROUPED_MALFORMED, malformed_match="", dtype_error=None,
       large=Spec(n=20000, m=32, p=32), variants=2, sparse_input=False, own_kernels=False),
    Op("torch.ops.tsgu.grouped_mm_tn", _make_op_grouped_mm_tn, layouts=("dense",), batched=False,
       itypes=(torch.int64,), must_raise=("a", "G"), dtype_error=None, large=Spec(n=20000, m=32, p=32), variants=2,
       sparse_input=False, own_kernels=False),
]
OPS_BY_NAME = {op.name: op for op in OPS}

# The hypersparse sweep (test_hygiene.test_hypersparse_coo_memory_is_o_nnz): per op, the
# calls (sources) that run on a COO A of 2**31 + 5 rows (batched: 2 x (2**30 + 3)) and a
# few entries, forward and backward, under an address-space limit that no allocation of
# a byte per row fits in; or why no such case applies.  In a call: A (COO, coalesced, m
# columns, built from the leaf values v at the indices idx), n (its rows), lead (() or
# (2,)), rnd(*shape) (seeded random values of A's dtype) and leaf(t) (t, made a leaf
# whose gradient is compared too).  Each result is checked against the same call on the
# compacted A (its non-empty rows only).
DENSE_ROWS = "its dense output (or a dense operand) has a row per row of A: O(rows) by contract"
SQUARE = "a square solve: a solvable A of n rows stores at least n entries, so it is never hypersparse"
CSR_ROWS = "takes CSR arrays, whose row pointers are O(rows) by layout (the torch-tensor ops pass it a kept-rows view)"
HYPERSPARSE = {
    "sparse_mm": ("sparse_mm(A, rnd(*lead, m, 0))",),                       # p = 0: the dense output is empty
    "sparse_mm_reduce": ("sparse_mm(A, rnd(*lead, m, 0), 'mean')", "sparse_mm(A, rnd(*lead, m, 0), 'amax')"),
    "sparse_mm_sparse": ("sparse_mm(A, leaf(rnd(*lead, m, 2).relu().to_sparse()))",),
    "sparse_triangular_solve": SQUARE,
    "sparse_generic_solve": SQUARE,
    "sparse_generic_lstsq": "its right-hand side and the solver's residuals are dense vectors of n rows: "
                            "O(rows) by contract",
    "sparse_csr_tensor": "builds a CSR tensor, whose row pointers are O(rows) by layout",
    "sparse_coo_tensor": ("sparse_mm(sparse_coo_tensor(idx, v, A.shape, is_coalesced=True), "
                          "leaf(rnd(*lead, m, 2).relu().to_sparse()))",
                          "sparse_softmax(sparse_coo_tensor(idx, v, A.shape, is_coalesced=True))"),
    "sparse_logsumexp": ("sparse_logsumexp(A, A.dim() - 2, include_zeros=False)",),
    "sparse_bidir_logsumexp": "its row-wise result is a dense vector of n: O(rows) by contract",
    "sparse_softmax": ("sparse_softmax(A)", "sparse_log_softmax(A)", "sparse_softmax(A, -2)",
                       "sparse_log_softmax(A, -2)"),
    "SparseCSR.softmax": CSR_ROWS,
    "SparseCSR.softmax_heads": CSR_ROWS,
    # X one row, expanded (stride 0; a batch's items too, so that its rows stack as a view):
    # a dense X of n rows is O(rows) by contract, and so is its gradient (not asked for)
    "sampled_addmm": ("sampled_addmm(A, rnd(1, 2).expand(*lead, n, 2), leaf(rnd(*lead, 2, m)), beta=0.5, alpha=2.0)",),
    "SparseCSR.sampled_addmm": CSR_ROWS,
    "SparseCSR.sampled_addmm_heads": CSR_ROWS,
    "gather_mm": "dense operands only",
    "segment_mm": "dense operands only",
    "SparseCSR": CSR_ROWS,
    "SparseCSR.to_torch": CSR_ROWS,
    "nn.SparseLinear": DENSE_ROWS,
    "nn.gcn_adjacency": "its output is a degree per node, dense: O(nodes) by contract",
    "nn.GCNConv": DENSE_ROWS,
    "nn.GINConv": DENSE_ROWS,
    "nn.SAGEConv": DENSE_ROWS,
    "graph_attention": DENSE_ROWS,
    "nn.GATConv": DENSE_ROWS,
    "distributions.SparseMultivariateNormal": SQUARE,
    "encoders.PairwiseEncoder": DENSE_ROWS,
    "torch.ops.tsgu.spmm": CSR_ROWS,
    "torch.ops.tsgu.spmm_t": CSR_ROWS,
    "torch.ops.tsgu.sddmm": CSR_ROWS,
    "torch.ops.tsgu.trisolve": SQUARE,
    "torch.ops.tsgu.lse": CSR_ROWS,
    "torch.ops.tsgu.softmax": CSR_ROWS,
    "torch.ops.tsgu.grouped_mm": "dense operands only",
    "torch.ops.tsgu.grouped_mm_tn": "dense operands only",
}


def malformed_cases(op: Op) -> Dict[str, str]:
    """name -> child source (defining `inputs` and `call`) of every bad-input case of op."""
    cases = dict(op.malformed)
    if op.malformed_call:
        layouts = op.malformed_layouts or op.layouts
        for name, src in MALFORMED.items():
            if (name in MALFORMED_BATCHED and not op.batched) or name.split("_")[0] not in layouts:
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
import torchsparsegradutils.distributions, torchsparsegradutils.encoders, torchsparsegradutils.nn
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


# ---------------------------------------------------------------- the Triton route
@pytest.fixture
def triton_route(monkeypatch):
    """The Triton kernels forced on CPU tensors (_backends.force_triton), interpreted:
    skipped without triton, and unless the run was started with TRITON_INTERPRET=1 (read
    as the kernels are defined, and by the interpreter as they run: setting it later in
    the process does not take); returns the switch, route(True) / route(False)."""
    pytest.importorskip("triton")
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("the Triton route on CPU tensors runs under TRITON_INTERPRET=1")
    return lambda on: monkeypatch.setattr(_backends, "force_triton", on)


def both_routes(route, fn, inputs, seed=0):
    """[outputs..., gradients of the inputs that require grad...] of fn(*leaf copies of
    inputs) for a random upstream gradient, on the C route and on the Triton route
    (`route`, the triton_route fixture's switch): (c_results, triton_results)."""
    results = []
    for on in (False, True):
        route(on)
        leaves = [x.detach().clone().requires_grad_(x.requires_grad) if isinstance(x, torch.Tensor) else x
                  for x in inputs]
        outs = fn(*leaves)
        outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
        diff = [o for o in outs if o.requires_grad]
        wanted = [x for x in leaves if isinstance(x, torch.Tensor) and x.requires_grad]
        grads = []
        if diff and wanted:
            gen = seeded("both_routes", seed)
            ups = [torch.randn(o.shape, generator=gen, dtype=torch.float64).to(o.dtype) for o in diff]
            grads = list(torch.autograd.grad(diff, wanted, ups, allow_unused=True))
        results.append([o.detach() for o in outs] + grads)
    route(False)
    return results


def pytest_make_parametrize_id(config, val, argname):
    """A dtype's name in test ids (float32, int64, ...), so that `-k` can select by it."""
    if isinstance(val, torch.dtype):
        return str(val).removeprefix("torch.")
    return None
