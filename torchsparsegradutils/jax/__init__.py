"""Bridge to JAX (an optional extra: ``pip install "torchsparsegradutils[jax]"``).

Conversions between torch tensors and JAX arrays / ``jax.experimental.sparse``
matrices through DLPack (no copies where dtypes allow), ``spmm_t4j`` (a torch
sparse matrix as a JAX-differentiable linear operator, on our kernels) and
``sparse_solve_j4t`` (a JAX solver inside torch autograd, with sparse gradients
from our SDDMM kernel).  ``have_jax`` tells whether JAX is installed; without
it the functions are absent and reaching for one raises ImportError.
"""
import importlib.util

have_jax = importlib.util.find_spec("jax") is not None

__all__ = ["j2t", "t2j", "spmm_t4j", "j2t_coo", "t2j_coo", "j2t_csr", "t2j_csr", "sparse_solve_j4t"]

if have_jax:
    from .jax_bindings import j2t, j2t_coo, j2t_csr, spmm_t4j, t2j, t2j_coo, t2j_csr
    from .jax_sparse_solve import sparse_solve_j4t
else:
    def __getattr__(name):
        if name in __all__:
            raise ImportError(f"torchsparsegradutils.jax.{name} needs JAX: pip install jax jaxlib "
                              "(or the extra: pip install 'torchsparsegradutils[jax]')")
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
