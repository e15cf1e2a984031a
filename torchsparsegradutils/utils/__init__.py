"""Utilities: iterative solvers (CPU and CUDA, on a sparse A or any operator) and sparse helpers."""
from ._operator import ConvergenceWarning
from .bicgstab import BICGSTABSettings, bicgstab
from .dist_stats_helpers import cov_nagao_test, mean_hotelling_t2_test
from .linear_cg import CGInfo, LinearCGSettings, linear_cg
from .lsmr import lsmr
from .minres import MINRESSettings, minres
from .random_sparse import (
    generate_random_sparse_coo_matrix,
    generate_random_sparse_csr_matrix,
    generate_random_sparse_strictly_triangular_coo_matrix,
    generate_random_sparse_strictly_triangular_csr_matrix,
    generate_random_sparse_triangular_coo_matrix,
    generate_random_sparse_triangular_csr_matrix,
    make_spd_sparse,
    rand_sparse,
    rand_sparse_tri,
)
from .reordering import reverse_cuthill_mckee, sparse_permute
from .utils import (
    convert_coo_to_csr,
    convert_coo_to_csr_indices_values,
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
    "convert_coo_to_csr_indices_values",
    "sparse_block_diag",
    "sparse_block_diag_split",
    "stack_csr",
    "sparse_eye",
    "reverse_cuthill_mckee",
    "sparse_permute",
    "rand_sparse",
    "rand_sparse_tri",
    "make_spd_sparse",
    "generate_random_sparse_coo_matrix",
    "generate_random_sparse_csr_matrix",
    "generate_random_sparse_strictly_triangular_coo_matrix",
    "generate_random_sparse_strictly_triangular_csr_matrix",
    "generate_random_sparse_triangular_coo_matrix",
    "generate_random_sparse_triangular_csr_matrix",
    "mean_hotelling_t2_test",
    "cov_nagao_test",
]
