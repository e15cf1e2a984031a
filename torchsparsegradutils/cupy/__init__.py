"""Bridge to SciPy / CuPy sparse matrices and solvers.

``have_cupy`` tells whether CuPy is installed.  CUDA tensors go to CuPy
(``cupyx.scipy.sparse``) through DLPack when it is; CPU tensors, and CUDA
tensors without CuPy (copied to the host and back), go to NumPy / SciPy.
"""
from .cupy_bindings import (
    _backend_to_torch,
    _get_array_modules,
    _torch_to_backend,
    c2t_coo,
    c2t_csr,
    have_cupy,
    t2c_coo,
    t2c_csr,
)
from .cupy_sparse_solve import sparse_solve_c4t

__all__ = ["have_cupy", "c2t_coo", "t2c_coo", "c2t_csr", "t2c_csr", "_get_array_modules", "_torch_to_backend",
           "_backend_to_torch", "sparse_solve_c4t"]
