"""Utilities: iterative solvers (CPU and CUDA, on a sparse A or any operator) and sparse helpers."""
from ._operator import ConvergenceWarning
from .bicgstab import BICGSTABSettings, bicgstab
from .linear_cg import CGInfo, LinearCGSettings, linear_cg
from .lsmr import lsmr
from .minres import MINRESSettings, minres
from .random_sparse import make_spd_sparse, rand_sparse, rand_sparse_tri
from .utils import (
    convert_coo_to_csr,
    sparse_block_diag,
    sparse_block_diag_split,
    sparse_eye,
    stack_csr,
)

__all__ = [
    "linear_cg",
    "LinearCGSettings",
    "CGInfo",
    "minres",
    "MINRESSettings",
    "bicgstab",
    "BICGSTABSettings",
    "lsmr",
    "ConvergenceWarning",
    "convert_coo_to_csr",
    "sparse_block_diag",
    "sparse_block_diag_split",
    "stack_csr",
    "sparse_eye",
    "rand_sparse",
    "rand_sparse_tri",
    "make_spd_sparse",
]
