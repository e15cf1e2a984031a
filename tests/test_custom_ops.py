"""The kernels as torch.library custom operators (torchsparsegradutils._ops):
torch.library.opcheck (schema, fake tensors, autograd registration, AOT dispatch
with dynamic shapes), values against dense, and second derivatives (gradgradcheck)."""
import pytest
import torch

from torchsparsegradutils import _ops
from torchsparsegradutils._csr import as_csr

OPS = [torch.ops.tsgu.spmm.default, torch.ops.tsgu.spmm_t.default, torch.ops.tsgu.sddmm.default]


def _operand(kind: str) -> torch.Tensor:
    gen = torch.Generator().manual_seed(3)
    D = torch.randn(2, 5, 4, generator=gen, dtype=torch.float64)
    D = D * (torch.rand(2, 5, 4, generator=gen) < 0.5)
    if kind == "batched_csr":
        D[:, :, 0] = 1.0                       # the same nnz in both items
        D = D * (D != 0).all(0, keepdim=True)  # ... and the same pattern
        return D.to_sparse_csr()
    if kind == "batched_coo":
        return D.to_sparse()
    if kind == "hypersparse_coo":             # 2 entries in 40 rows: only the non-empty rows are kept
        H = torch.zeros(40, 4, dtype=torch.float64)
        H[3, 1], H[31, 2] = 2.0, -1.0
        return H.to_sparse()
    return D[0].to_sparse_csr() if kind == "csr" else D[0].to_sparse()


KINDS = ["csr", "coo", "batched_csr", "batched_coo", "hypersparse_coo"]


def _args(kind: str, requires_grad: bool):
    A = _operand(kind)
    view = as_csr(A, compress_rows=True)
    assert (view.rows is not None) == (kind == "hypersparse_coo")
    gen = torch.Generator().manual_seed(4)
    batch = A.shape[:-2]
    a = view.values.clone().requires_grad_(requires_grad)
    X = torch.randn(*batch, A.shape[-1], 3, generator=gen, dtype=torch.float64, requires_grad=requires_grad)
    Y = torch.randn(*batch, A.shape[-2], 3, generator=gen, dtype=torch.float64, requires_grad=requires_grad)
    return A, view, a, X, Y


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("op", OPS, ids=lambda op: op.name())
def test_opcheck(op, kind):
    _, view, a, X, Y = _args(kind, True)
    pattern = _ops.op_args(view)
    args = {"tsgu::spmm": (a, X), "tsgu::spmm_t": (a, Y), "tsgu::sddmm": (Y, X)}[op._schema.name]
    torch.library.opcheck(op, (*pattern, *args))


@pytest.mark.parametrize("kind", KINDS)
def test_ops_match_dense(kind):
    A, view, a, X, Y = _args(kind, False)
    D = A.to_dense()
    mask = D != 0
    torch.testing.assert_close(_ops.spmm(view, a, X), D @ X)
    torch.testing.assert_close(_ops.spmm_t(view, a, Y), D.transpose(-2, -1) @ Y)
    # the stored entries in row-major order are the view's entry order
    torch.testing.assert_close(_ops.sddmm(view, Y, X).reshape(-1), (Y @ X.transpose(-2, -1))[mask])


@pytest.mark.parametrize("kind", KINDS)
def test_gradgradcheck(kind):
    _, view, a, X, Y = _args(kind, True)
    assert torch.autograd.gradgradcheck(lambda a, X: _ops.spmm(view, a, X), (a, X))
    assert torch.autograd.gradgradcheck(lambda a, Y: _ops.spmm_t(view, a, Y), (a, Y))
    assert torch.autograd.gradgradcheck(lambda Y, X: _ops.sddmm(view, Y, X), (Y, X))


def _triangular(batched: bool, layout: str):
    gen = torch.Generator().manual_seed(5)
    L = torch.randn(2, 6, 6, generator=gen, dtype=torch.float64).tril()
    L = L * (torch.rand(2, 6, 6, generator=gen) < 0.5)
    L = (L + 3 * torch.eye(6, dtype=torch.float64)) * torch.tril(torch.ones(6, 6, dtype=torch.float64))
    L = L * (L != 0).all(0, keepdim=True) + 3 * torch.eye(6, dtype=torch.float64)  # one pattern, full diagonal
    L = L if batched else L[0]
    return L.to_sparse_csr() if layout == "csr" else L.to_sparse()


@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("batched,layout", [(False, "csr"), (False, "coo"), (True, "csr"), (True, "coo")])
def test_trisolve_op(batched, layout, transpose):
    A = _triangular(batched, layout)
    view = as_csr(A)
    a = view.values.clone().requires_grad_()
    B = torch.randn(*A.shape[:-1], 2, dtype=torch.float64, requires_grad=True)
    torch.library.opcheck(torch.ops.tsgu.trisolve.default, (*_ops.op_args(view), a, B, False, False, transpose))
    M = A.to_dense().transpose(-2, -1) if transpose else A.to_dense()
    torch.testing.assert_close(_ops.trisolve(view, a, B, False, False, transpose), torch.linalg.solve(M, B))
    assert torch.autograd.gradgradcheck(lambda a, B: _ops.trisolve(view, a, B, False, False, transpose), (a, B))
