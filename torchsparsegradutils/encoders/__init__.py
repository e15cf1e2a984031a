"""Sparse neighbourhood matrices over the sites of a ``(C, *S)`` volume: :class:`PairwiseEncoder`.

The release's older names stay importable from here: ``PairwiseVoxelEncoder``
(warns when instantiated), ``calc_pairwise_coo_indices`` and its misspelling
``calc_pariwise_coo_indices`` (warn when looked up).
"""
import warnings

from .pairwise_encoder import PairwiseEncoder, calc_pairwise_coo_indices_nd

__all__ = ["PairwiseEncoder", "calc_pairwise_coo_indices_nd"]

_DEPRECATED_FUNCTIONS = ("calc_pairwise_coo_indices", "calc_pariwise_coo_indices")


def __getattr__(name):
    if name == "PairwiseVoxelEncoder":
        from .pairwise_voxel_encoder import PairwiseVoxelEncoder
        return PairwiseVoxelEncoder
    if name in _DEPRECATED_FUNCTIONS:
        warnings.warn(f"{name} is deprecated and will be removed in a future version. "
                      "Use calc_pairwise_coo_indices_nd instead.", DeprecationWarning, stacklevel=2)
        from . import pairwise_encoder
        return getattr(pairwise_encoder, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
