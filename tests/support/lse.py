"""sparse_logsumexp's operands and references, shared with sparse_bidir_logsumexp's tests."""
import torch

from torchsparsegradutils import sparse_csr_tensor

HAS_CUDA = torch.cuda.is_available()
DTYPES = [torch.float32, torch.float64]
LAYOUTS = ["coo", "coo_uncoalesced", "csr", "csc"]
TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.float64: dict(atol=1e-12, rtol=1e-12)}


def random_dense(shape, dtype, seed, density=0.4, scale=1.0):
    """Values at about `density` of the cells, with an empty row and an empty column."""
    gen = torch.Generator().manual_seed(seed)
    D = torch.randn(shape, generator=gen, dtype=torch.float64) * scale
    D = D.masked_fill(torch.rand(shape, generator=gen) >= density, 0.0)
    if shape[-2] > 2 and shape[-1] > 2:
        D[..., 1, :] = 0.0
        D[..., :, 2] = 0.0
    return D.to(dtype)


def to_layout(D, layout, itype=torch.int64):
    """D dense -> a sparse tensor of the layout; batched CSR/CSC need one pattern per item."""
    if layout == "csr":
        A = D.to_sparse_csr()
        return torch.sparse_csr_tensor(A.crow_indices().to(itype), A.col_indices().to(itype), A.values(), D.shape)
    if layout == "csc":
        A = D.to_sparse_csc()
        return torch.sparse_csc_tensor(A.ccol_indices().to(itype), A.row_indices().to(itype), A.values(), D.shape)
    A = D.to_sparse().coalesce()
    if layout == "coo":
        return A
    # every entry split in two duplicates, in reversed order
    idx, val = A.indices(), A.values()
    U = torch.sparse_coo_tensor(torch.cat([idx, idx], 1).flip(1), torch.cat([val * 0.25, val * 0.75]).flip(0),
                                D.shape)
    assert val.numel() == 0 or not U.is_coalesced()
    return U


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
