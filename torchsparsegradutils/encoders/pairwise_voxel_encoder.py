"""PairwiseVoxelEncoder: :class:`PairwiseEncoder` restricted to (C, H, D, W) volumes (deprecated)."""
import warnings

import torch

from .pairwise_encoder import PairwiseEncoder

__all__ = ["PairwiseVoxelEncoder"]


class PairwiseVoxelEncoder(PairwiseEncoder):
    """:class:`PairwiseEncoder` for a ``(C, H, D, W)`` volume; warns (DeprecationWarning) when created.

    >>> import warnings
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore", DeprecationWarning)
    ...     enc = PairwiseVoxelEncoder(1.0, (1, 2, 2, 2))
    >>> len(enc.offsets), tuple(enc.indices.shape)
    (6, (2, 24))
    """

    def __init__(self, radius, volume_shape, diag=False, upper=None, channel_voxel_relation="indep",
                 layout=torch.sparse_coo, indices_dtype=torch.int64, device="cpu"):
        warnings.warn("PairwiseVoxelEncoder is deprecated and will be removed in a future version. "
                      "Use PairwiseEncoder instead, which supports any number of spatial dimensions.",
                      DeprecationWarning, stacklevel=2)
        if not (isinstance(volume_shape, (tuple, list)) and len(volume_shape) == 4):
            raise ValueError("`volume_shape` must be a 4D tuple of positive integers, representing [C, H, D, W]")
        super().__init__(radius, volume_shape, diag, upper, channel_voxel_relation, layout, indices_dtype, device)
