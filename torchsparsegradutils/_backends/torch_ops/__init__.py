"""The ops in PyTorch's own operations: for devices without kernels of ours (CUDA
where our kernels are not built or do not cover the op, and any other device),
with the meaning of the C kernels and their errors, and never a dense n x m matrix.

A batch is taken as one block-diagonal 2D matrix (_common.global_csr), built by index
arithmetic.  Errors carry the C kernels' messages (STATUS).  16-bit values are computed in float32 and rounded once, as the
kernels do (PyTorch's sparse CUDA ops do not take bfloat16).  One op family a module,
as the triton backend's; this package has the names the route calls.
"""
from ._common import global_csr, global_matrix  # noqa: F401
from .arg import gather_arg, sddmm_arg, spmm_arg, spmm_t_arg  # noqa: F401
from .gat import gat, gat_dropped, gat_grad  # noqa: F401
from .gatv2 import gatv2, gatv2_grad  # noqa: F401
from .grouped import group_rows, grouped_mm, grouped_mm_tn  # noqa: F401
from .lse import lse_grad, lse_groups, lse_items, lse_wsum  # noqa: F401
from .products import sddmm, spmm, spmm_t  # noqa: F401
from .softmax import group_sum, softmax, softmax_grad  # noqa: F401
from .spgemm import spgemm, spgemm_csr, spgemm_grad  # noqa: F401
from .trisolve import check_diagonal, triangular_diagonal, trisolve  # noqa: F401
