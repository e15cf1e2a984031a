"""torchsparsegradutils: sparse matrix operations for PyTorch whose gradients stay sparse.

Hot loops are C kernels (csrc/) reached through DLPack; see README.md.
"""
from .sparse_matmul import sparse_mm
from .sparse_tensor import sparse_csr_tensor

__all__ = ["sparse_mm", "sparse_csr_tensor"]
__version__ = "0.2.0.dev0"
