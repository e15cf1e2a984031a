"""torchsparsegradutils: sparse matrix operations for PyTorch whose gradients stay sparse.

The operations take torch sparse tensors (COO or CSR, 2D or batched) or a
:class:`SparseCSR`, and give the gradient with respect to the sparse operand only at
its stored entries.  Their loops are C kernels (CUDA kernels on the GPU), reached
through DLPack.
"""
from ._core.sparse_csr import SparseCSR
from .sparse_matmul import sparse_mm
from .sparse_tensor import sparse_coo_tensor, sparse_csr_tensor
from .sparse_solve import sparse_triangular_solve, sparse_generic_solve
from .sparse_lstsq import sparse_generic_lstsq
from .indexed_matmul import gather_mm, segment_mm
from .sparse_logsumexp import sparse_logsumexp, sparse_bidir_logsumexp
from .sparse_softmax import sparse_softmax, sparse_log_softmax
from .sampled_addmm import sampled_addmm
from .graph_attention import graph_attention
from .graph_attention_v2 import graph_attention_v2
from .memory import release_memory

__all__ = ["SparseCSR", "sparse_mm", "sparse_csr_tensor", "sparse_coo_tensor", "sparse_triangular_solve", "sparse_generic_solve",
           "sparse_generic_lstsq", "gather_mm", "segment_mm", "sparse_logsumexp", "sparse_bidir_logsumexp", "sparse_softmax", "sparse_log_softmax",
           "sampled_addmm", "graph_attention", "graph_attention_v2", "release_memory"]
__version__ = "0.3.0"  # the one source (pyproject.toml reads it); above the published 0.2.7
