"""SparseCSR, the compile-friendly sparse operand: conversions, sparse_mm on it against
the torch-sparse-tensor path and dense autograd, gradients into its values, and
torch.compile(fullgraph=True) of a two-layer GCN that takes it, and of sparse_mm on a
SparseCSR built each documented way."""
import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

from torchsparsegradutils import SparseCSR, sparse_mm, sparse_triangular_solve
from torchsparsegradutils.nn import gcn_adjacency


def _dense(batch, n=6, m=5, seed=0):
    gen = torch.Generator().manual_seed(seed)
    D = torch.randn(*batch, n, m, generator=gen, dtype=torch.float64)
    D = D * (torch.rand(*batch, n, m, generator=gen) < 0.4)
    D[..., 0, :] = 0.0                                    # an empty row
    return D


LAYOUTS = [("csr", ()), ("coo", ()), ("coo", (3,))]


@pytest.mark.parametrize("layout,batch", LAYOUTS)
def test_round_trip_and_product(layout, batch):
    D = _dense(batch)
    A = D.to_sparse_csr() if layout == "csr" else D.to_sparse()
    S = SparseCSR.from_torch(A)
    assert S.shape == A.shape and S.dim() == A.dim() and S.dtype == A.dtype
    torch.testing.assert_close(S.to_torch().to_dense(), D)
    B = torch.randn(*batch, 5, 4, dtype=torch.float64)
    torch.testing.assert_close(sparse_mm(S, B), D @ B)


def test_batched_csr_round_trip():
    D = _dense((2,))
    D[..., 1:, 1] = 1.0
    D = D * (D != 0).all(0, keepdim=True)                 # one pattern for both items
    S = SparseCSR.from_torch(D.to_sparse_csr())
    assert S.crow_indices.shape == (2, 7)
    A = S.to_torch()
    assert A.layout == torch.sparse_csr
    torch.testing.assert_close(A.to_dense(), D)


@pytest.mark.parametrize("layout,batch", LAYOUTS)
def test_gradients_match_dense(layout, batch):
    D = _dense(batch, seed=1)
    A = D.to_sparse_csr() if layout == "csr" else D.to_sparse()
    S = SparseCSR.from_torch(A)
    w = S.values.clone().requires_grad_()
    B = torch.randn(*batch, 5, 3, dtype=torch.float64, requires_grad=True)
    G = torch.randn(*batch, 6, 3, dtype=torch.float64)
    sparse_mm(S._replace(values=w), B).backward(G)
    Dd = D.clone().requires_grad_()
    Bd = B.detach().clone().requires_grad_()
    (Dd @ Bd).backward(G)
    assert w.grad.shape == w.shape
    torch.testing.assert_close(w.grad, Dd.grad[D != 0])   # stored entries in row-major order
    torch.testing.assert_close(B.grad, Bd.grad)
    assert torch.autograd.gradcheck(lambda w, B: sparse_mm(S._replace(values=w), B), (w, B))


def test_inplace_edit_of_values_detected():
    S = SparseCSR.from_torch(_dense(()).to_sparse_csr())
    w = S.values.clone().requires_grad_()
    C = sparse_mm(S._replace(values=w), torch.randn(5, 2, dtype=torch.float64, requires_grad=True))
    with torch.no_grad():
        w.mul_(2)
    with pytest.raises(RuntimeError, match="inplace"):
        C.sum().backward()


def test_malformed_components_raise():
    S = SparseCSR(torch.tensor([0, 1, 2]), torch.tensor([0, 7]), torch.ones(2), (2, 3))
    with pytest.raises(ValueError, match="malformed"):
        sparse_mm(S, torch.ones(3, 1))
    with pytest.raises(ValueError, match="Incompatible inner dimensions"):
        sparse_mm(S._replace(col_indices=torch.tensor([0, 1])), torch.ones(4, 1))


def test_components_with_negative_bit_or_strides():
    """Components the kernels cannot read as they lie (PyTorch's negative bit, which
    DLPack cannot carry, or non-unit strides) are read as the values they hold."""
    D = _dense(())
    S = SparseCSR.from_torch(D.to_sparse_csr())
    B = torch.randn(5, 3, dtype=torch.float64)

    def neg_view(t):                       # t's values, held as minus their memory
        return (-t)._neg_view()

    def strided(t):                        # t's values at every other element
        return torch.stack([t, torch.zeros_like(t)], 1).reshape(-1)[::2]

    for wrap in (neg_view, strided):
        for field in ("crow_indices", "col_indices", "values"):
            T = S._replace(**{field: wrap(getattr(S, field))})
            assert torch.equal(getattr(T, field), getattr(S, field))
            with torch.no_grad():
                torch.testing.assert_close(sparse_mm(T, B), D @ B)
            torch.testing.assert_close(sparse_mm(T, B.requires_grad_()), D @ B)
            B = B.detach()


@pytest.mark.parametrize("transpose", [False, True])
def test_triangular_solve_on_components(transpose):
    gen = torch.Generator().manual_seed(2)
    L = (torch.randn(5, 5, generator=gen, dtype=torch.float64) * (torch.rand(5, 5, generator=gen) < 0.5)).tril()
    L += 4 * torch.eye(5, dtype=torch.float64)
    S = SparseCSR.from_torch(L.to_sparse_csr())
    w = S.values.clone().requires_grad_()
    B = torch.randn(5, 2, dtype=torch.float64, requires_grad=True)
    X = sparse_triangular_solve(S._replace(values=w), B, upper=False, transpose=transpose)
    Ld = L.clone().requires_grad_()
    Bd = B.detach().clone().requires_grad_()
    Xd = torch.linalg.solve_triangular(Ld.t() if transpose else Ld, Bd, upper=transpose)
    torch.testing.assert_close(X, Xd)
    G = torch.randn(5, 2, dtype=torch.float64)
    X.backward(G)
    Xd.backward(G)
    torch.testing.assert_close(w.grad, Ld.grad[L != 0])
    torch.testing.assert_close(B.grad, Bd.grad)
    with pytest.raises(ValueError, match="triangular"):
        sparse_triangular_solve(S, B, upper=True)


class _GCN(torch.nn.Module):
    def __init__(self, f, h, c):
        super().__init__()
        self.l1, self.l2 = torch.nn.Linear(f, h), torch.nn.Linear(h, c)

    def forward(self, A, X):
        return self.l2(sparse_mm(A, torch.relu(self.l1(sparse_mm(A, X)))))


def test_fullgraph_compile_of_a_gcn_matches_eager():
    torch.manual_seed(0)
    n = 300
    idx = torch.randint(0, n, (2, 2000))
    A = torch.sparse_coo_tensor(idx, torch.rand(2000), (n, n)).coalesce()
    S = SparseCSR.from_torch(A)
    w = S.values.clone().requires_grad_()
    X = torch.randn(n, 12)
    model = _GCN(12, 8, 3)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    out_c = compiled(S._replace(values=w), X)
    grads_c = torch.autograd.grad(out_c.square().sum(), [w, *model.parameters()])
    out_e = model(A, X)                                   # eager, torch sparse tensor
    torch.testing.assert_close(out_c, out_e, rtol=1e-5, atol=1e-5)
    grads_e = torch.autograd.grad(model(S._replace(values=w), X).square().sum(), [w, *model.parameters()])
    for gc, ge in zip(grads_c, grads_e):
        torch.testing.assert_close(gc, ge, rtol=1e-5, atol=1e-5)


MALFORMED_COMPONENTS = {
    "crow_decreasing": ([0, 2, 1, 3], [0, 1, 2], (3, 3)),
    "col_out_of_range": ([0, 1, 2, 2], [0, 5], (3, 3)),
    "col_negative": ([0, 1, 2, 2], [0, -1], (3, 3)),
    "cols_unsorted": ([0, 2, 2, 2], [2, 0], (3, 3)),
    "crow_not_ending_at_nnz": ([0, 1, 2, 5], [0, 1], (3, 3)),
    "batched_item_decreasing": ([[0, 1, 2, 3], [0, 2, 1, 3]], [[0, 1, 2], [0, 1, 2]], (2, 3, 3)),
    "stacked_col_out_of_range": ([0, 1, 2, 3, 4, 5, 6], [0, 1, 2, 0, 1, 5], (2, 3, 3)),
}


@pytest.mark.parametrize("name", sorted(MALFORMED_COMPONENTS))
def test_to_torch_refuses_a_malformed_structure(name):
    """PyTorch's sparse ops trust the tensor to_torch builds: with a decreasing crow its
    to_dense() once crashed, with a column out of range torch.sparse.mm read out of bounds."""
    crow, col, size = MALFORMED_COMPONENTS[name]
    col = torch.tensor(col)
    S = SparseCSR(torch.tensor(crow), col, torch.ones(col.shape), size)
    with pytest.raises(ValueError, match="malformed sparse matrix"):
        S.to_torch()


def test_to_torch_structure_check_without_our_kernels():
    """Where neither the C nor the CUDA kernels take the arrays, PyTorch's validator
    checks them (run here on CPU arrays)."""
    from torchsparsegradutils._core.intake import _torch_check_structure
    for name, (crow, col, size) in MALFORMED_COMPONENTS.items():
        view = SparseCSR(torch.tensor(crow), torch.tensor(col), torch.ones(torch.tensor(col).shape), size).view()
        with pytest.raises(ValueError, match="malformed sparse matrix"):
            _torch_check_structure(view.ptr, view.col, view)
    view = SparseCSR.from_torch(_dense((3,)).to_sparse()).view()
    _torch_check_structure(view.ptr, view.col, view)


# values of another shape than col_indices: once a forward that passed and a backward
# that failed inside autograd ("returned an invalid gradient at index 2")
BAD_SHAPES = {
    "values_2d_for_1d_crow": SparseCSR(torch.tensor([0, 1, 2]), torch.tensor([0, 1]),
                                       torch.ones(1, 2, dtype=torch.float64), (2, 2)),
    "values_1d_for_batched_crow": SparseCSR(torch.tensor([[0, 1, 2], [0, 1, 2]]), torch.tensor([[0, 1], [0, 1]]),
                                            torch.ones(4, dtype=torch.float64), (2, 2, 2)),
}


@pytest.mark.parametrize("name", sorted(BAD_SHAPES))
def test_component_shapes_are_checked_before_the_forward(name):
    from torchsparsegradutils import sparse_logsumexp
    S = BAD_SHAPES[name]
    S = S._replace(values=S.values.clone().requires_grad_())
    B = torch.ones(*S.size[:-1], 1, dtype=torch.float64)
    calls = [lambda: sparse_mm(S, B), lambda: sparse_triangular_solve(S, B, upper=False),
             lambda: sparse_logsumexp(S, -1), S.to_torch]
    for call in calls:
        with pytest.raises(ValueError, match="values must have the shape of col_indices"):
            call()
def _csr_of(D, w):
    """torch.sparse_csr_tensor of D's pattern, 2D or batched, with values w (differentiable)."""
    C = D.to_sparse_csr()
    return torch.sparse_csr_tensor(C.crow_indices(), C.col_indices(), w, D.shape)


def _built(way):
    """(S, its learnable leaf, dense reference of S as a function of that leaf) for each
    documented way to build a SparseCSR.  Views of a torch sparse tensor's components
    (what A.values() is) once crashed Dynamo: it follows a view input to its sparse base."""
    D = _dense(())
    Db = _dense((2,))
    Db = Db * (Db != 0).all(0, keepdim=True)              # one pattern for both items (batched CSR)
    if way == "components":
        C = D.to_sparse_csr()
        w = C.values().clone().requires_grad_()
        return SparseCSR(C.crow_indices().clone(), C.col_indices().clone(), w, (6, 5)), w, \
            lambda w: torch.sparse_csr_tensor(C.crow_indices(), C.col_indices(), w, (6, 5)).to_dense()
    if way.startswith("from_torch"):
        batched = way.endswith("batched")
        Dw = Db if batched else D
        A = Dw.to_sparse_csr() if "csr" in way else Dw.to_sparse()
        S = SparseCSR.from_torch(A)
        w = S.values.requires_grad_()                     # from_torch's values: detached, a leaf
        mask = Dw != 0
        return S, w, lambda w: torch.zeros_like(Dw).masked_scatter(mask, w)
    if way == "views_of_csr":                             # the components of a torch CSR tensor
        w = D.to_sparse_csr().values().clone().requires_grad_()
        A = _csr_of(D, w)                                 # the gradient reaches w through A
        return SparseCSR(A.crow_indices(), A.col_indices(), A.values(), A.shape), w, \
            lambda w: _csr_of(D, w).to_dense()
    if way == "views_of_csr_batched":                     # (torch's batched CSR constructor has no backward)
        A = Db.to_sparse_csr()
        S = SparseCSR(A.crow_indices(), A.col_indices(), A.values(), A.shape)
        mask = Db != 0
        return S, S.values.requires_grad_(), lambda w: torch.zeros_like(Db).masked_scatter(mask, w)
    if way == "replace_with_view":                        # S._replace(values=A.values())
        w = D.to_sparse_csr().values().clone().requires_grad_()
        S = SparseCSR.from_torch(D.to_sparse_csr())
        return S._replace(values=_csr_of(D, w).values()), w, lambda w: _csr_of(D, w).to_dense()
    assert way == "gcn_norm"
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 5, 1], [1, 2, 3, 4, 5, 0, 4]])
    S = gcn_adjacency(edge_index, 6, dtype=torch.float64)
    w = S.values.clone().requires_grad_()
    return S._replace(values=w), w, lambda w: S._replace(values=w).to_torch().to_dense()


WAYS = ["components", "from_torch_csr", "from_torch_coo", "from_torch_csr_batched", "from_torch_coo_batched",
        "views_of_csr", "views_of_csr_batched", "replace_with_view", "gcn_norm"]


@pytest.mark.parametrize("way", WAYS)
def test_every_way_to_build_compiles_fullgraph(way):
    S, w, dense_of = _built(way)
    B = torch.randn(*S.shape[:-2], S.shape[-1], 3, dtype=torch.float64, requires_grad=True)
    G = torch.randn(*S.shape[:-1], 3, dtype=torch.float64)
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(lambda S, B: sparse_mm(S, B), fullgraph=True, backend=counter)
    out = compiled(S, B)
    assert counter.frame_count == 1                       # traced whole, not run eagerly
    grads = torch.autograd.grad(out, (w, B), G, retain_graph=True)   # S may hold a graph (views_of_csr)
    out_e = sparse_mm(S, B)
    torch.testing.assert_close(out, out_e)
    for g, ge in zip(grads, torch.autograd.grad(out_e, (w, B), G)):
        torch.testing.assert_close(g, ge)
    wd = w.detach().clone().requires_grad_()              # dense autograd reference
    Bd = B.detach().clone().requires_grad_()
    ref = dense_of(wd) @ Bd
    torch.testing.assert_close(out, ref)
    for g, gd in zip(grads, torch.autograd.grad(ref, (wd, Bd), G)):
        torch.testing.assert_close(g, gd)
