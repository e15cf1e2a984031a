r"""Sparse matrices over the sites of a ``(C, *S)`` volume that couple each site with its neighbours.

A site is a position ``p = (c, s_1, ..., s_d)`` of the volume, numbered in
row-major order (``torch.arange(C * prod(S)).reshape(C, *S)``).  A neighbour
*offset* ``o = (c', s'_1, ..., s'_d)`` links the site ``p`` (the row) with the
site ``p - o`` (the column) wherever both lie inside the volume: no padding,
no wrap-around.  The offsets are the spatial offsets in the Euclidean ball of
a given radius, plus channel offsets chosen by ``channel_voxel_relation``
(see :func:`_gen_offsets_nd`, which also fixes their order).

:class:`PairwiseEncoder` turns a dense block of per-offset values
``values[k, p]`` (shape ``(N, C, *S)``, ``N`` offsets) into the sparse matrix
``M[p, p - o_k] = values[k, p]``.  Its pattern is computed once, at
construction, already in CSR order (row-major, ascending columns): each call
is then a single gather of the values into that order, with no sort and no
coalesce.  The order comes for free: in a row ``p`` the column ``p - o`` grows
as the linear shift ``delta(o) = sum_i o_i * stride_i`` shrinks, so walking the
sites in order and, for each, the offsets by decreasing ``delta`` enumerates
the entries row-major with ascending columns.  Two offsets that share a
``delta`` are never both in bounds at the same site (the column would
determine the offset), so no two entries collide.
"""
import numbers
from functools import reduce
from itertools import product
from math import ceil, floor
from operator import mul
from typing import Dict, List, Optional, Set, Tuple

import torch

from .._core.torch_sparse import coo_tensor
from ..sparse_tensor import sparse_coo_tensor, sparse_csr_tensor

__all__ = ["PairwiseEncoder", "calc_pairwise_coo_indices_nd", "calc_pairwise_coo_indices"]

_RELATIONS = ("indep", "intra", "inter")


def _trim_nd(x: torch.Tensor, offsets: Tuple[int, ...]) -> torch.Tensor:
    """The view of ``x`` without its first ``k`` entries along each axis with offset ``k > 0``,
    and without its last ``|k|`` entries along each axis with ``k < 0``.

    >>> x = torch.arange(12).view(3, 4)
    >>> _trim_nd(x, (1, -1))
    tensor([[ 4,  5,  6],
            [ 8,  9, 10]])
    """
    if x.dim() != len(offsets):
        raise ValueError(f"Number of dimensions in tensor ({x.dim()}) does not match number of offsets "
                         f"({len(offsets)})")
    return x[tuple(slice(k, None) if k > 0 else slice(None, k if k < 0 else None) for k in offsets)]


def _gen_coords_nd(radius: float, spatial_dims: int) -> Set[Tuple[int, ...]]:
    """The nonzero integer points of Z^spatial_dims within Euclidean distance ``radius`` of the origin.

    >>> sorted(_gen_coords_nd(1.0, 2))
    [(-1, 0), (0, -1), (0, 1), (1, 0)]
    """
    if spatial_dims <= 0:
        raise ValueError(f"spatial_dims must be a positive integer, got {spatial_dims}")
    span = range(floor(-radius), ceil(radius) + 1)
    return {p for p in product(span, repeat=spatial_dims) if any(p) and sum(v * v for v in p) <= radius * radius}


def _gen_coords(radius: float) -> Set[Tuple[int, int, int]]:
    """:func:`_gen_coords_nd` in 3 dimensions (the release's older name).

    >>> len(_gen_coords(1.0)), len(_gen_coords(1.5)), len(_gen_coords(2.0))
    (6, 18, 32)
    """
    return _gen_coords_nd(radius, 3)


def _offset_order_key(o: Tuple[int, ...]):
    """Nearest first: squared length with the channel step weighted 10 (so channel
    offsets come after spatial ones of similar length), then the absolute values
    lexicographically, then negative entries before positive ones."""
    return (100 * o[0] * o[0] + sum(v * v for v in o[1:]), tuple(abs(v) for v in o), tuple(v >= 0 for v in o))


def _first_nonzero_sign(o: Tuple[int, ...]) -> int:
    return next((1 if v > 0 else -1 for v in o if v), 0)


def _gen_offsets_nd(radius: float, spatial_dims: int, upper: Optional[bool] = None, num_channels: int = 1,
                    channel_voxel_relation: str = "indep") -> List[Tuple[int, ...]]:
    """The offsets ``(c, s_1, ..., s_d)`` of the neighbourhood, in their fixed order.

    - ``'indep'``: spatial offsets only, ``(0, s)`` with ``0 < |s| <= radius``;
    - ``'intra'``: also the channel offsets of a site, ``(c, 0, ..., 0)``, ``1 <= c < num_channels``;
    - ``'inter'``: also ``(c, s)`` for those ``c`` and every spatial ``s``.

    ``upper=True`` keeps the offsets whose first nonzero entry is negative
    (entries above the diagonal: column ``p - o`` after row ``p``),
    ``upper=False`` those whose first nonzero entry is positive (below the
    diagonal), ``None`` all.  Sorted by :func:`_offset_order_key`.

    >>> _gen_offsets_nd(1.0, 2)
    [(0, 0, -1), (0, 0, 1), (0, -1, 0), (0, 1, 0)]
    >>> _gen_offsets_nd(1.0, 1, upper=False, num_channels=2, channel_voxel_relation='inter')
    [(0, 1), (1, 0), (1, -1), (1, 1)]
    """
    spatial = _gen_coords_nd(radius, spatial_dims)
    offsets = [(0,) + s for s in spatial]
    channels = range(1, num_channels)
    if channel_voxel_relation in ("intra", "inter"):
        offsets += [(c,) + (0,) * spatial_dims for c in channels]
    if channel_voxel_relation == "inter":
        offsets += [(c,) + s for c in channels for s in spatial]
    if upper is not None:
        keep = -1 if upper else 1
        offsets = [o for o in offsets if _first_nonzero_sign(o) == keep]
    return sorted(offsets, key=_offset_order_key)


def _gen_offsets(radius: float, upper: Optional[bool] = None, num_channels: int = 1,
                 channel_voxel_relation: str = "indep") -> List[Tuple[int, int, int, int]]:
    """:func:`_gen_offsets_nd` for a 3D spatial volume (the release's older name).

    >>> _gen_offsets(1.0, upper=True)
    [(0, 0, 0, -1), (0, 0, -1, 0), (0, -1, 0, 0)]
    """
    return _gen_offsets_nd(radius, 3, upper, num_channels, channel_voxel_relation)


def _check_volume(radius, volume_shape, channel_voxel_relation) -> Tuple[int, ...]:
    if not (isinstance(volume_shape, (tuple, list)) and len(volume_shape) >= 2
            and all(isinstance(s, numbers.Integral) and not isinstance(s, bool) and s > 0 for s in volume_shape)):
        raise ValueError("`volume_shape` must be a tuple of at least 2 positive integers, representing "
                         f"[C, *spatial_dims], got {volume_shape!r}")
    if not radius >= 1:
        raise ValueError(f"radius must be >= 1, got {radius}")
    if channel_voxel_relation not in _RELATIONS:
        raise ValueError(f"channel_voxel_relation must be 'indep', 'intra', or 'inter', got {channel_voxel_relation!r}")
    if volume_shape[0] == 1 and channel_voxel_relation != "indep":
        raise ValueError("channel_voxel_relation must be 'indep' when number of channels is 1")
    return tuple(int(s) for s in volume_shape)


def _neighbourhood(radius, volume_shape, diag, upper, channel_voxel_relation) -> List[Tuple[int, ...]]:
    """The offsets, the zero offset first when ``diag``."""
    offsets = _gen_offsets_nd(radius, len(volume_shape) - 1, upper, volume_shape[0], channel_voxel_relation)
    return ([(0,) * len(volume_shape)] if diag else []) + offsets


def _strides(shape: Tuple[int, ...]) -> List[int]:
    return [reduce(mul, shape[i + 1:], 1) for i in range(len(shape))]


def calc_pairwise_coo_indices_nd(radius: float, volume_shape: Tuple[int, ...], diag: bool = False,
                                 upper: Optional[bool] = None, channel_voxel_relation: str = "indep",
                                 dtype: torch.dtype = torch.int64,
                                 device: Optional[torch.device] = torch.device("cpu")
                                 ) -> Dict[Tuple[int, ...], torch.Tensor]:
    """For each offset ``o`` (in order, the zero offset first when ``diag``), the ``(2, M_o)``
    (row, column) pairs ``(p, p - o)`` over the sites ``p`` where both are in the volume.

    >>> idx = calc_pairwise_coo_indices_nd(1.0, (1, 2, 3), diag=True)
    >>> list(idx)
    [(0, 0, 0), (0, 0, -1), (0, 0, 1), (0, -1, 0), (0, 1, 0)]
    >>> idx[(0, 0, 1)]                     # site p and its left neighbour p - 1
    tensor([[1, 2, 4, 5],
            [0, 1, 3, 4]])
    """
    volume_shape = _check_volume(radius, volume_shape, channel_voxel_relation)
    sites = torch.arange(reduce(mul, volume_shape), dtype=dtype, device=device).reshape(volume_shape)
    strides = _strides(volume_shape)
    out = {}
    for o in _neighbourhood(radius, volume_shape, diag, upper, channel_voxel_relation):
        rows = _trim_nd(sites, o).reshape(-1)
        out[o] = torch.stack([rows, rows - sum(a * s for a, s in zip(o, strides))])
    return out


def calc_pairwise_coo_indices(radius: float, volume_shape: Tuple[int, int, int, int], diag: bool = False,
                              upper: Optional[bool] = None, channel_voxel_relation: str = "indep",
                              dtype: torch.dtype = torch.int64, device: torch.device = torch.device("cpu")
                              ) -> Dict[Tuple[int, int, int, int], torch.Tensor]:
    """:func:`calc_pairwise_coo_indices_nd` for a ``(C, H, D, W)`` volume (deprecated name).

    >>> len(calc_pairwise_coo_indices(1.0, (1, 2, 2, 2)))
    6
    """
    if not (isinstance(volume_shape, (tuple, list)) and len(volume_shape) == 4):
        raise ValueError("`volume_shape` must be a 4D tuple of positive integers, representing [C, H, D, W]")
    return calc_pairwise_coo_indices_nd(radius, volume_shape, diag, upper, channel_voxel_relation, dtype, device)


calc_pariwise_coo_indices = calc_pairwise_coo_indices  # the release's misspelt name


class PairwiseEncoder(torch.nn.Module):
    r"""Builds sparse ``(V, V)`` matrices (``V = C * prod(S)``) on a fixed neighbourhood pattern
    from dense per-offset values: ``M[p, p - o_k] = values[k, p]``.

    Parameters
    ----------
    radius : float (>= 1)
        Spatial radius of the neighbourhood.
    volume_shape : tuple of ints ``(C, *S)``, at least one spatial dimension.
    diag : bool
        Include the zero offset (the diagonal), as the first offset.
    upper : bool or None
        ``True``: offsets above the diagonal only, ``False``: below, ``None``: both
        (see :func:`_gen_offsets_nd`).
    channel_voxel_relation : ``'indep'``, ``'intra'`` or ``'inter'``
        Which channel couplings the pattern holds (see :func:`_gen_offsets_nd`).
    layout : ``torch.sparse_coo`` (coalesced) or ``torch.sparse_csr``.
    indices_dtype : ``torch.int64`` or ``torch.int32`` (CSR keeps it; COO
        indices are always int64 in PyTorch).
    device : where the pattern lives; ``.to(device)`` moves it.

    Attributes
    ----------
    offsets : list of offset tuples, in the order of the ``N`` axis of ``values``.
    volume_numel, spatial_dims : ``V`` and ``len(S)``.
    crow_indices, col_indices : the CSR pattern.
    indices : ``(2, nnz)`` sorted, unique (row, column) pairs (COO layout only).
    value_index : ``(nnz,)``, for each stored entry in output order, its flat
        position in ``values`` (``k * V + p``): a call is ``values.flatten()[value_index]``.

    Calling it with ``values`` of shape ``(N, C, *S)`` or batched
    ``(B, N, C, *S)`` (float32/float64) returns the matrix ``(V, V)`` or
    ``(B, V, V)``, differentiable in ``values``: the backward scatters the
    gradient at the stored entries back onto ``values`` (the result is built
    with :func:`torchsparsegradutils.sparse_csr_tensor` or
    :func:`torchsparsegradutils.sparse_coo_tensor`, whose backwards never
    densify).  Entries whose neighbour falls outside the volume are
    simply not stored, so the matching ``values[k, p]`` are unused.

    Examples
    --------
    >>> enc = PairwiseEncoder(1.0, (1, 3), diag=True)         # one channel, 3 sites on a line
    >>> enc.offsets
    [(0, 0), (0, -1), (0, 1)]
    >>> values = torch.tensor([[[1., 2., 3.]], [[4., 5., 6.]], [[7., 8., 9.]]])
    >>> enc(values).to_dense()     # diagonal from offset 0, above it from -1, below from +1
    tensor([[1., 4., 0.],
            [8., 2., 5.],
            [0., 9., 3.]])
    >>> csr = PairwiseEncoder(1.5, (2, 8, 8), layout=torch.sparse_csr, indices_dtype=torch.int32)
    >>> len(csr.offsets), csr(torch.randn(3, len(csr.offsets), 2, 8, 8)).shape
    (8, torch.Size([3, 128, 128]))
    """

    def __init__(self, radius: float, volume_shape: Tuple[int, ...], diag: bool = False,
                 upper: Optional[bool] = None, channel_voxel_relation: str = "indep",
                 layout: torch.layout = torch.sparse_coo, indices_dtype: torch.dtype = torch.int64,
                 device: torch.device = torch.device("cpu")):
        super().__init__()
        volume_shape = _check_volume(radius, volume_shape, channel_voxel_relation)
        if indices_dtype not in (torch.int64, torch.int32):
            raise ValueError(f"`indices_dtype` must be torch.int64 or torch.int32, got {indices_dtype}")
        if layout not in (torch.sparse_coo, torch.sparse_csr):
            raise ValueError(f"layout must be either torch.sparse_coo or torch.sparse_csr, got {layout}")
        self.radius = radius
        self.volume_shape = volume_shape
        self.diag = diag
        self.upper = upper
        self.channel_voxel_relation = channel_voxel_relation
        self.layout = layout
        self.indices_dtype = indices_dtype
        self.volume_numel = reduce(mul, volume_shape)
        self.spatial_dims = len(volume_shape) - 1
        self.offsets = _neighbourhood(radius, volume_shape, diag, upper, channel_voxel_relation)

        rows, cols, value_index = self._pattern(torch.device(device))
        self.register_buffer("value_index", value_index, persistent=False)
        crow = torch.zeros(self.volume_numel + 1, dtype=torch.int64, device=rows.device)
        crow[1:] = torch.bincount(rows, minlength=self.volume_numel).cumsum(0)
        self.register_buffer("crow_indices", crow.to(indices_dtype), persistent=False)
        self.register_buffer("col_indices", cols.to(indices_dtype), persistent=False)
        if layout == torch.sparse_coo:
            self.register_buffer("indices", torch.stack([rows, cols]), persistent=False)

    def _pattern(self, device: torch.device):
        """(rows, cols, value_index) of every stored entry, row-major with ascending
        columns (see the module's opening note), built without sorting."""
        shape, n_off = self.volume_shape, len(self.offsets)
        O = torch.tensor(self.offsets, dtype=torch.int64, device=device).reshape(n_off, len(shape))
        delta = O @ torch.tensor(_strides(shape), dtype=torch.int64, device=device)
        order = torch.argsort(delta, descending=True, stable=True)
        O, delta = O[order], delta[order]
        # inside[p, j]: site p - O[j] is in the volume; one (size_i, n_off) table per axis, broadcast
        inside = torch.ones((1,) * len(shape) + (n_off,), dtype=torch.bool, device=device)
        for axis, size in enumerate(shape):
            back = torch.arange(size, device=device).unsqueeze(1) - O[:, axis]
            ok = (back >= 0) & (back < size)
            inside = inside & ok.reshape((1,) * axis + (size,) + (1,) * (len(shape) - axis - 1) + (n_off,))
        site, j = inside.reshape(self.volume_numel, n_off).nonzero(as_tuple=True)
        return site, site - delta[j], order[j] * self.volume_numel + site

    @property
    def device(self) -> torch.device:
        return self.value_index.device

    @property
    def csr_permutation(self) -> Optional[torch.Tensor]:
        """CSR layout: the gather index from ``values`` into CSR order (:attr:`value_index`; the
        release held a permutation of its concatenated trimmed blocks here); COO: None."""
        return self.value_index if self.layout == torch.sparse_csr else None

    def _check_values(self, values: torch.Tensor) -> None:
        if not isinstance(values, torch.Tensor):
            raise ValueError(f"values must be a tensor, got {type(values).__name__}")
        full = len(self.volume_shape) + 1
        if values.dim() not in (full, full + 1):
            raise ValueError(f"values must have {full} dimensions (N, C, *spatial_dims) or {full + 1} "
                             f"dimensions (B, N, C, *spatial_dims), got shape {tuple(values.shape)}")
        if tuple(values.shape[-len(self.volume_shape):]) != self.volume_shape:
            raise ValueError(f"values must end with the volume shape {self.volume_shape}, "
                             f"got shape {tuple(values.shape)}")
        if values.shape[-full] != len(self.offsets):
            raise ValueError(f"Shape of values at index {-full} ({values.shape[-full]}) must match number of "
                             f"offsets ({len(self.offsets)})")
        if values.dtype not in (torch.float32, torch.float64):
            raise ValueError(f"values must be either torch.float32 or torch.float64, got {values.dtype}")
        if values.device != self.device:
            raise ValueError(f"values are on {values.device} but the encoder's pattern is on {self.device}; "
                             "move one of them (encoder.to(device))")

    def forward(self, values: torch.Tensor) -> torch.Tensor:
        self._check_values(values)
        batched = values.dim() == len(self.volume_shape) + 2
        b = values.shape[0] if batched else 1
        V = self.volume_numel
        vals = values.reshape(b, -1)[:, self.value_index]           # (b, nnz), in CSR order
        size = (b, V, V) if batched else (V, V)
        if self.layout == torch.sparse_coo:
            if batched:
                nnz = self.indices.shape[1]
                item = torch.arange(b, device=self.device).repeat_interleave(nnz)
                idx = torch.cat([item.unsqueeze(0), self.indices.repeat(1, b)])
            else:
                idx = self.indices
            # differentiable: our constructor, whose backward takes a gradient on this
            # pattern (as sparse_mm gives it) as it is; PyTorch's masks (sorts) it, 7x
            # the whole call at 10^6 entries
            make = sparse_coo_tensor if vals.requires_grad else coo_tensor
            return make(idx, vals.reshape(-1), size, is_coalesced=True)
        crow, col = self.crow_indices, self.col_indices
        if batched:
            crow, col = crow.repeat(b, 1), col.repeat(b, 1)
        return sparse_csr_tensor(crow, col, vals if batched else vals[0], size)
