"""sparse_logsumexp's layouts, tolerances and references, shared with sparse_bidir_logsumexp's tests."""
import torch

from torchsparsegradutils import sparse_csr_tensor

from support.operands import to_layout

HAS_CUDA = torch.cuda.is_available()
DTYPES = [torch.float32, torch.float64]
LAYOUTS = ["coo", "coo_uncoalesced", "csr", "csc"]
TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.float64: dict(atol=1e-12, rtol=1e-12)}


def dense_reference(D, dim, include_zeros, keepdim=False):
    if not include_zeros:
        D = D.masked_fill(D == 0, float("-inf"))
    return torch.logsumexp(D, dim=dim, keepdim=keepdim)


def leaf_sparse(D, layout):
    """(a function building the sparse tensor in the layout from a leaf values tensor, that leaf)."""
    A = to_layout(D, layout)
    if layout == "csr":
        vals = A.values().clone().requires_grad_()
        return lambda: sparse_csr_tensor(A.crow_indices(), A.col_indices(), vals, A.shape), vals
    vals = A._values().clone().requires_grad_()
    return lambda: torch.sparse_coo_tensor(A._indices(), vals, A.shape), vals


def dense_grad_at_entries(D, A, fn):
    """d fn(dense)/d dense at every stored entry of A (coo/csr), in A's entry order."""
    Dl = D.clone().requires_grad_()
    fn(Dl).backward()
    if A.layout == torch.sparse_csr:
        pos = A.to_sparse_coo().indices()
    else:
        pos = A._indices()
    return Dl.grad[tuple(pos)]
