"""The op registry: one Op entry per public op and surface (the ops, SparseCSR and its
to_torch, the nn layers, the distribution, the encoder, the custom operators called
directly), which test_hygiene.py and test_properties.py sweep; what each takes, its
tolerances, its bad-input cases and its hypersparse calls; and run_case, which runs
a case forward and backward."""
import importlib
import types
from dataclasses import dataclass, field
from typing import Callable, Dict, Optional, Tuple

import pytest
import torch

import torchsparsegradutils as tsgu

from support import cases
from support import gatv2 as gatv2_cases
from support.cases import ENCODER_VARIANTS, GAT_VARIANTS, REDUCTIONS, Case, Spec
from support.malformed import (CUSTOM_OP_MALFORMED, ENCODER_MALFORMED, GROUPED_MALFORMED, MALFORMED, MALFORMED_BATCHED,
                               SAMPLED_ADDMM_XY, SPARSE_CSR_MALFORMED, SPARSE_CSR_OF_A, TO_TORCH_MALFORMED,
                               custom_op_call, gcn_malformed)
from support.operands import COO_LAYOUTS, CSR_LAYOUTS, FULL_RANK_LAYOUTS, HALF_DTYPES, LAYOUTS, dense_operand, seeded
from support.references import SAGE_AGGRS


FLOAT_TOL = {torch.float32: dict(rtol=2e-4, atol=2e-4), torch.float64: dict(rtol=1e-9, atol=1e-10)}
# 16-bit values (sparse_mm): the op sums in float32 and rounds once, the dense
# reference in its own way; a few units in the last place apart at most
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


OPS = [
    Op("sparse_mm", cases.make_mm, must_raise=("values", "B"), dtypes=tuple(FLOAT_TOL) + HALF_DTYPES,
       tol={**FLOAT_TOL, **HALF_TOL},
       malformed_call="sparse_mm(A, torch.ones(*A.shape[:-2], A.shape[-1], 2))",
       large=Spec(batched=True, n=700, m=600, p=24, nnz=12000, dtype=torch.float32, itype=torch.int32)),
    # sparse_mm(A, B, reduce) with reduce "mean", "amax", "amin" (variants 0-2); large: amax
    Op("sparse_mm_reduce", cases.make_mm_reduce, function="sparse_mm", must_raise=("values", "B"),
       dtypes=tuple(FLOAT_TOL) + HALF_DTYPES, tol={**FLOAT_TOL, **HALF_TOL}, variants=len(REDUCTIONS),
       malformed_call="sparse_mm(A, torch.ones(*A.shape[:-2], A.shape[-1], 2), 'amax')",
       large=Spec(batched=True, n=2000, m=1500, p=140, nnz=20000, dtype=torch.float32, itype=torch.int32,
                  variant=1)),
    # sparse_mm(X, A): a dense X times the sparse A (torch.sparse.mm's dense first operand)
    Op("sparse_mm_dense_a", cases.make_mm_dense_a, function="sparse_mm", must_raise=("values", "X"),
       dtypes=tuple(FLOAT_TOL) + HALF_DTYPES, tol={**FLOAT_TOL, **HALF_TOL}, own_kernels=False,
       malformed_call="sparse_mm(torch.ones(*A.shape[:-2], 2, A.shape[-2]), A)",
       large=Spec(batched=True, n=700, m=600, p=24, nnz=12000, dtype=torch.float32, itype=torch.int32)),
    # sparse_mm(A, B) with a sparse B (in A's layout); malformed A, then malformed B
    Op("sparse_mm_sparse", cases.make_mm_sparse, function="sparse_mm", must_raise=("values", "B_values"),
       dtypes=tuple(FLOAT_TOL) + HALF_DTYPES, tol={**FLOAT_TOL, **HALF_TOL},
       malformed_call="sparse_mm(A, torch.ones(*A.shape[:-2], A.shape[-1], 2).to_sparse())",
       malformed={f"B_{name}": f"A = {src}\ninputs = [A]\n"
                               f"call = lambda: sparse_mm(torch.ones(*A.shape[:-2], 2, A.shape[-2]).to_sparse(), A)"
                  for name, src in MALFORMED.items()},
       large=Spec(batched=True, n=700, m=600, p=500, nnz=12000, dtype=torch.float32, itype=torch.int32)),
    Op("sparse_triangular_solve", cases.make_trisolve,
       malformed_call="sparse_triangular_solve(A, torch.ones(*A.shape[:-1], 1), upper=True)",
       large=Spec(batched=True, n=300, p=6, nnz=4000), variants=8),
    Op("sparse_generic_solve", cases.make_generic_solve, layouts=FULL_RANK_LAYOUTS, batched=False,
       tol={torch.float32: dict(rtol=2e-3, atol=2e-3), torch.float64: dict(rtol=1e-7, atol=1e-9)},
       malformed_call="sparse_generic_solve(A, torch.ones(A.shape[0]))",
       large=Spec(n=3000, p=3, nnz=200000), variants=2),
    Op("sparse_generic_lstsq", cases.make_lstsq, layouts=FULL_RANK_LAYOUTS, batched=False,
       tol={torch.float32: dict(rtol=2e-3, atol=2e-3), torch.float64: dict(rtol=1e-6, atol=1e-8)},
       malformed_call="sparse_generic_lstsq(A, torch.ones(A.shape[0]))",
       large=Spec(n=4000, m=2000, p=1, nnz=600000), variants=2),
    Op("sparse_csr_tensor", cases.make_csr_tensor, layouts=CSR_LAYOUTS, batched=False, must_raise=(),
       dtypes=tuple(FLOAT_TOL) + HALF_DTYPES, tol={**FLOAT_TOL, **HALF_TOL},
       malformed_call="sparse_mm(sparse_csr_tensor(A.crow_indices(), A.col_indices(), "
                      "A.values().requires_grad_(), A.shape), torch.ones(A.shape[-1], 2)).sum().backward()",
       large=Spec(n=2000, m=2000, nnz=600000), sparse_input=False),
    Op("sparse_coo_tensor", cases.make_coo_tensor, layouts=COO_LAYOUTS, itypes=(torch.int64,), must_raise=("values", "B"),
       dtypes=tuple(FLOAT_TOL) + HALF_DTYPES, tol={**FLOAT_TOL, **HALF_TOL},
       malformed_call="sparse_mm(sparse_coo_tensor(A._indices(), A._values().requires_grad_(), A.shape, "
                      "is_coalesced=A.is_coalesced()), torch.ones(*A.shape[:-2], A.shape[-1], 2)).sum().backward()",
       large=Spec(layout="coo", batched=True, n=700, m=600, p=8, nnz=12000), sparse_input=False),
    Op("sparse_logsumexp", cases.make_logsumexp,
       malformed_call="sparse_logsumexp(A, dim=A.dim() - 1)",
       large=Spec(batched=True, n=1000, m=800, nnz=300000), variants=16),
    Op("sparse_bidir_logsumexp", cases.make_bidir,
       malformed_call="sparse_bidir_logsumexp(A)",
       large=Spec(batched=True, n=1000, m=800, nnz=300000), variants=2),
    # variants: rows / columns, softmax / log-softmax (softmax_options); the backward
    # reads the output alone, so an edit of the values after the forward is harmless
    Op("sparse_softmax", cases.make_softmax, must_raise=(), dtypes=tuple(FLOAT_TOL) + HALF_DTYPES,
       tol={**FLOAT_TOL, **HALF_TOL}, malformed_call="sparse_softmax(A)",
       large=Spec(batched=True, n=1000, m=800, nnz=300000), variants=4),
    Op("SparseCSR.softmax", cases.make_softmax_sparse_csr, function="sparse_log_softmax", must_raise=(),
       dtypes=tuple(FLOAT_TOL) + HALF_DTYPES, tol={**FLOAT_TOL, **HALF_TOL},
       malformed_call=f"sparse_log_softmax({SPARSE_CSR_OF_A}, -2)", malformed_layouts=("csr",),
       large=Spec(batched=True, n=1000, m=800, nnz=300000), variants=4, sparse_input=False, own_kernels=False),
    Op("SparseCSR.softmax_heads", cases.make_softmax_heads, function="sparse_softmax", must_raise=(),
       dtypes=tuple(FLOAT_TOL) + HALF_DTYPES, tol={**FLOAT_TOL, **HALF_TOL},
       malformed_call=f"sparse_softmax({SPARSE_CSR_OF_A}._replace(values=torch.stack([A.values()] * 2, -1)))",
       malformed_layouts=("csr",), large=Spec(batched=True, n=1000, m=800, nnz=300000), variants=4,
       sparse_input=False, own_kernels=True),
    # variants: (beta, alpha) (sampled_addmm_options); the backward reads X and Y, not A's values
    Op("sampled_addmm", cases.make_sampled_addmm, must_raise=("X", "Y"),
       malformed_call=f"sampled_addmm(A, {SAMPLED_ADDMM_XY})",
       large=Spec(batched=True, n=1000, m=800, p=16, nnz=300000), variants=2),
    Op("SparseCSR.sampled_addmm", cases.make_sampled_addmm_sparse_csr, function="sampled_addmm", must_raise=("X", "Y"),
       malformed_call=f"sampled_addmm({SPARSE_CSR_OF_A}, {SAMPLED_ADDMM_XY})", malformed_layouts=("csr",),
       large=Spec(batched=True, n=1000, m=800, p=16, nnz=300000), variants=2, sparse_input=False, own_kernels=False),
    Op("SparseCSR.sampled_addmm_heads", cases.make_sampled_addmm_heads, function="sampled_addmm", batched=False,
       must_raise=("X", "Y"), malformed_call=f"sampled_addmm({SPARSE_CSR_OF_A}._replace(values=A.values()[:, None]), "
                                             "torch.ones(1, 3, 2), torch.ones(1, 2, 3))",
       malformed_layouts=("csr",), large=Spec(n=1000, m=800, p=16, nnz=300000), variants=2, sparse_input=False,
       own_kernels=False),
    Op("gather_mm", cases.make_gather_mm, layouts=("dense",), batched=False, must_raise=("a", "b"),
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
    Op("segment_mm", cases.make_segment_mm, layouts=("dense",), batched=False, itypes=(torch.int64,),
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
    Op("SparseCSR", cases.make_sparse_csr_mm, must_raise=("values", "B"), dtypes=tuple(FLOAT_TOL) + HALF_DTYPES,
       tol={**FLOAT_TOL, **HALF_TOL}, malformed=SPARSE_CSR_MALFORMED, malformed_match="",
       malformed_call=f"sparse_mm({SPARSE_CSR_OF_A}, torch.ones(*A.shape[:-2], A.shape[-1], 2))",
       large=Spec(batched=True, n=700, m=600, p=24, nnz=12000, dtype=torch.float32, itype=torch.int32),
       sparse_input=False, own_kernels=False),
    Op("SparseCSR.to_torch", cases.make_to_torch, must_raise=("values", "B"), malformed=TO_TORCH_MALFORMED,
       malformed_match="", malformed_call=f"{SPARSE_CSR_OF_A}.to_torch()", dtype_error=None,
       large=Spec(batched=True, n=300, m=300, nnz=4000), sparse_input=False, own_kernels=False),
    Op("nn.SparseLinear", cases.make_sparse_linear, batched=True, must_raise=("values", "x"),
       dtypes=tuple(FLOAT_TOL) + HALF_DTYPES, tol={**FLOAT_TOL, **HALF_TOL},
       malformed_call="tsgu.nn.SparseLinear(A.shape[-1], A.shape[-2], pattern=A)", malformed_match="",
       large=Spec(n=600, m=700, p=64, nnz=30000, dtype=torch.float32, itype=torch.int32), sparse_input=False,
       own_kernels=False),
    Op("nn.gcn_adjacency", cases.make_gcn_adjacency, layouts=("dense",), batched=False, must_raise=(),
       malformed=gcn_malformed("tsgu.nn.gcn_adjacency(e, 3)"), malformed_match="", dtype_error=None,
       large=Spec(n=20000, nnz=400000), sparse_input=False, own_kernels=False),
    Op("nn.GCNConv", cases.make_gcn_conv, layouts=("dense",), batched=False, must_raise=("x", "weight"),
       malformed=gcn_malformed("tsgu.nn.GCNConv(2, 2)(torch.randn(3, 2), e)"), malformed_match="",
       dtype_error=None,
       large=Spec(n=5000, m=16, p=16, nnz=100000), sparse_input=False, own_kernels=False,
       dense_products=True),
    Op("nn.GINConv", cases.make_gin_conv, layouts=("dense",), batched=False, must_raise=("x", "weight"),
       malformed=gcn_malformed("tsgu.nn.GINConv(torch.nn.Linear(2, 2))(torch.randn(3, 2), e)"),
       malformed_match="", dtype_error=None,
       large=Spec(n=5000, m=16, p=16, nnz=100000), sparse_input=False, own_kernels=False,
       dense_products=True),
    # SAGEConv with aggr "mean", "max", "sum" (variants 0-2)
    Op("nn.SAGEConv", cases.make_sage_conv, layouts=("dense",), batched=False, must_raise=("x",),
       malformed=gcn_malformed("tsgu.nn.SAGEConv(2, 2)(torch.randn(3, 2), e)"), malformed_match="",
       dtype_error=None, variants=len(SAGE_AGGRS),
       large=Spec(n=5000, m=16, p=16, nnz=100000), sparse_input=False, own_kernels=False,
       dense_products=True),
    # ---- graph attention: the op on a sparse A's pattern (1 head, or 2 with an edge_score:
    # variants 0-1), and GATConv (GAT_VARIANTS)
    Op("graph_attention", cases.make_graph_attention, batched=False,
       must_raise=("x", "score_src", "score_dst", "edge_score"),
       dtype_error=(TypeError, "supports float32 and float64"), variants=2,
       malformed_call="graph_attention(A, torch.ones(A.shape[-1], 1, 2), torch.ones(A.shape[-1], 1), "
                      "torch.ones(A.shape[-2], 1))",
       large=Spec(n=600, m=500, p=16, nnz=30000, dtype=torch.float32, itype=torch.int32, variant=1),
       sparse_input=False),
    Op("nn.GATConv", cases.make_gat_conv, layouts=("dense",), batched=False, must_raise=("x", "weight"),
       malformed=gcn_malformed("tsgu.nn.GATConv(2, 2)(torch.randn(3, 2), e)"), malformed_match="",
       dtype_error=None, variants=len(GAT_VARIANTS),
       large=Spec(n=5000, m=16, p=16, nnz=100000, variant=1), sparse_input=False, own_kernels=False,
       dense_products=True),
    # GATv2: the op (1 head, or 2 with an edge_term and an edge_score: variants 0-1), and
    # GATv2Conv (gatv2_cases.GATV2_VARIANTS)
    Op("graph_attention_v2", gatv2_cases.make_graph_attention_v2, batched=False,
       must_raise=("x_src", "x_dst", "att", "edge_term"),
       dtype_error=(TypeError, "supports float32 and float64"), variants=2,
       malformed_call="graph_attention_v2(A, torch.ones(A.shape[-1], 1, 2), torch.ones(A.shape[-2], 1, 2), "
                      "torch.ones(1, 2))",
       large=Spec(n=600, m=500, p=16, nnz=30000, dtype=torch.float32, itype=torch.int32, variant=1),
       sparse_input=False),
    Op("nn.GATv2Conv", gatv2_cases.make_gatv2_conv, layouts=("dense",), batched=False,
       must_raise=("x", "weight_l", "att"),
       malformed=gcn_malformed("tsgu.nn.GATv2Conv(2, 2)(torch.randn(3, 2), e)"), malformed_match="",
       dtype_error=None, variants=len(gatv2_cases.GATV2_VARIANTS),
       large=Spec(n=5000, m=16, p=16, nnz=100000, variant=1), sparse_input=False, own_kernels=False,
       dense_products=True),
    Op("distributions.SparseMultivariateNormal", cases.make_mvn, layouts=FULL_RANK_LAYOUTS, must_raise=(),
       malformed_call="tsgu.distributions.SparseMultivariateNormal(torch.zeros(A.shape[:-1]), scale_tril=A, "
                      "validate_args=False).log_prob(torch.zeros(A.shape[:-1]))",
       large=Spec(batched=True, n=300, nnz=6000), variants=4, own_kernels=False),
    Op("encoders.PairwiseEncoder", cases.make_encoder, layouts=("coo", "csr"), must_raise=("B",),
       malformed=ENCODER_MALFORMED, malformed_match="",
       dtype_error=(ValueError, "must be either torch.float32 or torch.float64"),
       large=Spec(layout="csr", batched=True, n=60, m=60, p=16), variants=len(ENCODER_VARIANTS), sparse_input=False,
       own_kernels=False),
    Op("torch.ops.tsgu.spmm", cases.make_op_spmm, must_raise=("values", "X"), malformed=CUSTOM_OP_MALFORMED,
       malformed_match="", malformed_call=custom_op_call("spmm", "A.values(), torch.ones(*A.shape[:-2], A.shape[-1], 2)"),
       malformed_layouts=("csr",), dtype_error=None,
       large=Spec(batched=True, n=700, m=600, p=24, nnz=12000, dtype=torch.float32, itype=torch.int32),
       sparse_input=False, own_kernels=False),
    Op("torch.ops.tsgu.spmm_t", cases.make_op_spmm_t, must_raise=("values", "Y"),
       malformed_call=custom_op_call("spmm_t", "A.values(), torch.ones(*A.shape[:-1], 2)"), malformed_layouts=("csr",),
       dtype_error=None, large=Spec(batched=True, n=700, m=600, p=24, nnz=12000), sparse_input=False,
       own_kernels=False),
    Op("torch.ops.tsgu.sddmm", cases.make_op_sddmm, must_raise=("U", "V"),
       malformed_call=custom_op_call("sddmm", "torch.ones(*A.shape[:-1], 2), torch.ones(*A.shape[:-2], A.shape[-1], 2)"),
       malformed_layouts=("csr",), dtype_error=None,
       large=Spec(batched=True, n=700, m=600, p=24, nnz=12000), sparse_input=False, own_kernels=False),
    Op("torch.ops.tsgu.trisolve", cases.make_op_trisolve, layouts=FULL_RANK_LAYOUTS, must_raise=("values",),
       malformed_call=custom_op_call("trisolve", "A.values(), torch.ones(*A.shape[:-1], 1), True, False, False"),
       malformed_layouts=("csr",), dtype_error=None, large=Spec(batched=True, n=300, p=6, nnz=4000), variants=8,
       sparse_input=False, own_kernels=False),
    Op("torch.ops.tsgu.lse", cases.make_op_lse, must_raise=("values",),
       malformed_call="torch.ops.tsgu.lse(A.crow_indices(), A.col_indices(), list(A.shape), A.values(), 'rows', True)",
       malformed_layouts=("csr",), dtype_error=None, large=Spec(batched=True, n=1000, m=800, nnz=300000),
       variants=8, sparse_input=False, own_kernels=False),
    Op("torch.ops.tsgu.softmax", cases.make_op_softmax, must_raise=(), dtypes=tuple(FLOAT_TOL) + HALF_DTYPES,
       tol={**FLOAT_TOL, **HALF_TOL},
       malformed_call="torch.ops.tsgu.softmax(A.crow_indices(), A.col_indices(), list(A.shape), A.values(), True, False)",
       malformed_layouts=("csr",), dtype_error=None, large=Spec(batched=True, n=1000, m=800, nnz=300000),
       variants=4, sparse_input=False, own_kernels=False),
    Op("torch.ops.tsgu.grouped_mm", cases.make_op_grouped_mm, layouts=("dense",), batched=False, itypes=(torch.int64,),
       must_raise=("a", "M"), malformed=GROUPED_MALFORMED, malformed_match="", dtype_error=None,
       large=Spec(n=20000, m=32, p=32), variants=2, sparse_input=False, own_kernels=False),
    Op("torch.ops.tsgu.grouped_mm_tn", cases.make_op_grouped_mm_tn, layouts=("dense",), batched=False,
       itypes=(torch.int64,), must_raise=("a", "G"), dtype_error=None, large=Spec(n=20000, m=32, p=32), variants=2,
       sparse_input=False, own_kernels=False),
]
OPS_BY_NAME = {op.name: op for op in OPS}
OP_IDS = [op.name for op in OPS]


def small(op: Op, **kw) -> Spec:
    """The op's default Spec (small sizes) in its CSR layout, or its first one; kw overrides."""
    layout = kw.pop("layout", "csr" if "csr" in op.layouts else op.layouts[0])
    return Spec(layout=layout, **kw)

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
    "sparse_mm_dense_a": ("sparse_mm(rnd(*lead, 0, n), A)",),                # p = 0: X and the output are empty
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
    "graph_attention_v2": DENSE_ROWS,
    "nn.GATv2Conv": DENSE_ROWS,
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
