"""sparse_csr_tensor and sparse_coo_tensor: sparse tensors built from a learnable values
tensor, whose backward into the values stays sparse (never a dense n x m gradient), against
dense PyTorch autograd."""
import math

import pytest
import torch
from support.operands import random_dense
from support.mm import dense_reference, make_case

from torchsparsegradutils import (sampled_addmm, sparse_bidir_logsumexp, sparse_coo_tensor, sparse_csr_tensor,
                                  sparse_generic_lstsq, sparse_generic_solve, sparse_log_softmax, sparse_logsumexp,
                                  sparse_mm, sparse_softmax, sparse_triangular_solve)
from torchsparsegradutils._core.view import entry_rows


def test_sparse_csr_tensor_never_densifies():
    """Our CSR constructor's backward maps the gradient onto values without to_dense."""
    D = random_dense((50, 40), torch.float64, seed=3, nnz=100)
    S = D.to_sparse_csr()
    v = S.values().clone().requires_grad_()
    B = torch.randn(40, 4, dtype=torch.float64)
    with torch.autograd.profiler.profile() as prof:
        sparse_mm(sparse_csr_tensor(S.crow_indices(), S.col_indices(), v, S.shape), B).sum().backward()
    names = {e.name for e in prof.function_events}
    assert not any("to_dense" in nm for nm in names), names
    ref = dense_reference(D, B, torch.ones(50, 4, dtype=torch.float64))[1]
    torch.testing.assert_close(v.grad, ref[D != 0])


@pytest.mark.parametrize("order", ["sorted", "shuffled", "duplicates"])
@pytest.mark.parametrize("batched", [False, True])
def test_sparse_coo_tensor_values_gradient(order, batched):
    """Our COO constructor: values.grad equals dense autograd's for sorted, unsorted and
    repeated positions (each repeat gets its matrix entry's gradient), 2-D and batched."""
    gen = torch.Generator().manual_seed(8)
    D = random_dense((2, 9, 7) if batched else (9, 7), torch.float64, gen, nnz=20)
    idx = D.to_sparse().coalesce().indices()
    if order != "sorted":
        if order == "duplicates":
            idx = torch.cat([idx, idx[:, :5]], 1)
        idx = idx[:, torch.randperm(idx.shape[1], generator=gen)]
    v = torch.randn(idx.shape[1], dtype=torch.float64, generator=gen, requires_grad=True)
    B = torch.randn(*D.shape[:-2], 7, 3, dtype=torch.float64, generator=gen)
    G = torch.randn(*D.shape[:-1], 3, dtype=torch.float64, generator=gen)
    sparse_mm(sparse_coo_tensor(idx, v, D.shape), B).backward(G)
    v_ref = v.detach().clone().requires_grad_()
    dense = torch.zeros(D.shape, dtype=torch.float64).index_put(tuple(idx), v_ref, accumulate=True)
    (dense @ B).backward(G)
    torch.testing.assert_close(v.grad, v_ref.grad)
    Bl = B.clone().requires_grad_()
    f = lambda v, B: sparse_mm(sparse_coo_tensor(idx, v, D.shape), B) ** 2  # noqa: E731
    assert torch.autograd.gradgradcheck(f, (v.detach().requires_grad_(), Bl))


def test_sparse_coo_tensor_same_pattern_is_not_searched(monkeypatch):
    """On a sorted, unique index array (an edge list), sparse_mm's gradient comes back on
    the same indices and the constructor hands its values over without any look-up;
    a dense gradient or another pattern goes through the look-up."""
    import torchsparsegradutils._core.view as st
    A, B, _, D = make_case("coo", False, 30, 20, 4, 80, torch.float64, torch.int64, seed=5)
    idx = A._indices()
    v = A._values().clone().requires_grad_()

    def no_lookup(*args):
        raise AssertionError("looked up a gradient that came back on the same pattern")
    with monkeypatch.context() as mp:
        mp.setattr(st, "_values_at", no_lookup)
        sparse_mm(sparse_coo_tensor(idx, v, A.shape), B).sum().backward()
    ref = dense_reference(D, B, torch.ones(30, 4, dtype=torch.float64))[1]
    torch.testing.assert_close(v.grad, ref[D != 0])
    v.grad = None
    W = torch.randn(D.shape, dtype=torch.float64)
    (sparse_coo_tensor(idx, v, A.shape).to_dense() * W).sum().backward()
    torch.testing.assert_close(v.grad, W[D != 0])
    v.grad = None
    Wsp = (W * (torch.rand(D.shape) < 0.5)).to_sparse()   # another sparse pattern
    got = st._values_at(Wsp, list(idx))
    torch.testing.assert_close(got, Wsp.to_dense()[D != 0])
    assert torch.equal(st._values_at(torch.zeros(D.shape).to_sparse(), list(idx)), torch.zeros(idx.shape[1]))


def test_sparse_csr_tensor_with_other_gradients():
    """A gradient that arrives dense, or on another sparse pattern, is gathered at the pattern."""
    from torchsparsegradutils._core.view import values_at_pattern
    A, _, _, D = make_case("csr", False, 5, 6, 2, 8, torch.float64, torch.int64, seed=4)
    v = A.values().clone().requires_grad_()
    S = sparse_csr_tensor(A.crow_indices(), A.col_indices(), v, A.shape)
    W = torch.randn(D.shape, dtype=torch.float64)
    (S.to_dense() * W).sum().backward()
    torch.testing.assert_close(v.grad, W[D != 0])
    assert torch.autograd.gradcheck(
        lambda v: sparse_csr_tensor(A.crow_indices(), A.col_indices(), v, A.shape).to_dense(), (v,))
    # batched pattern (torch cannot differentiate to_dense of batched CSR; call the mapping directly)
    Ab, _, _, Db = make_case("csr", True, 5, 6, 2, 8, torch.float64, torch.int64, seed=4)
    Wb = torch.randn(Db.shape, dtype=torch.float64)
    got = values_at_pattern(Wb, Ab.crow_indices(), Ab.col_indices())
    torch.testing.assert_close(got, Wb[Db != 0].reshape(Ab.values().shape))
    Wsp = (Wb * (torch.rand(Db.shape) < 0.5)).to_sparse()   # another sparse pattern
    got = values_at_pattern(Wsp, Ab.crow_indices(), Ab.col_indices())
    torch.testing.assert_close(got, Wsp.to_dense()[Db != 0].reshape(Ab.values().shape))



# ------------------------------------------- second derivatives through the constructors
def _pattern(ctor, batched, gen, square=False):
    """(build(v) -> A, idx, shape, values): a pattern with an empty row in each item (or,
    square, an upper triangle with its diagonal, the values there 8 + noise: nonsingular),
    A built from values v by the constructor `ctor` ("coo"; "coo_duplicates": unsorted,
    with repeats; "csr"), idx the position of every value (one tensor a dim)."""
    D = random_dense(((2,) if batched else ()) + (6, 6 if square else 5), torch.float64, gen, nnz=14, empty_rows=not square)
    if square:
        D = D.triu() + 8 * torch.eye(6, dtype=torch.float64)
    if ctor == "csr":
        S = D.to_sparse_csr()
        crow, col = S.crow_indices(), S.col_indices()
        rows = entry_rows(crow)
        n = D.shape[-2]
        idx = ([rows // n, rows % n] if batched else [rows]) + [col.reshape(-1)]
        return (lambda v: sparse_csr_tensor(crow, col, v.reshape(col.shape), D.shape)), idx, D.shape, D[tuple(idx)]
    idx = D.to_sparse().coalesce().indices()
    if ctor == "coo_duplicates":
        idx = torch.cat([idx, idx[:, :4]], 1)[:, torch.randperm(idx.shape[1] + 4, generator=gen)]
    return (lambda v: sparse_coo_tensor(idx, v, D.shape)), list(idx), D.shape, D[tuple(idx)]


def _dense_of(v, idx, shape):
    """The matrix (or batch) whose stored values at positions idx are v (repeats summed):
    differentiable in v, the dense reference of both constructors."""
    return torch.zeros(shape, dtype=v.dtype).index_put(tuple(idx), v, accumulate=True)


def _reduce_reference(reduce):
    """Dense sparse_mm(A, X, reduce) over A's stored positions idx."""
    def ref(D, X, idx):
        mask = torch.zeros(D.shape, dtype=torch.bool).index_put(tuple(idx), torch.tensor(True))
        if reduce == "sum":
            return D @ X
        if reduce == "mean":
            return (D @ X) / mask.sum(-1, keepdim=True).clamp(min=1)
        prod = (D.unsqueeze(-1) * X.unsqueeze(-3)).masked_fill(~mask.unsqueeze(-1),
                                                                -math.inf if reduce == "amax" else math.inf)
        out = prod.amax(-2) if reduce == "amax" else prod.amin(-2)
        return out.masked_fill(~mask.any(-1, keepdim=True), 0)
    return ref


def _direct_solve(A, B, **_):
    return torch.linalg.solve(A.to_dense(), B)


def _direct_transpose_solve(A, B, **_):
    return torch.linalg.solve(A.to_dense().mT, B)


# ops differentiable twice on a torch sparse tensor: name -> (op(A, X), dense reference(D, X, idx), square A)
TWICE = {f"sparse_mm_{r}": (lambda A, X, r=r: sparse_mm(A, X, r), _reduce_reference(r), False)
         for r in ("sum", "mean", "amax", "amin")}
TWICE["sparse_generic_solve"] = (lambda A, X: sparse_generic_solve(A, X, _direct_solve, _direct_transpose_solve),
                                 lambda D, X, idx: torch.linalg.solve(D, X), True)


@pytest.mark.parametrize("op,batched", [(op, b) for op, (_, _, square) in TWICE.items() for b in (False, True)
                                        if not (square and b)])             # the generic solve takes a 2D A
@pytest.mark.parametrize("ctor", ["coo", "coo_duplicates", "csr"])
def test_constructor_values_hessian_vector_product_matches_dense(op, batched, ctor):
    """Both constructors keep create_graph=True: the gradient w.r.t. the values, and the
    Hessian-vector product, of a loss through every twice-differentiable op equal dense
    float64 autograd's (the COO constructor's backward once returned a gradient that
    recorded no graph: the second derivative was silently lost)."""
    fn, ref, square = TWICE[op]
    gen = torch.Generator().manual_seed(31)
    build, idx, shape, values = _pattern(ctor, batched, gen, square)
    X = torch.randn(*shape[:-2], shape[-1], 3, dtype=torch.float64, generator=gen)
    W = torch.randn(values.shape, dtype=torch.float64, generator=gen)
    v = (values + 0.1 * torch.randn(values.shape, dtype=torch.float64, generator=gen)).requires_grad_()

    gv, = torch.autograd.grad((fn(build(v), X) ** 2).sum(), v, create_graph=True)
    assert gv.requires_grad
    hv, = torch.autograd.grad((gv * W).sum(), v)

    v_ref = v.detach().clone().requires_grad_()
    g_ref, = torch.autograd.grad((ref(_dense_of(v_ref, idx, shape), X, idx) ** 2).sum(), v_ref, create_graph=True)
    h_ref, = torch.autograd.grad((g_ref * W).sum(), v_ref)
    torch.testing.assert_close(gv, g_ref)
    torch.testing.assert_close(hv, h_ref)


def _solve_rhs(A):
    return torch.ones(A.shape[-1], 2, dtype=A.dtype)


# ops documented as differentiable once on a torch sparse tensor: name -> (op(A) -> dense, square A)
ONCE = {
    "sparse_mm_sparse_B": (lambda A: sparse_mm(A, A.detach().mT.to_sparse(layout=A.layout)).to_dense(), False),
    "sparse_softmax": (lambda A: sparse_softmax(A, -1).to_dense(), False),
    "sparse_log_softmax": (lambda A: sparse_log_softmax(A, -1).to_dense(), False),
    "sparse_logsumexp": (lambda A: sparse_logsumexp(A, -1), False),
    "sparse_bidir_logsumexp": (lambda A: sparse_bidir_logsumexp(A)[0], False),
    "sampled_addmm": (lambda A: sampled_addmm(A, torch.ones(A.shape[-2], 2, dtype=A.dtype),
                                              torch.ones(2, A.shape[-1], dtype=A.dtype)).to_dense(), False),
    "sparse_triangular_solve": (lambda A: sparse_triangular_solve(A, _solve_rhs(A)), True),
    "sparse_generic_lstsq": (lambda A: sparse_generic_lstsq(A, _solve_rhs(A)), True),
}


@pytest.mark.parametrize("op", list(ONCE))
@pytest.mark.parametrize("ctor", ["coo", "coo_duplicates", "csr"])
def test_constructor_values_through_once_differentiable_op_refuse_create_graph(op, ctor):
    """An op documented as differentiable once on a torch sparse tensor raises its
    documented RuntimeError under create_graph=True, even for a loss linear in its
    output (whose gradient once came back silently recording no graph); without
    create_graph the gradient of the values comes back."""
    fn, square = ONCE[op]
    build, _, _, values = _pattern(ctor, False, torch.Generator().manual_seed(32), square)
    v = values.clone().requires_grad_()
    with pytest.raises(RuntimeError, match="of a torch sparse tensor: differentiable once; "):
        torch.autograd.grad(fn(build(v)).sum(), v, create_graph=True)
    gv, = torch.autograd.grad(fn(build(v)).sum(), v)
    assert gv.shape == v.shape and not gv.requires_grad
