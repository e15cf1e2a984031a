"""What the torch-ops modules share: the batch as one block-diagonal 2D matrix
(global_csr, global_matrix, which check a structure not checked yet) and the
16-bit dtypes computed in float32."""
import torch

from ..._core.intake import check_structure
from ..._core.torch_sparse import csr_tensor
from ..._core.view import CSRView, entry_rows

_HALF = (torch.float16, torch.bfloat16)


def global_csr(A: CSRView):
    """A as one block-diagonal 2D CSR matrix of (b*n) x (b*m), built from index
    arithmetic alone, with the global row and column of every entry: the way of every
    op here, so a structure not checked yet (one from CSR arrays; a COO tensor's was
    checked as its view was made) is checked here, before PyTorch's sparse ops, which
    trust it, read it."""
    if A.coo_indices is None:
        check_structure(A)
    b, n, m = A.batch, A.nrows, A.ncols
    ptr, col = A.ptr.long(), A.col.long()
    if ptr.dim() == 2:                       # batched CSR: make the pointers global
        nnz_b = col.shape[1]
        offs = torch.arange(b, device=ptr.device).unsqueeze(1) * nnz_b
        ptr = torch.cat([(ptr[:, :-1] + offs).reshape(-1), ptr.new_full((1,), b * nnz_b)])
        col = col.reshape(-1)
    rows = entry_rows(ptr)
    cols = col + (rows // n) * m if n else col
    vals = A.values.reshape(-1) if A.values is not None else torch.ones(col.numel(), device=ptr.device)
    A2 = csr_tensor(ptr, cols, vals, (b * n, b * m))
    return A2, rows, cols


def global_matrix(A: CSRView) -> torch.Tensor:
    """global_csr's matrix alone: for an unbatched A, A's own arrays, with no pass over
    its entries."""
    if A.ptr.dim() == 2 or A.batch != 1:
        return global_csr(A)[0]
    if A.coo_indices is None:
        check_structure(A)
    vals = A.values.reshape(-1) if A.values is not None else torch.ones(A.col.numel(), device=A.ptr.device)
    return csr_tensor(A.ptr.long(), A.col.long(), vals, (A.nrows, A.ncols))
