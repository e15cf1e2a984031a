"""torch <-> JAX conversions through DLPack, and a torch sparse matrix as a JAX operator.

Dense arrays cross without copies (JAX may copy where it keeps its own layout
or, with ``jax_enable_x64`` off, narrows 64-bit data to 32 bits as it does for
any input).  ``spmm_t4j`` multiplies on our C kernels (PyTorch's sparse ops on
CUDA) and carries a JAX ``custom_vjp``: ``jax.grad`` through it computes
``A^T g`` with the transpose kernel, never a dense A.
"""
import warnings
from typing import Any, Callable

import jax
import jax.experimental.sparse
import torch
from jax import dlpack as jax_dlpack

from .. import _backends
from .._core.intake import as_csr
from .._core.torch_sparse import coo_tensor, csr_tensor


def t2j(x_torch: torch.Tensor) -> jax.Array:
    """A torch tensor as a JAX array on the same device (DLPack; made contiguous first).

    >>> import torch
    >>> t2j(torch.arange(6.0).reshape(2, 3)).shape
    (2, 3)
    """
    return jax_dlpack.from_dlpack(x_torch.detach().contiguous())


def j2t(x_jax: jax.Array) -> torch.Tensor:
    """A JAX array as a torch tensor on the same device (DLPack, no copy).

    >>> import jax.numpy as jnp
    >>> j2t(jnp.ones((2, 3))).shape
    torch.Size([2, 3])
    """
    return torch.from_dlpack(x_jax)


def _check_sparse_2d(x: torch.Tensor, layout: torch.layout, what: str) -> None:
    if not isinstance(x, torch.Tensor) or x.layout != layout or x.dim() != 2:
        got = f"{x.layout} tensor of {x.dim()} dims" if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"{what} takes a 2D {layout} tensor, got {got}")


def _indices(t: torch.Tensor, bound: int) -> jax.Array:
    """Index array for JAX: int64 kept with jax_enable_x64, else int32 (checked to fit)."""
    if t.dtype == torch.int64 and not jax.config.read("jax_enable_x64"):
        if bound > torch.iinfo(torch.int32).max:
            raise ValueError(f"indices up to {bound} do not fit the int32 JAX uses without jax_enable_x64")
        t = t.to(torch.int32)
    return t2j(t)


def t2j_csr(x_torch: torch.Tensor) -> "jax.experimental.sparse.CSR":
    """A 2D torch CSR tensor as ``jax.experimental.sparse.CSR`` (same values, shape, device).

    >>> import torch
    >>> A = torch.tensor([[0.0, 2.0], [3.0, 0.0]]).to_sparse_csr()
    >>> t2j_csr(A).todense().tolist()
    [[0.0, 2.0], [3.0, 0.0]]
    """
    _check_sparse_2d(x_torch, torch.sparse_csr, "t2j_csr")
    bound = max(x_torch.shape[1], x_torch.values().numel())
    return jax.experimental.sparse.CSR((t2j(x_torch.values()), _indices(x_torch.col_indices(), bound),
                                        _indices(x_torch.crow_indices(), bound)), shape=tuple(x_torch.shape))


def j2t_csr(x_jax: Any) -> torch.Tensor:
    """A ``jax.experimental.sparse.CSR`` as a torch CSR tensor (DLPack, no copy).

    >>> import jax.numpy as jnp, jax.experimental.sparse as jsparse
    >>> j2t_csr(jsparse.CSR.fromdense(jnp.eye(3))).to_dense().diagonal().tolist()
    [1.0, 1.0, 1.0]
    """
    return csr_tensor(j2t(x_jax.indptr), j2t(x_jax.indices), j2t(x_jax.data), tuple(x_jax.shape))


def t2j_coo(x_torch: torch.Tensor) -> "jax.experimental.sparse.COO":
    """A 2D torch COO tensor as ``jax.experimental.sparse.COO`` with rows sorted.
    An uncoalesced tensor is coalesced first, with a warning (as in the release).

    >>> import torch
    >>> A = torch.sparse_coo_tensor([[0, 1], [1, 0]], [2.0, 3.0], (2, 2))
    >>> t2j_coo(A.coalesce()).todense().tolist()
    [[0.0, 2.0], [3.0, 0.0]]
    """
    _check_sparse_2d(x_torch, torch.sparse_coo, "t2j_coo")
    if not x_torch.is_coalesced():
        warnings.warn("Requested a conversion from torch to jax on a non-coalesced tensor -> coalescing implicitly")
        x_torch = x_torch.coalesce()
    idx = x_torch.indices()
    bound = max(x_torch.shape)
    return jax.experimental.sparse.COO((t2j(x_torch.values()), _indices(idx[0], bound), _indices(idx[1], bound)),
                                       shape=tuple(x_torch.shape), rows_sorted=True)


def j2t_coo(x_jax: Any) -> torch.Tensor:
    """A ``jax.experimental.sparse.COO`` as a torch COO tensor (int64 indices).

    >>> import jax.numpy as jnp, jax.experimental.sparse as jsparse
    >>> j2t_coo(jsparse.COO.fromdense(jnp.eye(2))).to_dense().tolist()
    [[1.0, 0.0], [0.0, 1.0]]
    """
    indices = torch.stack([j2t(x_jax.row), j2t(x_jax.col)]).long()
    return coo_tensor(indices, j2t(x_jax.data), tuple(x_jax.shape))


def spmm_t4j(A: torch.Tensor) -> Callable[[jax.Array], jax.Array]:
    """``x -> A @ x`` for JAX arrays x of shape ``(m,)`` or ``(m, p)``, A a 2D torch COO/CSR tensor.

    A's structure is checked once, here.  The closure runs eagerly (DLPack
    needs concrete arrays: not under ``jax.jit``) and is differentiable in x by
    ``jax.grad`` / ``jax.vjp``: the cotangent is ``A^T g``, from the transpose
    kernel.  x must have A's dtype; float64 needs ``jax_enable_x64``.

    >>> import torch, jax, jax.numpy as jnp
    >>> A = torch.tensor([[1.0, 0.0], [2.0, 3.0]]).to_sparse_csr()
    >>> f = spmm_t4j(A)
    >>> f(jnp.array([1.0, 1.0])).tolist()
    [1.0, 5.0]
    >>> jax.grad(lambda x: f(x).sum())(jnp.array([1.0, 1.0])).tolist()
    [3.0, 3.0]
    """
    if not isinstance(A, torch.Tensor) or A.layout not in (torch.sparse_coo, torch.sparse_csr) or A.dim() != 2:
        raise ValueError("spmm_t4j takes a 2D sparse COO or CSR torch tensor")
    x64 = jax.config.read("jax_enable_x64")
    if A.dtype == torch.float64 and not x64:
        raise TypeError(f"spmm_t4j: A has dtype {A.dtype}, which JAX holds only with jax_enable_x64 "
                        "(jax.config.update('jax_enable_x64', True))")
    view = as_csr(A.detach())

    def product(kernel, x):
        if isinstance(x, jax.core.Tracer):
            raise TypeError("spmm_t4j's operator runs eagerly on concrete arrays; it cannot be traced by jax.jit")
        X = j2t(x)
        if X.dtype != A.dtype:
            raise ValueError(f"spmm_t4j: x has dtype {X.dtype}, A has {A.dtype}")
        Y = kernel(view, X.unsqueeze(-1) if X.dim() == 1 else X)
        return t2j(Y.squeeze(-1) if X.dim() == 1 else Y)

    @jax.custom_vjp
    def closure(x):
        return product(_backends.spmm, x)

    closure.defvjp(lambda x: (closure(x), None), lambda _, g: (product(_backends.spmm_t, g),))
    return closure
