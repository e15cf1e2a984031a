"""Tests of sparse_triangular_solve against dense torch.linalg.solve_triangular with autograd.

A's gradient is compared at A's stored positions (the dense gradient masked by
A's pattern); gradcheck runs in float64 through the values tensor.
"""
import pytest
import torch
from support.checks import num_threads
from support.operands import FULL_RANK_LAYOUTS, seeded, to_sparse, tri_dense
from support.references import dense_trisolve

from torchsparsegradutils import SparseCSR, _backends, sparse_csr_tensor, sparse_triangular_solve
from torchsparsegradutils.utils import rand_sparse_tri

HAS_CUDA = torch.cuda.is_available()
TOL = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.float64: dict(rtol=1e-9, atol=1e-10)}


def check(A, D, B, upper, unit, transpose, tol):
    A = A.detach().requires_grad_(True)
    Bs = B.detach().clone().requires_grad_(True)
    Dd = D.detach().clone().requires_grad_(True)
    Bd = B.detach().clone().requires_grad_(True)
    A_before = A.detach().clone()
    X = sparse_triangular_solve(A, Bs, upper=upper, unitriangular=unit, transpose=transpose)
    Xr = dense_trisolve(Dd, Bd, upper, unit, transpose)
    torch.testing.assert_close(X, Xr, **tol)
    W = torch.randn_like(Xr)
    (X * W).sum().backward()
    (Xr * W).sum().backward()
    torch.testing.assert_close(Bs.grad, Bd.grad, **tol)
    assert A.grad.layout == A.layout
    mask = (D != 0).to(D.dtype)
    torch.testing.assert_close(A.grad.to_dense(), Dd.grad * mask, **tol)
    torch.testing.assert_close(A.detach().to_dense(), A_before.to_dense())   # input unchanged


@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.parametrize("layout", ["coo", "csr"])
@pytest.mark.parametrize("upper", [True, False])
@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("unit", [False, True])
def test_matches_dense(batched, layout, upper, transpose, unit):
    gen = seeded("test_matches_dense", batched, layout, upper, transpose, unit)
    D = tri_dense(3, 9, upper, unit, torch.float64, gen)
    B = torch.randn(3, 9, 4, generator=gen, dtype=torch.float64)
    if not batched:
        D, B = D[0], B[0]
    check(to_sparse(D, layout), D, B, upper, unit, transpose, TOL[torch.float64])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("itype", [torch.int32, torch.int64])
@pytest.mark.parametrize("p", [1, 5])
def test_dtypes_and_rhs_widths(dtype, itype, p):
    gen = torch.Generator().manual_seed(7)
    D = tri_dense(1, 30, False, False, dtype, gen)[0]
    B = torch.randn(30, p, generator=gen, dtype=dtype)
    check(to_sparse(D, "csr", itype), D, B, False, False, True, TOL[dtype])


@pytest.mark.parametrize("upper", [True, False])
@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("unit", [False, True])
def test_single_rhs_long_rows(upper, transpose, unit):
    """p = 1 has its own loop (four partial sums per row, then a remainder): rows of
    every length from 0 to 40 off-diagonal entries."""
    gen = seeded("test_single_rhs_long_rows", upper, transpose, unit)
    D = tri_dense(1, 41, upper, unit, torch.float64, gen, density=1.0)[0] / 8
    B = torch.randn(41, 1, generator=gen, dtype=torch.float64)
    check(to_sparse(D, "csr"), D, B, upper, unit, transpose, TOL[torch.float64])


@pytest.mark.parametrize("p", [1, 3])
@pytest.mark.parametrize("layout", FULL_RANK_LAYOUTS)
@pytest.mark.parametrize("batched", [False, True])
def test_no_grad_path_same_bits(p, layout, batched):
    """Without a gradient to record the solve skips the autograd Function (and for a
    CPU CSR A, or a SparseCSR, reads its arrays directly): same bits, B with the
    negative bit too."""
    gen = torch.Generator().manual_seed(13)
    D = tri_dense(2, 50, False, False, torch.float64, gen, density=0.3)
    B = torch.randn(2, 50, p, generator=gen, dtype=torch.float64)
    if not batched:
        D, B = D[0], B[0]
    A = to_sparse(D, layout, gen=gen)
    Bg = B.clone().requires_grad_(True)
    X_grad = sparse_triangular_solve(A, Bg, upper=False)
    assert X_grad.requires_grad
    X = sparse_triangular_solve(A, B, upper=False)
    with torch.no_grad():
        X_nograd = sparse_triangular_solve(A, Bg, upper=False)
    assert not X.requires_grad and not X_nograd.requires_grad
    assert torch.equal(X, X_grad.detach()) and torch.equal(X, X_nograd)
    assert torch.equal(sparse_triangular_solve(A, (-B)._neg_view(), upper=False), X)
    torch.testing.assert_close(X, torch.linalg.solve_triangular(D, B, upper=False), **TOL[torch.float64])
    if layout == "csr":            # the SparseCSR operand: the custom op, or the kernel directly
        S = SparseCSR.from_torch(A)
        recorded = sparse_triangular_solve(S._replace(values=S.values.clone().requires_grad_()), B, upper=False)
        direct = sparse_triangular_solve(S, B, upper=False)
        assert recorded.grad_fn is not None and direct.grad_fn is None
        assert torch.equal(direct, recorded.detach()) and torch.equal(direct, X)


@pytest.mark.parametrize("p", [1, 4])
@pytest.mark.parametrize("transpose", [False, True])
def test_thread_count_same_bits(p, transpose):
    gen = torch.Generator().manual_seed(17)
    D = tri_dense(24, 300, False, False, torch.float64, gen, density=0.1)
    A, B = to_sparse(D, "csr"), torch.randn(24, 300, p, generator=gen, dtype=torch.float64)
    results = []
    for t in (1, 2, 3):
        with num_threads(t):
            results.append(sparse_triangular_solve(A, B, upper=False, transpose=transpose))
    assert all(torch.equal(results[0], X) for X in results[1:])


@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.parametrize("upper", [True, False])
@pytest.mark.parametrize("transpose", [False, True])
def test_torch_ops_path_matches_dense(monkeypatch, batched, upper, transpose):
    """The non-CPU path (torch.triangular_solve on CSR), run on CPU tensors."""
    monkeypatch.setattr(_backends, "force_torch_ops", True)
    gen = torch.Generator().manual_seed(3)
    for unit in (False, True):
        D = tri_dense(2, 8, upper, unit, torch.float64, gen)
        B = torch.randn(2, 8, 3, generator=gen, dtype=torch.float64)
        if not batched:
            D, B = D[0], B[0]
        check(to_sparse(D, "coo"), D, B, upper, unit, transpose, TOL[torch.float64])


def test_non_contiguous_rhs_and_large_batch_threads():
    gen = torch.Generator().manual_seed(11)
    D = tri_dense(16, 200, True, False, torch.float64, gen, density=0.05)
    B = torch.randn(16, 6, 200, generator=gen, dtype=torch.float64).transpose(1, 2)   # non-contiguous
    A = to_sparse(D, "csr")
    X1 = sparse_triangular_solve(A, B)
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        X0 = sparse_triangular_solve(A, B)
    finally:
        torch.set_num_threads(old)
    assert torch.equal(X0, X1)                      # independent of the thread count
    torch.testing.assert_close(X1, torch.linalg.solve_triangular(D, B, upper=True), **TOL[torch.float64])


@pytest.mark.parametrize("layout", ["coo", "csr"])
@pytest.mark.parametrize("transpose", [False, True])
def test_gradcheck_through_values(layout, transpose):
    gen = torch.Generator().manual_seed(5)
    D = tri_dense(1, 6, False, False, torch.float64, gen, density=0.6)[0]
    B = torch.randn(6, 2, generator=gen, dtype=torch.float64, requires_grad=True)
    if layout == "coo":
        S = D.to_sparse().coalesce()
        idx, vals = S.indices(), S.values().clone().requires_grad_(True)

        def f(v, B):
            return sparse_triangular_solve(torch.sparse_coo_tensor(idx, v, (6, 6)), B, upper=False,
                                           transpose=transpose)
    else:
        S = D.to_sparse_csr()
        crow, col, vals = S.crow_indices(), S.col_indices(), S.values().clone().requires_grad_(True)

        def f(v, B):
            return sparse_triangular_solve(sparse_csr_tensor(crow, col, v, (6, 6)), B, upper=False,
                                           transpose=transpose)
    assert torch.autograd.gradcheck(f, (vals, B))


def test_batched_csr_gradcheck_unitriangular():
    gen = torch.Generator().manual_seed(9)
    D = tri_dense(2, 5, True, True, torch.float64, gen, density=0.7)
    S = D.to_sparse_csr()
    crow, col, vals = S.crow_indices(), S.col_indices(), S.values().clone().requires_grad_(True)
    B = torch.randn(2, 5, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda v, B: sparse_triangular_solve(sparse_csr_tensor(crow, col, v, D.shape), B, unitriangular=True),
        (vals, B))


def test_empty_cases():
    A = torch.sparse_csr_tensor(torch.zeros(1, dtype=torch.int64), torch.zeros(0, dtype=torch.int64),
                                torch.zeros(0), (0, 0))
    assert sparse_triangular_solve(A, torch.zeros(0, 3)).shape == (0, 3)
    I = torch.eye(4).to_sparse_csr()
    assert sparse_triangular_solve(I, torch.zeros(4, 0)).shape == (4, 0)
    # unitriangular with no stored entries: the identity
    Z = torch.sparse_coo_tensor(torch.zeros(2, 0, dtype=torch.long), torch.zeros(0), (4, 4))
    B = torch.randn(4, 2)
    assert torch.equal(sparse_triangular_solve(Z, B, unitriangular=True), B)


def test_rand_sparse_tri_inputs_solve():
    A = rand_sparse_tri((40, 40), 200, torch.sparse_csr, upper=False, values_dtype=torch.float64,
                       well_conditioned=True)
    B = torch.randn(40, 3, dtype=torch.float64)
    X = sparse_triangular_solve(A, B, upper=False)
    torch.testing.assert_close(A.to_dense() @ X, B)


# ---------------------------------------------------------------- errors
def _csr(crow, col, vals, n):
    return torch.sparse_csr_tensor(torch.tensor(crow), torch.tensor(col), torch.tensor(vals), (n, n))


@pytest.mark.parametrize("A, kwargs, match", [
    (_csr([0, 1, 2], [0, 1], [0.0, 1.0], 2), {}, "diagonal entry is zero or not stored"),
    (_csr([0, 1, 2], [1, 1], [1.0, 1.0], 2), {}, "diagonal entry is zero or not stored"),   # row 0 misses it
    (_csr([0, 1, 3], [0, 0, 1], [1.0, 2.0, 1.0], 2), {"upper": True}, "not triangular on the requested side"),
    (_csr([0, 2, 3], [0, 1, 1], [1.0, 2.0, 1.0], 2), {"upper": False}, "not triangular on the requested side"),
    (_csr([0, 2, 3], [0, 1, 1], [1.0, 2.0, 1.0], 2), {"unitriangular": True}, "unitriangular=True, but A stores"),
])
@pytest.mark.parametrize("force_torch", [False, True])
def test_structure_errors(monkeypatch, A, kwargs, match, force_torch):
    monkeypatch.setattr(_backends, "force_torch_ops", force_torch)
    vals = A.values().clone()
    with pytest.raises(ValueError, match=match):
        sparse_triangular_solve(A, torch.ones(2, 1), **kwargs)
    assert torch.equal(A.values(), vals)


@pytest.mark.parametrize("upper", [True, False])
@pytest.mark.parametrize("transpose", [False, True])
def test_first_error_in_row_order(upper, transpose):
    """The solve meets the rows in the order of its direction (the last row first for
    an upper A x = b); the error reported is still the first in row order, as a check
    of the whole matrix before solving would find: here row 1's unsorted columns, not
    the missing diagonal of the last row (which an upper solve reaches first)."""
    n = 5
    crow, col, val = [0], [], []
    for i in range(n):
        cols = [] if i == n - 1 else ([i, i + 2, i + 1] if i == 1 else [i])   # upper-side rows
        if not upper:
            cols = [] if i == n - 1 else ([i - 1, i - 2, i] if i == 2 else [i])
        col += cols
        val += [1.0] * len(cols)
        crow.append(len(col))
    A = _csr(crow, col, val, n)
    for threads in (1, 2):
        with num_threads(threads), pytest.raises(ValueError, match="column indices must be sorted"):
            sparse_triangular_solve(A, torch.ones(n, 1), upper=upper, transpose=transpose)


@pytest.mark.parametrize("crow, col, match", [
    ([0, 2, 2, 2], [1, 5], "column index is negative or not less"),      # out of range
    ([0, 2, 2, 2], [1, -1], "column index is negative or not less"),
    ([0, 2, 2, 2], [2, 1], "column indices must be sorted"),
    ([0, 0, 1, 1], [0], "not triangular on the requested side"),         # left of the diagonal
    ([0, 0, 1, 1], [1], "unitriangular=True, but A stores"),
])
def test_bad_column_in_single_rhs_upper_row(crow, col, match):
    """The p = 1 loops check every column before reading or writing through it."""
    A = torch.sparse_csr_tensor(torch.tensor(crow), torch.tensor(col), torch.ones(len(col)), (3, 3))
    for transpose in (False, True):
        with pytest.raises(ValueError, match=match):
            sparse_triangular_solve(A, torch.ones(3, 1), upper=True, unitriangular=True, transpose=transpose)


def test_zero_diagonal_in_coo_batch_is_error_not_inf():
    D = torch.eye(3).repeat(2, 1, 1)
    D[1, 2, 2] = 0
    with pytest.raises(ValueError, match="singular"):
        sparse_triangular_solve(D.to_sparse(), torch.ones(2, 3, 1))


@pytest.mark.parametrize("A, B, exc, match", [
    ("not a tensor", torch.ones(2, 1), ValueError, "instances of torch.Tensor"),
    (torch.eye(2).to_sparse(), torch.ones(2), ValueError, "at least 2-dimensional"),
    (torch.eye(2).to_sparse(), torch.ones(1, 2, 1), ValueError, "both be 2D or both be 3D"),
    (torch.eye(2), torch.ones(2, 1), ValueError, "COO or CSR"),
    (torch.eye(2).to_sparse(), torch.eye(2).to_sparse(), ValueError, "dense"),
    (torch.ones(2, 3).to_sparse(), torch.ones(2, 1), ValueError, "square"),
    (torch.eye(2).to_sparse(), torch.ones(3, 1), ValueError, "Incompatible inner dimensions"),
    (torch.eye(2).repeat(2, 1, 1).to_sparse(), torch.ones(3, 2, 1), ValueError, "same batch size"),
    (torch.eye(2, dtype=torch.float16).to_sparse(), torch.ones(2, 1, dtype=torch.float16), TypeError,
     "float32 and float64"),
    (torch.eye(2).to_sparse(), torch.ones(2, 1, dtype=torch.float64), TypeError, "same dtype"),
])
def test_argument_errors(A, B, exc, match):
    with pytest.raises(exc, match=match):
        sparse_triangular_solve(A, B)


def test_inplace_edit_before_backward_raises():
    A = torch.eye(3, dtype=torch.float64).to_sparse_csr().requires_grad_(True)
    B = torch.ones(3, 1, dtype=torch.float64, requires_grad=True)
    X = sparse_triangular_solve(A, B)
    X.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        X.sum().backward()


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device")
@pytest.mark.parametrize("transpose", [False, True])
def test_cuda_matches_dense(transpose):
    gen = torch.Generator().manual_seed(1)
    D = tri_dense(2, 8, False, False, torch.float64, gen)
    B = torch.randn(2, 8, 3, generator=gen, dtype=torch.float64)
    A = to_sparse(D, "csr").cuda().requires_grad_(True)
    X = sparse_triangular_solve(A, B.cuda(), upper=False, transpose=transpose)
    torch.testing.assert_close(X.cpu(), dense_trisolve(D, B, False, False, transpose), **TOL[torch.float64])
    X.sum().backward()
    assert A.grad.layout == torch.sparse_csr and A.grad.is_cuda


@pytest.mark.parametrize("ctor", ["coo", "csr"])
def test_inplace_edit_of_values_between_forward_and_backward_raises(ctor):
    """Issue 7, finding 3: v.mul_(3) on the values A was built from, between forward
    and backward, raises autograd's version-counter error (was a silently wrong gradient)."""
    D = tri_dense(1, 5, False, False, torch.float64, seeded("finding3", ctor))[0]
    S = D.to_sparse_csr() if ctor == "csr" else D.to_sparse().coalesce()
    v = S.values().clone().requires_grad_()
    A = (sparse_csr_tensor(S.crow_indices(), S.col_indices(), v, S.shape) if ctor == "csr"
         else torch.sparse_coo_tensor(S.indices(), v, S.shape))
    B = torch.randn(5, 2, dtype=torch.float64, requires_grad=True)
    X = sparse_triangular_solve(A, B, upper=False)
    with torch.no_grad():
        v.mul_(3)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        X.sum().backward()


# ---------------------------------------------------------------- the release's compat entry
@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("layout", ["dense", "coo", "csr"])
def test_linalg_solve_triangular_compat(layout, transpose):
    """torchsparsegradutils._compat.linalg_solve_triangular_compat, which the published
    release's tests import: dense A through torch.linalg.solve_triangular, sparse A through
    sparse_triangular_solve, both A X = B (A^T X = B with transpose)."""
    from torchsparsegradutils._compat import linalg_solve_triangular_compat
    L = torch.tensor([[2.0, 0.0, 0.0], [1.0, 3.0, 0.0], [4.0, 5.0, 6.0]], dtype=torch.float64)
    B = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], dtype=torch.float64)
    A = {"dense": L, "coo": L.to_sparse(), "csr": L.to_sparse_csr()}[layout]
    X = linalg_solve_triangular_compat(A, B, upper=False, transpose=transpose)
    torch.testing.assert_close((L.t() if transpose else L) @ X, B)
