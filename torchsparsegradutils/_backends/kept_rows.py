"""The geometry of a hypersparse view's kept rows (CSRView.rows: a COO's non-empty rows
alone), the same on every route: the right operand and a dense gradient made to match
such a view of a sparse @ sparse product.  _backends/__init__.py calls these around
the route it picks (and puts a product's rows back in place itself: on_kept_rows)."""
import torch

from .._core.intake import check_structure
from .._core.view import CSRView, entry_rows, item_rows


def block_diagonal(B: CSRView) -> CSRView:
    """B's b items (m x p) as one matrix, their (b*m) x (b*p) block diagonal: global
    rows k*m + j and columns k*p + c, the right operand of a kept-rows view (whose
    columns are global).  O(nnz(B) + b*m); B itself for one 2D item."""
    b, m, p = B.batch, B.nrows, B.ncols
    if b == 1 and B.ptr.dim() == 1:
        return B
    if B.coo_indices is None:            # a CSR's arrays: checked before index arithmetic reads them
        check_structure(B)
    ptr, col, values = B.ptr.long(), B.col.long(), B.values
    if ptr.dim() == 2:                   # batched CSR: (b, m+1) pointers, (b, nnz) columns
        per = col.shape[1]
        ptr = torch.cat([(ptr[:, :-1] + torch.arange(b, device=ptr.device).unsqueeze(1) * per).reshape(-1),
                         ptr.new_full((1,), b * per)])
        col, values = col.reshape(-1), values.reshape(-1)
    col = col + entry_rows(ptr) // m * p if m else col
    return CSRView(ptr, col, values, 1, b * m, b * p, torch.Size((b * m, b * p)))


def dense_on_rows(G: torch.Tensor, rows: torch.Tensor, n: int) -> CSRView:
    """A dense G ((n, p) or (b, n, p)) on the kept rows `rows` (global, sorted) as a
    full CSRView of those rows, its columns global (k*p + c): O(len(rows)*p)."""
    p = G.shape[-1]
    g = item_rows(G).index_select(0, rows)
    ptr = torch.arange(rows.numel() + 1, device=G.device) * p
    col = ((rows // n).unsqueeze(1) * p + torch.arange(p, device=G.device)).reshape(-1)
    b = G.shape[0] if G.dim() == 3 else 1
    return CSRView(ptr, col, g.reshape(-1), 1, rows.numel(), b * p, torch.Size((rows.numel(), b * p)))

