"""Multivariate normal distributions with sparse triangular factors (see sparse_multivariate_normal)."""
from .sparse_multivariate_normal import SparseMultivariateNormal, SparseMultivariateNormalNative

__all__ = ["SparseMultivariateNormal", "SparseMultivariateNormalNative"]
