"""Bad-input cases, as sources a child process runs (see children.child_outcomes):
malformed sparse structure every sparse op is given (MALFORMED), and each surface's own."""
from typing import Dict


# X and Y of sampled_addmm's malformed_call (on a malformed A)
SAMPLED_ADDMM_XY = ("torch.ones(*A.shape[:-1], 2, dtype=A.dtype), "
                    "torch.ones(*A.shape[:-2], 2, A.shape[-1], dtype=A.dtype)")


# a malformed A as a SparseCSR (in the SparseCSR surfaces' malformed_call)
SPARSE_CSR_OF_A = ("(SparseCSR(A.crow_indices(), A.col_indices(), A.values(), tuple(A.shape)) "
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


GCN_MALFORMED = {
    "node_id_negative": "torch.tensor([[0, -1], [1, 0]])",
    "node_id_too_large": "torch.tensor([[0, 1], [3, 0]])",
    "node_id_huge_int64": "torch.tensor([[0, 2**62], [1, 0]])",
    "node_id_huge_int32": "torch.tensor([[0, 2**31 - 1], [1, 0]], dtype=torch.int32)",
    "edge_index_1d": "torch.tensor([0, 1])",
    "edge_index_3_rows": "torch.tensor([[0, 1], [1, 0], [0, 0]])",
}


def gcn_malformed(call: str) -> Dict[str, str]:
    return {name: _src(f"e = {src}", call) for name, src in GCN_MALFORMED.items()}


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


def custom_op_call(op: str, rest: str) -> str:
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
