"""Sparse @ sparse operands and the product's pattern, shared by its tests on every route."""
import torch
from support.operands import seeded, to_sparse

from torchsparsegradutils import SparseCSR, sparse_csr_tensor


def operand(D: torch.Tensor, layout: str, itype=torch.int64):
    """D as a sparse operand in `layout` (LAYOUTS), and the leaf values it holds."""
    if layout == "SparseCSR":
        S = SparseCSR.from_torch(D.to_sparse_csr() if D.dim() == 2 else D.to_sparse())
        values = S.values.clone().requires_grad_()
        return S._replace(values=values), values
    A = to_sparse(D, layout, itype, seeded("operand", layout))
    values = (A._values() if A.layout == torch.sparse_coo else A.values()).detach().clone().requires_grad_()
    if A.layout == torch.sparse_coo:
        return torch.sparse_coo_tensor(A._indices(), values, A.shape, is_coalesced=A.is_coalesced()), values
    return sparse_csr_tensor(A.crow_indices(), A.col_indices(), values, A.shape), values


def pattern_product(DA: torch.Tensor, DB: torch.Tensor) -> torch.Tensor:
    """Where A @ B stores an entry: a stored A[i,j] meets a stored B[j,c] (sums that cancel kept)."""
    return ((DA != 0).double() @ (DB != 0).double()) != 0
