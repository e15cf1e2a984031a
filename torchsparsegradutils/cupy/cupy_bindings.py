"""torch sparse tensors <-> SciPy (CPU) / CuPy (CUDA) sparse matrices, sharing memory where dtypes allow.

The backend follows the data: NumPy/SciPy for CPU tensors and NumPy arrays,
CuPy/cupyx for CUDA tensors and CuPy arrays when CuPy is installed.
"""
import importlib.util
import warnings
from typing import Any, Tuple

import numpy as np
import scipy.sparse as nsp
import torch

from .._core.torch_sparse import coo_tensor, csr_tensor

have_cupy = importlib.util.find_spec("cupy") is not None

if have_cupy:
    import cupy as cp
    import cupyx.scipy.sparse as csp


def _get_array_modules(x: Any) -> Tuple[Any, Any]:
    """(dense module, sparse module) for x: (cupy, cupyx.scipy.sparse) for CUDA
    tensors and CuPy arrays with CuPy installed, else (numpy, scipy.sparse).

    >>> import torch
    >>> [m.__name__ for m in _get_array_modules(torch.zeros(1))]
    ['numpy', 'scipy.sparse']
    """
    if have_cupy:
        on_gpu = x.device.type == "cuda" if isinstance(x, torch.Tensor) else isinstance(x, cp.ndarray) or \
            csp.issparse(x)
        if on_gpu:
            return cp, csp
    return np, nsp


def _torch_to_backend(tensor: torch.Tensor, xp: Any) -> Any:
    """A tensor as an array of module xp: DLPack for CuPy, a shared-memory view for NumPy
    (a CUDA tensor is copied to the host for NumPy)."""
    tensor = tensor.detach()
    if have_cupy and xp is cp:
        return cp.from_dlpack(tensor)
    return tensor.cpu().resolve_conj().numpy()


def _backend_to_torch(array: Any) -> torch.Tensor:
    """A NumPy or CuPy array as a torch tensor (DLPack / shared memory, no copy)."""
    if have_cupy and isinstance(array, cp.ndarray):
        return torch.from_dlpack(array)
    return torch.as_tensor(np.asarray(array))


def _check_sparse_2d(x: torch.Tensor, layout: torch.layout, what: str) -> None:
    if not isinstance(x, torch.Tensor) or x.layout != layout or x.dim() != 2:
        got = f"{x.layout} tensor of {x.dim()} dims" if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"{what} takes a 2D {layout} tensor, got {got}")


def t2c_csr(x_torch: torch.Tensor) -> Any:
    """A 2D torch CSR tensor as a ``scipy.sparse.csr_matrix`` (``cupyx`` for CUDA with CuPy).

    >>> import torch
    >>> t2c_csr(torch.tensor([[0.0, 2.0], [3.0, 0.0]]).to_sparse_csr()).toarray().tolist()
    [[0.0, 2.0], [3.0, 0.0]]
    """
    _check_sparse_2d(x_torch, torch.sparse_csr, "t2c_csr")
    xp, xsp = _get_array_modules(x_torch)
    return xsp.csr_matrix((_torch_to_backend(x_torch.values(), xp), _torch_to_backend(x_torch.col_indices(), xp),
                           _torch_to_backend(x_torch.crow_indices(), xp)), shape=tuple(x_torch.shape))


def c2t_csr(x_cupy: Any) -> torch.Tensor:
    """A SciPy / CuPy CSR matrix as a torch CSR tensor on the matching device.

    >>> import numpy as np, scipy.sparse as nsp
    >>> c2t_csr(nsp.csr_matrix(np.eye(2))).to_dense().tolist()
    [[1.0, 0.0], [0.0, 1.0]]
    """
    return csr_tensor(_backend_to_torch(x_cupy.indptr), _backend_to_torch(x_cupy.indices),
                      _backend_to_torch(x_cupy.data), tuple(x_cupy.shape))


def t2c_coo(x_torch: torch.Tensor) -> Any:
    """A 2D torch COO tensor as a ``scipy.sparse.coo_matrix`` (``cupyx`` for CUDA with CuPy).
    An uncoalesced tensor is coalesced first, with a warning (as in the release).

    >>> import torch
    >>> A = torch.sparse_coo_tensor([[0, 1], [1, 0]], [2.0, 3.0], (2, 2)).coalesce()
    >>> t2c_coo(A).toarray().tolist()
    [[0.0, 2.0], [3.0, 0.0]]
    """
    _check_sparse_2d(x_torch, torch.sparse_coo, "t2c_coo")
    if not x_torch.is_coalesced():
        warnings.warn("Requested a conversion from torch to cupy/numpy on a non-coalesced tensor -> "
                      "coalescing implicitly")
        x_torch = x_torch.coalesce()
    xp, xsp = _get_array_modules(x_torch)
    idx = x_torch.indices()
    return xsp.coo_matrix((_torch_to_backend(x_torch.values(), xp),
                           (_torch_to_backend(idx[0], xp), _torch_to_backend(idx[1], xp))),
                          shape=tuple(x_torch.shape))


def c2t_coo(x_cupy: Any) -> torch.Tensor:
    """A SciPy / CuPy COO matrix as a torch COO tensor (int64 indices) on the matching device.

    >>> import numpy as np, scipy.sparse as nsp
    >>> c2t_coo(nsp.coo_matrix(np.array([[0.0, 1.0], [2.0, 0.0]]))).to_dense().tolist()
    [[0.0, 1.0], [2.0, 0.0]]
    """
    indices = torch.stack([_backend_to_torch(x_cupy.row), _backend_to_torch(x_cupy.col)]).long()
    return coo_tensor(indices, _backend_to_torch(x_cupy.data), tuple(x_cupy.shape))
