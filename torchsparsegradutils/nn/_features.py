"""What the layers share about their input features ``x``: is it sparse (a torch COO or CSR
tensor, or a :class:`~torchsparsegradutils.SparseCSR`), is it 2-D, ``x W^T`` for a dense or
sparse ``x`` (``sparse_mm`` on a sparse one, whose gradient stays on its pattern), and
the dense matrix of a sparse ``x`` where a layer needs one."""
import torch
import torch.nn.functional as F

from .._core.sparse_csr import SparseCSR
from .._core.view import entry_rows
from ..sparse_matmul import sparse_mm


def is_sparse(x) -> bool:
    return isinstance(x, SparseCSR) or (isinstance(x, torch.Tensor) and x.layout in (torch.sparse_coo,
                                                                                   torch.sparse_csr))


def check_features(x, name: str) -> None:
    if not (isinstance(x, (torch.Tensor, SparseCSR))):
        raise ValueError(f"{name} must be a tensor or a SparseCSR, got {type(x).__name__}")
    if x.dim() != 2:
        raise ValueError(f"{name} must be 2-D (nodes, features), got shape {tuple(x.shape)}")


def check_sparse_features(x, in_features: int) -> None:
    if x.dim() != 2 or x.shape[1] != in_features:
        raise ValueError(f"a sparse x must have shape (n, {in_features}), got {tuple(x.shape)}")


def linear(x, weight: torch.Tensor) -> torch.Tensor:
    """x W^T (no bias) for a dense or sparse x (n, in) and a dense W (out, in).  For a
    sparse x it is sparse_mm(x, W^T): grad_W = (x^T G)^T through its backward, x's
    gradient on x's pattern.  The kernels read B's rows with unit stride, so W.t() (an
    (in, out) view with stride (1, in)) is laid out once by sparse_mm: out x in numbers,
    the weight's size, not the graph's (SAGEConv builds its stacked W^T in that layout
    directly, with no copy beyond the concatenation)."""
    if not is_sparse(x):
        return F.linear(x, weight)
    return linear_t(x, weight.t())


def linear_t(x, weight_t: torch.Tensor) -> torch.Tensor:
    """x @ weight_t for a dense or sparse x (n, in) and a dense weight_t (in, out)."""
    if not is_sparse(x):
        return x @ weight_t
    check_sparse_features(x, weight_t.shape[0])
    return sparse_mm(x, weight_t)


def csr_to_dense(S: SparseCSR) -> torch.Tensor:
    """The dense matrix of a 2-D SparseCSR, differentiable in its values (the backward
    gathers at the stored entries: no dense mask)."""
    rows = entry_rows(S.crow_indices)
    out = S.values.new_zeros(S.size)
    return out.index_put((rows, S.col_indices.long()), S.values, accumulate=True)


def to_dense_features(x) -> torch.Tensor:
    """The dense matrix of a sparse x (SparseCSR or torch sparse tensor)."""
    if isinstance(x, SparseCSR):
        return csr_to_dense(x)
    return x.to_dense()
