r"""Multivariate normal distributions parameterised by a sparse triangular factor.

With ``F`` the sparse factor given (COO or CSR, ``(n, n)`` or batched ``(B, n, n)``):

=====================  =========================  ==================================
form                   factor                     matrix
=====================  =========================  ==================================
``scale_tril``, LL^T   ``L = F`` (lower, diag)    covariance ``Sigma = L L^T``
``scale_tril``, LDL^T  ``L = I + F``              covariance ``Sigma = L D L^T``
``precision_tril``     ``L = F``                  precision ``Omega = L L^T``
``precision_tril``     ``L = I + F``              precision ``Omega = L D L^T``
=====================  =========================  ==================================

(LDL^T when ``diagonal`` -- the entries of ``D`` -- is given; ``F`` then holds
the strictly lower part and the unit diagonal is implicit.  As in the published
release, a diagonal stored in such an ``F`` adds to the unit one where ``L``
is only multiplied: sampling, moments and entropy of the covariance form; the
solve of its ``log_prob`` refuses it with a ValueError, and so does the
precision form, whose every use of ``L`` is a solve or pairs with one, at
construction.)

Every operation works on ``F``'s stored entries only: per sample, ``rsample``
and ``log_prob`` cost one sparse product or one sparse triangular solve, O(nnz),
through :func:`torchsparsegradutils.sparse_mm`,
:func:`torchsparsegradutils.sparse_triangular_solve` and the transposed product
kernel; their gradients w.r.t. ``F`` are sparse, on ``F``'s pattern.

- ``log_prob(x) = -(n log 2 pi + r^T Sigma^{-1} r + log det Sigma) / 2`` with
  ``r = x - loc``: the quadratic form is ``|L^{-1} r|^2`` (covariance; ``D^{-1}``
  weighted for LDL^T) or ``|L^T r|^2`` (precision; ``D`` weighted), and
  ``log det`` is ``+-2 sum log|L_ii|`` (LL^T) or ``+-sum log D_i`` (LDL^T).
- ``variance``: covariance forms, ``Sigma_ii = sum_j L_ij^2 (D_j)`` from the
  stored entries, O(nnz); precision forms, ``Sigma_ii = |L^{-1} e_i|^2``
  (``D^{-1}`` weighted) by triangular solves on blocks of identity columns:
  exact, O(n nnz) time, O(n * block) memory, never an n x n matrix.
- ``covariance_matrix`` / ``precision_matrix`` are dense n x n by nature: they
  are built from a dense copy of ``L`` or ``L^{-1}`` (O(n^2) memory).

The factor's checks and pattern are in ``_factor``; the products and solves on
batches of vectors in ``_linalg``.
"""
import math

import torch
from torch.distributions import constraints
from torch.distributions.distribution import Distribution
from torch.distributions.utils import _standard_normal, lazy_property

from .._core.saved import accumulate_batched_csr_grads, values_guard
from .._core.torch_sparse import coo_tensor
from ..sparse_matmul import sparse_mm
from ..sparse_solve import sparse_triangular_solve
from ..sparse_tensor import sparse_csr_tensor
from ._factor import _check_factor, _check_lower, _factor_diagonal, _Pattern, _row_square_sums
from ._linalg import _batch_sparse_mv, _inverse_factor_column_norms, _transposed_mv

__all__ = ["SparseMultivariateNormal", "SparseMultivariateNormalNative"]


def _gaussian_log_prob(n: int, quad: torch.Tensor, log_det_cov: torch.Tensor) -> torch.Tensor:
    return -0.5 * (n * math.log(2 * math.pi) + quad + log_det_cov)


class SparseMultivariateNormal(Distribution):
    r"""Multivariate normal with a sparse triangular covariance or precision factor (LL^T or LDL^T).

    Parameters
    ----------
    loc : tensor ``(n,)`` or ``(B, n)``, float32/float64.
    diagonal : tensor ``(n,)`` or ``(B, n)``, optional
        The diagonal ``D`` of an LDL^T form (positive).  Without it the form is LL^T.
    scale_tril : sparse COO/CSR ``(n, n)`` or ``(B, n, n)``, optional
        Covariance factor: ``L`` (LL^T, lower triangular with its diagonal) or the
        strictly lower part of the unit triangular ``L`` (LDL^T).
    precision_tril : sparse COO/CSR, optional
        The same for the precision matrix.  Exactly one of the two is given.
    validate_args : bool, optional
        As in :mod:`torch.distributions`; when on (PyTorch's default), the factor
        is also checked to be lower triangular, O(nnz).

    Batch shape: the broadcast of the batch dimensions of ``loc``,
    ``diagonal`` and the factor (one batch dimension at most).  The module
    notes give the cost of each operation; none densifies the factor except
    ``covariance_matrix`` and ``precision_matrix``.

    Examples
    --------
    >>> import torch
    >>> from torchsparsegradutils.distributions import SparseMultivariateNormal
    >>> L = torch.tensor([[2.0, 0.0, 0.0], [0.5, 1.0, 0.0], [0.0, -0.3, 1.5]], dtype=torch.float64)
    >>> loc = torch.zeros(3, dtype=torch.float64)
    >>> mvn = SparseMultivariateNormal(loc, scale_tril=L.to_sparse_csr())
    >>> x = mvn.rsample((4,))
    >>> x.shape
    torch.Size([4, 3])
    >>> ref = torch.distributions.MultivariateNormal(loc, scale_tril=L)
    >>> torch.allclose(mvn.log_prob(x), ref.log_prob(x)), torch.allclose(mvn.variance, ref.variance)
    (True, True)

    Precision form, LDL^T (``F`` strictly lower, ``Omega = (I + F) D (I + F)^T``):

    >>> F = torch.tensor([[0.0, 0.0, 0.0], [0.4, 0.0, 0.0], [0.0, 0.2, 0.0]], dtype=torch.float64)
    >>> D = torch.tensor([1.0, 2.0, 0.5], dtype=torch.float64)
    >>> prec = SparseMultivariateNormal(loc, diagonal=D, precision_tril=F.to_sparse())
    >>> Omega = (torch.eye(3) + F) @ torch.diag(D) @ (torch.eye(3) + F).T
    >>> ref = torch.distributions.MultivariateNormal(loc, precision_matrix=Omega)
    >>> torch.allclose(prec.log_prob(x), ref.log_prob(x)), torch.allclose(prec.variance, ref.variance)
    (True, True)
    """

    arg_constraints = {"loc": constraints.real_vector}
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, loc, diagonal=None, scale_tril=None, precision_tril=None, validate_args=None):
        if not isinstance(loc, torch.Tensor) or loc.dim() < 1:
            raise ValueError("loc must be at least one-dimensional.")
        if loc.dim() > 2:
            raise ValueError("loc must be at most two-dimensional as the current implementation only supports "
                             "1 batch dimension.")
        n = loc.shape[-1]
        if diagonal is not None:
            if diagonal.dim() < 1:
                raise ValueError("diagonal must be at least one-dimensional.")
            if diagonal.dim() > 2:
                raise ValueError("diagonal must be at most two-dimensional as the current implementation only "
                                 "supports 1 batch dimension.")
            if diagonal.shape[-1:] != loc.shape[-1:]:
                raise ValueError(f"diagonal must be a batch of vectors with shape {tuple(loc.shape[-1:])}")
        if (scale_tril is None) == (precision_tril is None):
            raise ValueError("Exactly one of scale_tril or precision_tril may be specified.")
        name = "scale_tril" if scale_tril is not None else "precision_tril"
        F = _check_factor(name, scale_tril if scale_tril is not None else precision_tril, n, loc.dtype)
        self._loc, self._diagonal = loc, diagonal
        self._is_precision = precision_tril is not None
        self._scale_tril = None if self._is_precision else F
        self._precision_tril = F if self._is_precision else None
        shapes = [loc.shape[:-1], F.shape[:-2]] + ([diagonal.shape[:-1]] if diagonal is not None else [])
        super().__init__(torch.broadcast_shapes(*shapes), loc.shape[-1:], validate_args=validate_args)
        if self._is_precision and diagonal is not None and self._pattern.diag.numel():
            raise ValueError("precision_tril of the LDL^T form (diagonal given) must not store diagonal "
                             "entries: its unit diagonal is implicit")
        if self._validate_args:
            _check_lower(name, self._pattern)
            if diagonal is not None and not bool((diagonal > 0).all()):
                raise ValueError("diagonal must be positive")

    @property
    def loc(self):
        return self._loc

    @property
    def diagonal(self):
        return self._diagonal

    @property
    def scale_tril(self):
        return self._scale_tril

    @property
    def precision_tril(self):
        return self._precision_tril

    @property
    def is_ldlt_parameterization(self) -> bool:
        """True for the LDL^T forms (``diagonal`` given), False for LL^T."""
        return self._diagonal is not None

    @property
    def _factor(self):
        return self._precision_tril if self._is_precision else self._scale_tril

    @lazy_property
    def _pattern(self) -> _Pattern:
        return _Pattern.of(self._factor.detach())

    def _factor_parts(self):
        """(F, values): the factor rebuilt on its own ``values()`` and those values.
        Every use of the factor in one call goes through this one ``values()`` node,
        so the call's gradient reaches the user's factor by a single path (PyTorch
        mis-adds two batched-CSR gradients of one tensor, 2.x).  Two calls in one
        graph (``log_prob(x) + entropy()``) are two paths: for a batched CSR factor
        that is the clear error of _core.saved.accumulate_batched_csr_grads, whose hook
        also sums the gradients of separate backward passes.  ``values()`` is an
        alias with a version counter of its own: the rebuilt factor carries the
        guard of the user's (see _core.saved.save_operand), so that an in-place edit of
        the tensor F was built from still raises in backward."""
        F = self._factor
        values = F.values()
        if not F.requires_grad:
            return F, values
        if F.layout == torch.sparse_csr and F.dim() == 3:
            accumulate_batched_csr_grads(F)
        if F.layout == torch.sparse_coo:
            rebuilt = coo_tensor(F.indices(), values, F.shape, is_coalesced=True)
        else:
            rebuilt = sparse_csr_tensor(F.crow_indices(), F.col_indices(), values, F.shape)
        rebuilt._tsgu_values = values_guard(F)       # None: the ops keep a private copy
        return rebuilt, values

    @property
    def mean(self):
        return self._loc.expand(self._extended_shape())

    @property
    def mode(self):
        return self.mean

    def rsample(self, sample_shape=torch.Size()):
        eps = _standard_normal(self._extended_shape(sample_shape), dtype=self._loc.dtype, device=self._loc.device)
        (F, _), D = self._factor_parts(), self._diagonal
        if not self._is_precision:
            if D is None:
                x = _batch_sparse_mv(sparse_mm, F, eps)                      # L eps
            else:
                eta = D.sqrt() * eps
                x = _batch_sparse_mv(sparse_mm, F, eta) + eta                # (I + F) D^{1/2} eps
        else:
            rhs = eps if D is None else eps / D.sqrt()
            x = _batch_sparse_mv(sparse_triangular_solve, F, rhs, upper=False,
                                 unitriangular=D is not None, transpose=True)   # L^{-T} (D^{-1/2}) eps
        return self._loc + x

    def _half_log_det_cov(self, F=None, values=None) -> torch.Tensor:
        """log det Sigma / 2: sum log|L_ii| (LL^T), or sum log D_i / 2 (LDL^T), plus
        sum log|1 + F_ii| where an LDL^T covariance factor stores a diagonal."""
        D = self._diagonal
        half = 0.5 * D.log().sum(-1) if D is not None else 0
        if D is None or self._pattern.diag.numel():
            if F is None:
                F, values = self._factor_parts()
            Lii = _factor_diagonal(F, values, self._pattern) + (1 if D is not None else 0)
            half = half + Lii.abs().log().sum(-1)
        return -half if self._is_precision else half

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        r = value - self._loc
        r = r.expand(torch.broadcast_shapes(r.shape, self._extended_shape()))
        (F, values), D = self._factor_parts(), self._diagonal
        if not self._is_precision:
            z = _batch_sparse_mv(sparse_triangular_solve, F, r, upper=False, unitriangular=D is not None)
            quad = z.square() if D is None else z.square() / D
        else:
            z = _transposed_mv(F, values, r)
            quad = z.square() if D is None else (z + r).square() * D
        n = self._event_shape[0]
        return _gaussian_log_prob(n, quad.sum(-1), 2 * self._half_log_det_cov(F, values))

    def entropy(self):
        n = self._event_shape[0]
        h = 0.5 * n * (1.0 + math.log(2 * math.pi)) + self._half_log_det_cov()
        return h.expand(self._batch_shape)

    @property
    def variance(self):
        (F, values), D = self._factor_parts(), self._diagonal
        if not self._is_precision:
            if D is None:
                v = _row_square_sums(F, values, self._pattern)
            else:   # sum_j ((I + F)_ij)^2 D_j
                v = (D * (1 + 2 * _factor_diagonal(F, values, self._pattern))
                     + _row_square_sums(F, values, self._pattern, D))
        else:
            v = _inverse_factor_column_norms(F, D)
        return v.expand(self._extended_shape())

    def _dense_factor(self) -> torch.Tensor:
        """``L`` as a dense matrix, through sparse_mm with the identity (differentiable); O(n^2)."""
        F, _ = self._factor_parts()
        n = F.shape[-1]
        eye = torch.eye(n, dtype=F.dtype, device=F.device).expand(*F.shape[:-2], n, n).contiguous()
        L = sparse_mm(F, eye)
        return L + eye if self._diagonal is not None else L

    @property
    def covariance_matrix(self):
        """Dense ``Sigma`` (n x n, inherently O(n^2) memory)."""
        return self._dense_matrix(want_precision=False)

    @property
    def precision_matrix(self):
        """Dense ``Omega`` (n x n, inherently O(n^2) memory)."""
        return self._dense_matrix(want_precision=True)

    def _dense_matrix(self, want_precision: bool) -> torch.Tensor:
        L = self._dense_factor()
        d = self._diagonal
        if want_precision == self._is_precision:                  # the factor's own matrix: L (D) L^T
            M = L @ ((d.unsqueeze(-1) if d is not None else 1) * L.transpose(-1, -2))
        else:                                                     # its inverse: L^{-T} (D^{-1}) L^{-1}
            Li = torch.linalg.solve_triangular(L, torch.eye(L.shape[-1], dtype=L.dtype, device=L.device),
                                               upper=False)
            M = Li.transpose(-1, -2) @ (Li / d.unsqueeze(-1) if d is not None else Li)
        return M.expand(self._batch_shape + self._event_shape + self._event_shape)


class SparseMultivariateNormalNative(Distribution):
    r"""Normal with covariance ``L L^T`` for a 2D CSR ``L``, sampled with :func:`torch.sparse.mm`.

    The release's "native" variant: unbatched, CSR only, LL^T covariance only
    (:class:`SparseMultivariateNormal` has the other forms).  ``rsample``
    computes ``loc + L eps`` with PyTorch's own sparse product; ``log_prob``,
    ``variance`` and ``entropy`` use the O(nnz) code of
    :class:`SparseMultivariateNormal` (a sparse triangular solve and the stored
    diagonal; row sums of squares) instead of densifying ``L``;
    ``covariance_matrix`` is dense n x n by nature.

    >>> import torch
    >>> L = torch.tensor([[1.0, 0.0], [0.5, 2.0]], dtype=torch.float64)
    >>> mvn = SparseMultivariateNormalNative(torch.zeros(2, dtype=torch.float64), L.to_sparse_csr())
    >>> mvn.rsample((5,)).shape, mvn.variance
    (torch.Size([5, 2]), tensor([1.0000, 4.2500], dtype=torch.float64))
    """

    arg_constraints = {"loc": constraints.real_vector}
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, loc, scale_tril, validate_args=None):
        if not isinstance(loc, torch.Tensor) or loc.dim() != 1:
            raise ValueError("loc must be one-dimensional for SparseMultivariateNormalNative.")
        if not isinstance(scale_tril, torch.Tensor) or scale_tril.layout != torch.sparse_csr:
            raise ValueError("scale_tril must be sparse CSR for SparseMultivariateNormalNative.")
        if scale_tril.dim() != 2:
            raise ValueError("scale_tril must be two-dimensional (unbatched) for SparseMultivariateNormalNative.")
        if scale_tril.shape[0] != scale_tril.shape[1]:
            raise ValueError("scale_tril must be square.")
        if scale_tril.shape[0] != loc.shape[0]:
            raise ValueError("scale_tril must have the same size as loc.")
        self._loc, self._scale_tril = loc, scale_tril
        self._sparse = SparseMultivariateNormal(loc, scale_tril=scale_tril, validate_args=validate_args)
        super().__init__(torch.Size(), loc.shape, validate_args=validate_args)

    @property
    def loc(self):
        return self._loc

    @property
    def scale_tril(self):
        return self._scale_tril

    @property
    def mean(self):
        return self._loc

    @property
    def mode(self):
        return self._loc

    @property
    def variance(self):
        return self._sparse.variance

    @property
    def covariance_matrix(self):
        """Dense ``L L^T`` (n x n, inherently O(n^2) memory)."""
        return self._sparse.covariance_matrix

    def rsample(self, sample_shape=torch.Size()):
        eps = _standard_normal(self._extended_shape(sample_shape), dtype=self._loc.dtype, device=self._loc.device)
        flat = eps.reshape(-1, eps.shape[-1])
        x = torch.sparse.mm(self._scale_tril, flat.t()).t()
        return self._loc + x.reshape(eps.shape)

    def log_prob(self, value):
        return self._sparse.log_prob(value)

    def entropy(self):
        return self._sparse.entropy()
