"""Each registry op's case builder: make_<op>(spec) -> Case, the call and its dense
reference on random operands that Spec describes (layout, batching, dtypes, sizes,
variant)."""
from dataclasses import dataclass, replace
from typing import Callable, Dict, Optional, Tuple

import torch

import torchsparsegradutils as tsgu

from support.operands import (compressed_positions, dense_of, dense_operand, leaf_like, pattern_of, random_dense,
                              rebuild, seeded, shared_pattern_dense, spd_dense, structure_of, tall_dense, to_sparse,
                              tri_dense, values_of)
from support.references import (SAGE_AGGRS, dense_gat_conv, dense_gcn_adjacency, dense_graph_attention, dense_logsumexp,
                                dense_product, dense_reduce, dense_sage, dense_softmax, dense_trisolve)


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


def _spec_dense(spec: Spec, gen) -> torch.Tensor:
    """The dense A that spec describes: (n, m), or (2, n, m) batched, spec.nnz entries each."""
    return random_dense(_lead(spec) + (spec.n, spec.m), spec.dtype, gen, nnz=spec.nnz, empty_rows=spec.empty_rows)


def make_mm(spec: Spec) -> Case:
    gen = seeded("sparse_mm", spec)
    D = _spec_dense(spec, gen)
    B = dense_operand(_lead(spec) + (spec.m, spec.p), spec.dtype, gen, spec.bmode)
    return _sparse_case(spec, D, {"B": B}, lambda A, B: tsgu.sparse_mm(A, B), lambda Dv, B: Dv @ B)


def make_mm_dense_a(spec: Spec) -> Case:
    """sparse_mm(X, A), torch.sparse.mm's dense first operand: X (p, n) dense times the
    sparse A (n, m), both batched or not."""
    gen = seeded("sparse_mm_dense_a", spec)
    D = _spec_dense(spec, gen)
    X = dense_operand(_lead(spec) + (spec.p, spec.n), spec.dtype, gen, spec.bmode)
    return _sparse_case(spec, D, {"X": X}, lambda A, X: tsgu.sparse_mm(X, A), lambda Dv, X: X @ Dv)


def make_mm_sparse(spec: Spec) -> Case:
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


def make_mm_reduce(spec: Spec) -> Case:
    reduce = REDUCTIONS[spec.variant]
    gen = seeded("sparse_mm_reduce", spec)
    D = _spec_dense(spec, gen)
    B = dense_operand(_lead(spec) + (spec.m, spec.p), spec.dtype, gen, spec.bmode)
    case = _sparse_case(spec, D, {"B": B}, lambda A, B: tsgu.sparse_mm(A, B, reduce), lambda Dv, B: Dv)
    A = case.build(case.leaves["values"].detach())
    pattern = pattern_of(A)
    case.ref = lambda v, B: dense_reduce(dense_of(A, v), pattern, B, reduce)
    return case


def tri_options(variant: int, layout: str):
    """(upper, unitriangular, transpose) of a triangular-solve variant; a one-entry
    A ("coo_expanded") is singular unless unitriangular."""
    return bool(variant & 1), bool(variant & 2) or layout == "coo_expanded", bool(variant & 4)


def make_trisolve(spec: Spec) -> Case:
    gen = seeded("sparse_triangular_solve", spec)
    upper, unit, transpose = tri_options(spec.variant, spec.layout)
    density = min(1.0, spec.nnz / max(1, spec.n * spec.n))
    D = _squeeze(tri_dense(_batch(spec), spec.n, upper, unit, spec.dtype, gen, density), spec)
    B = dense_operand(_lead(spec) + (spec.n, spec.p), spec.dtype, gen, spec.bmode)
    return _sparse_case(
        spec, D, {"B": B},
        lambda A, B: tsgu.sparse_triangular_solve(A, B, upper=upper, unitriangular=unit, transpose=transpose),
        lambda Dv, B: dense_trisolve(Dv, B, upper, unit, transpose))


def _rhs(spec: Spec, rows: int, gen) -> torch.Tensor:
    """B of a 2D system: (rows,) for odd variants, else (rows, p)."""
    shape = (rows,) if spec.variant & 1 else (rows, spec.p)
    return dense_operand(shape, spec.dtype, gen, spec.bmode)


def _solver_tol(dtype):
    return 1e-12 if dtype == torch.float64 else 1e-6


def make_generic_solve(spec: Spec) -> Case:
    from torchsparsegradutils.utils import MINRESSettings
    gen = seeded("sparse_generic_solve", spec)
    D = spd_dense(spec.n, spec.nnz, spec.dtype, gen)
    B = _rhs(spec, spec.n, gen)
    settings = MINRESSettings(minres_tolerance=_solver_tol(spec.dtype))

    def ref(Dv, B):
        return torch.linalg.solve(Dv, B)
    return _sparse_case(spec, D, {"B": B}, lambda A, B: tsgu.sparse_generic_solve(A, B, settings=settings), ref)


def make_lstsq(spec: Spec) -> Case:
    gen = seeded("sparse_generic_lstsq", spec)
    rows = spec.m + spec.n
    D = tall_dense(rows, spec.m, spec.nnz, spec.dtype, gen)
    B = _rhs(spec, rows, gen)

    def ref(Dv, B):
        X = torch.linalg.lstsq(Dv, B.unsqueeze(-1) if B.dim() == 1 else B).solution
        return X.squeeze(-1) if B.dim() == 1 else X
    return _sparse_case(spec, D, {"B": B}, lambda A, B: tsgu.sparse_generic_lstsq(A, B), ref)


def make_csr_tensor(spec: Spec) -> Case:
    gen = seeded("sparse_csr_tensor", spec)
    D = _spec_dense(replace(spec, batched=False), gen)
    A = to_sparse(D, spec.layout, spec.itype)
    crow, col = A.crow_indices(), A.col_indices()
    return Case({"values": leaf_like(A.values())}, (crow, col),
                lambda v: tsgu.sparse_csr_tensor(crow, col, v, A.shape).to_dense(),
                lambda v: dense_of(A, v))


def make_coo_tensor(spec: Spec) -> Case:
    """sparse_mm of our sparse_coo_tensor: the values gradient comes back on the pattern."""
    gen = seeded("sparse_coo_tensor", spec)
    D = _spec_dense(spec, gen)
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


def _lse_ref(A, f):
    pattern = pattern_of(A)
    return lambda v: f(dense_of(A, v), pattern)


def make_logsumexp(spec: Spec) -> Case:
    gen = seeded("sparse_logsumexp", spec)
    dim, keepdim, zeros = lse_options(spec.variant, spec.batched)
    D = _spec_dense(spec, gen)
    case = _sparse_case(spec, D, {},
                        lambda A: tsgu.sparse_logsumexp(A, dim, keepdim=keepdim, include_zeros=zeros),
                        lambda Dv: Dv)
    A = case.build(case.leaves["values"].detach())
    case.ref = _lse_ref(A, lambda Dv, pat: dense_logsumexp(Dv, pat, dim, keepdim, zeros))
    return case


def make_bidir(spec: Spec) -> Case:
    gen = seeded("sparse_bidir_logsumexp", spec)
    zeros = not spec.variant & 1
    D = _spec_dense(spec, gen)
    case = _sparse_case(spec, D, {}, lambda A: tsgu.sparse_bidir_logsumexp(A, include_zeros=zeros),
                        lambda Dv: Dv)
    A = case.build(case.leaves["values"].detach())
    case.ref = _lse_ref(A, lambda Dv, pat: (dense_logsumexp(Dv, pat, -2, False, zeros),
                                            dense_logsumexp(Dv, pat, -1, False, zeros)))
    return case


def softmax_options(variant: int):
    """(dim, log) of a softmax variant: rows (-1) or columns (-2); softmax or log-softmax."""
    return (-1, -2)[variant & 1], bool(variant & 2)


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


def make_softmax(spec: Spec) -> Case:
    """sparse_softmax / sparse_log_softmax (by variant) of a torch sparse A; the output is
    its values (on the coalesced pattern)."""
    gen = seeded("sparse_softmax", spec)
    D = _spec_dense(spec, gen)
    case = _sparse_case(spec, D, {}, _softmax_fn(spec.variant), lambda Dv: Dv)
    A = case.build(case.leaves["values"].detach())
    shape = case.run(case.leaves["values"].detach()).shape
    case.ref = _softmax_ref(pattern_of(A), lambda v: dense_of(A, v), spec.variant, shape)
    return case


def make_softmax_sparse_csr(spec: Spec) -> Case:
    """sparse_softmax / sparse_log_softmax of a SparseCSR (the custom op's road)."""
    gen = seeded("SparseCSR.softmax", spec)
    D = _spec_dense(spec, gen)
    S, values, dense = _components(spec, D)
    pattern = dense(torch.ones(values.shape, dtype=torch.float64)) > 0
    return Case({"values": values}, (S.crow_indices, S.col_indices), _softmax_fn(spec.variant),
                _softmax_ref(pattern, dense, spec.variant, values.shape), build=lambda v: S._replace(values=v))


HEADS = 3      # the heads of the registry's multi-head cases


def _heads_components(spec: Spec, name: str):
    """(SparseCSR of a random A in spec.layout, leaf (.., nnz, HEADS) values in its order,
    dense(v): the (.., n, m, HEADS) tensor of the pattern holding v, pattern (.., n, m))."""
    gen = seeded(name, spec)
    D = _spec_dense(spec, gen)
    S, values, dense = _components(spec, D)
    heads = leaf_like(torch.randn((*values.shape, HEADS), generator=gen, dtype=torch.float64).to(spec.dtype))
    pattern = dense(torch.ones(values.shape, dtype=torch.float64)) > 0

    def dense_heads(v):
        return torch.stack([dense(v[..., h]) for h in range(HEADS)], -1)
    return S, heads, dense_heads, pattern


def make_softmax_heads(spec: Spec) -> Case:
    """sparse_softmax / sparse_log_softmax of a SparseCSR with (.., nnz, HEADS) values: each
    head the masked dense softmax of its own values."""
    S, values, dense, pattern = _heads_components(spec, "SparseCSR.softmax_heads")
    dim, log = softmax_options(spec.variant)

    def ref(v):
        return torch.stack([dense_softmax(D, pattern, dim, log)[pattern] for D in dense(v).unbind(-1)], -1) \
            .reshape(values.shape)
    return Case({"values": values}, (S.crow_indices, S.col_indices), _softmax_fn(spec.variant), ref,
                build=lambda v: S._replace(values=v))


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


def make_sampled_addmm(spec: Spec) -> Case:
    """sampled_addmm of a torch sparse A (beta, alpha by variant); the output is its values."""
    gen = seeded("sampled_addmm", spec)
    D = _spec_dense(spec, gen)
    X, Y = _sampled_addmm_operands(spec, gen)
    beta, alpha = sampled_addmm_options(spec.variant)
    case = _sparse_case(spec, D, {"X": X, "Y": Y},
                        lambda A, X, Y: stored_values(tsgu.sampled_addmm(A, X, Y, beta, alpha)), None)
    A = case.build(case.leaves["values"].detach())
    pattern = pattern_of(A)        # the result's values: A's (a COO's on its coalesced pattern)
    shape = values_of(A).shape if A.layout == torch.sparse_csr else (int(pattern.sum()),)
    case.ref = _sampled_addmm_ref(pattern, lambda v: dense_of(A, v), spec.variant, shape)
    return case


def make_sampled_addmm_sparse_csr(spec: Spec) -> Case:
    """sampled_addmm of a SparseCSR (the custom op tsgu::sddmm's road)."""
    gen = seeded("SparseCSR.sampled_addmm", spec)
    D = _spec_dense(spec, gen)
    S, values, dense = _components(spec, D)
    X, Y = _sampled_addmm_operands(spec, gen)
    beta, alpha = sampled_addmm_options(spec.variant)
    pattern = dense(torch.ones(values.shape, dtype=torch.float64)) > 0
    return Case({"values": values, "X": X, "Y": Y}, (S.crow_indices, S.col_indices),
                lambda S, X, Y: tsgu.sampled_addmm(S, X, Y, beta, alpha).values,
                _sampled_addmm_ref(pattern, dense, spec.variant, values.shape), build=lambda v: S._replace(values=v))


def make_sampled_addmm_heads(spec: Spec) -> Case:
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


def make_gather_mm(spec: Spec) -> Case:
    """a (N, D1) = (n, m), b (R, D1, D2) = (3, m, p), idx (N,) of spec.itype."""
    gen = seeded("gather_mm", spec)
    R = 3
    a = dense_operand((spec.n, spec.m), spec.dtype, gen, spec.bmode)
    b = torch.randn(R, spec.m, spec.p, generator=gen, dtype=spec.dtype)
    idx = torch.randint(0, R, (spec.n,), generator=gen).to(spec.itype)
    return Case({"a": a, "b": b}, (idx,), lambda a, b: tsgu.gather_mm(a, b, idx),
                lambda a, b: (a.unsqueeze(1) @ b[idx.long()]).squeeze(1))


def make_segment_mm(spec: Spec) -> Case:
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


def make_sparse_csr_mm(spec: Spec) -> Case:
    """sparse_mm on a SparseCSR (torch's batched CSR, or the stacked rows of a COO batch)."""
    gen = seeded("SparseCSR", spec)
    D = _spec_dense(spec, gen)
    S, values, dense = _components(spec, D)
    B = dense_operand(_lead(spec) + (spec.m, spec.p), spec.dtype, gen, spec.bmode)
    return Case({"values": values, "B": B}, (S.crow_indices, S.col_indices), lambda S, B: tsgu.sparse_mm(S, B),
                lambda v, B: dense(v) @ B, build=lambda v: S._replace(values=v))


def make_to_torch(spec: Spec) -> Case:
    """sparse_mm of the torch sparse tensor to_torch gives (PyTorch's own to_dense() cannot
    differentiate a batched CSR tensor)."""
    gen = seeded("SparseCSR.to_torch", spec)
    D = _spec_dense(spec, gen)
    S, values, dense = _components(spec, D)
    B = dense_operand(_lead(spec) + (spec.m, spec.p), spec.dtype, gen, spec.bmode)
    return Case({"values": values, "B": B}, (S.crow_indices, S.col_indices),
                lambda S, B: tsgu.sparse_mm(S.to_torch(), B), lambda v, B: dense(v) @ B,
                build=lambda v: S._replace(values=v))


def make_sparse_linear(spec: Spec) -> Case:
    """SparseLinear(m -> n) on the pattern of A (in spec.layout), through functional_call, so
    that its values and bias are the test's leaves; x (p, m), or (2, p, m) batched."""
    gen = seeded("SparseLinear", spec)
    D = _spec_dense(replace(spec, batched=False), gen)
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


def make_gcn_adjacency(spec: Spec) -> Case:
    """sparse_mm(gcn_adjacency(edge_index, n, edge_weight), B) (no n x n matrix, however many nodes)."""
    gen = seeded("gcn_norm", spec)
    ei = _edge_index(spec, gen)
    w = torch.rand(spec.nnz, generator=gen, dtype=spec.dtype) + 0.5
    B = dense_operand((spec.n, spec.p), spec.dtype, gen, spec.bmode)
    import torchsparsegradutils.nn as tnn
    return Case({"edge_weight": w, "B": B}, (ei,),
                lambda w, B: tsgu.sparse_mm(tnn.gcn_adjacency(ei, spec.n, edge_weight=w, dtype=w.dtype), B),
                lambda w, B: dense_gcn_adjacency(ei, spec.n, w) @ B)


def make_gcn_conv(spec: Spec) -> Case:
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


def make_gin_conv(spec: Spec) -> Case:
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


def make_sage_conv(spec: Spec) -> Case:
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


def make_graph_attention(spec: Spec) -> Case:
    """graph_attention on the pattern of a sparse A in spec.layout (its values unread), with
    1 + spec.variant heads of spec.p features; leaves x, score_src, score_dst, and an
    edge_score per stored entry with variant 1."""
    gen = seeded("graph_attention", spec)
    D = _spec_dense(replace(spec, batched=False), gen)
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


def make_gat_conv(spec: Spec) -> Case:
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


def make_mvn(spec: Spec) -> Case:
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


def make_encoder(spec: Spec) -> Case:
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
    return gen, _spec_dense(spec, gen)


def make_op_spmm(spec: Spec) -> Case:
    gen, D = _random_sparse(spec, "tsgu::spmm")
    X = dense_operand(_lead(spec) + (spec.m, spec.p), spec.dtype, gen, spec.bmode)
    return _op_sparse_case(spec, D, {"X": X}, lambda pat, v, X: torch.ops.tsgu.spmm(*pat, v, X), lambda Dv, X: Dv @ X)


def make_op_spmm_t(spec: Spec) -> Case:
    gen, D = _random_sparse(spec, "tsgu::spmm_t")
    Y = dense_operand(_lead(spec) + (spec.n, spec.p), spec.dtype, gen, spec.bmode)
    return _op_sparse_case(spec, D, {"Y": Y}, lambda pat, v, Y: torch.ops.tsgu.spmm_t(*pat, v, Y),
                           lambda Dv, Y: Dv.transpose(-2, -1) @ Y)


def make_op_sddmm(spec: Spec) -> Case:
    gen, D = _random_sparse(spec, "tsgu::sddmm")
    pattern, _, _ = _op_components(spec, D)
    rows, cols = compressed_positions(pattern[0], pattern[1])
    U = dense_operand(_lead(spec) + (spec.n, spec.p), spec.dtype, gen, spec.bmode)
    V = dense_operand(_lead(spec) + (spec.m, spec.p), spec.dtype, gen, spec.bmode)

    def ref(U, V):
        return (U @ V.transpose(-2, -1)).reshape(-1, spec.m)[rows, cols].reshape(pattern[1].shape)
    return Case({"U": U, "V": V}, pattern[:2], lambda U, V: torch.ops.tsgu.sddmm(*pattern, U, V), ref)


def make_op_trisolve(spec: Spec) -> Case:
    gen = seeded("tsgu::trisolve", spec)
    upper, unit, transpose = tri_options(spec.variant, spec.layout)
    density = min(1.0, spec.nnz / max(1, spec.n * spec.n))
    D = _squeeze(tri_dense(_batch(spec), spec.n, upper, unit, spec.dtype, gen, density), spec)
    B = dense_operand(_lead(spec) + (spec.n, spec.p), spec.dtype, gen, spec.bmode)
    return _op_sparse_case(spec, D, {"B": B},
                           lambda pat, v, B: torch.ops.tsgu.trisolve(*pat, v, B, upper, unit, transpose),
                           lambda Dv, B: dense_trisolve(Dv, B, upper, unit, transpose))


LSE_MODES = ("rows", "cols", "all", "both")


def make_op_lse(spec: Spec) -> Case:
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


def make_op_softmax(spec: Spec) -> Case:
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


def make_op_grouped_mm(spec: Spec) -> Case:
    gen = seeded("tsgu::grouped_mm", spec)
    off, perm, rel = _grouping(spec, gen, 3)
    a = dense_operand((spec.n, spec.m), spec.dtype, gen, spec.bmode)
    M = torch.randn(3, spec.m, spec.p, generator=gen, dtype=spec.dtype)
    return Case({"a": a, "M": M}, tuple(t for t in (off, perm) if t is not None),
                lambda a, M: torch.ops.tsgu.grouped_mm(off, perm, a, M),
                lambda a, M: (a.unsqueeze(1) @ M[rel]).squeeze(1))


def make_op_grouped_mm_tn(spec: Spec) -> Case:
    gen = seeded("tsgu::grouped_mm_tn", spec)
    off, perm, rel = _grouping(spec, gen, 3)
    a = dense_operand((spec.n, spec.m), spec.dtype, gen, spec.bmode)
    G = torch.randn(spec.n, spec.p, generator=gen, dtype=spec.dtype)
    return Case({"a": a, "G": G}, tuple(t for t in (off, perm) if t is not None),
                lambda a, G: torch.ops.tsgu.grouped_mm_tn(off, perm, a, G),
                lambda a, G: torch.zeros(3, spec.m, spec.p, dtype=a.dtype).index_add(
                    0, rel, a.unsqueeze(2) * G.unsqueeze(1)))
