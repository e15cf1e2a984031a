"""The kernels as PyTorch custom operators (torch.library): see products.py (split by family next)."""
from .products import (gat, group_rows, grouped_mm, grouped_mm_tn, lse, op_args, sddmm, sddmm_arg, softmax, spgemm,
                       spmm, spmm_arg, spmm_t, spmm_t_arg, trisolve, trisolve_backward)

__all__ = ["gat", "group_rows", "grouped_mm", "grouped_mm_tn", "lse", "op_args", "sddmm", "sddmm_arg", "softmax",
           "spgemm", "spmm", "spmm_arg", "spmm_t", "spmm_t_arg", "trisolve", "trisolve_backward"]
