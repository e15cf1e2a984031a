"""The kernels as torch.library custom operators (torchsparsegradutils._ops):
torch.library.opcheck (schema, fake tensors, autograd registration, AOT dispatch
with dynamic shapes), values against dense or looped references, second derivatives
(gradgradcheck), and torch.compile(fullgraph=True) of the public functions built on
them against eager."""
import pytest
import torch
from support.children import run_child

from torchsparsegradutils import SparseCSR, _backends, _ops, gather_mm, segment_mm, sparse_bidir_logsumexp, sparse_logsumexp
from torchsparsegradutils._core import validate
from torchsparsegradutils._core.intake import as_csr
from torchsparsegradutils._core.view import op_args

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
    pattern = op_args(view)
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
    torch.library.opcheck(torch.ops.tsgu.trisolve.default, (*op_args(view), a, B, False, False, transpose))
    M = A.to_dense().transpose(-2, -1) if transpose else A.to_dense()
    torch.testing.assert_close(_ops.trisolve(view, a, B, False, False, transpose), torch.linalg.solve(M, B))
    assert torch.autograd.gradgradcheck(lambda a, B: _ops.trisolve(view, a, B, False, False, transpose), (a, B))


# ------------------------------------------------------------------ log-sum-exp
LSE_KINDS = ["csr", "coo", "batched_csr", "batched_coo"]
LSE_MODES = ["rows", "cols", "all", "both"]


def _lse_reference(D: torch.Tensor, mode: str, include_zeros: bool) -> torch.Tensor:
    """The op's output from dense PyTorch: absent entries are 0 or -inf."""
    D = D if D.dim() == 3 else D.unsqueeze(0)
    X = D if include_zeros else D.masked_fill(D == 0, float("-inf"))
    if mode == "rows":
        return torch.logsumexp(X, 2)
    if mode == "cols":
        return torch.logsumexp(X, 1)
    if mode == "all":
        return torch.logsumexp(X, (1, 2))
    width = max(D.shape[1], D.shape[2])
    pad = X.new_full((2, D.shape[0], width), float("-inf"))
    pad[0, :, :D.shape[2]], pad[1, :, :D.shape[1]] = torch.logsumexp(X, 1), torch.logsumexp(X, 2)
    return pad


@pytest.mark.parametrize("include_zeros", [True, False])
@pytest.mark.parametrize("mode", LSE_MODES)
@pytest.mark.parametrize("kind", LSE_KINDS)
def test_lse_opcheck_and_values(kind, mode, include_zeros):
    A = _operand(kind)
    view = as_csr(A)
    a = view.values.clone().requires_grad_()
    args = (view.ptr, view.col, list(view.shape), a, mode, include_zeros)
    torch.library.opcheck(torch.ops.tsgu.lse.default, args)
    out = _ops.lse(view, a, mode, include_zeros)
    D = A.to_dense().requires_grad_()
    ref = _lse_reference(D, mode, include_zeros)
    torch.testing.assert_close(out, ref)
    G = torch.randn(out.shape, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    G = G.masked_fill(ref.isinf(), 0.0)                  # no gradient through the -inf padding
    (da,) = torch.autograd.grad(out, a, G)
    (dD,) = torch.autograd.grad(ref, D, G)
    torch.testing.assert_close(da.reshape(-1), dD[A.to_dense() != 0])
    torch.library.opcheck(torch.ops.tsgu.lse_grad.default,
                          (view.ptr, view.col, list(view.shape), a.detach(), out.detach(), G, mode))


# ------------------------------------------------------------ grouped products
def _grouping(segments: bool, idx_dtype=torch.int64):
    """(off, perm, relation of each row) of 11 rows in 4 relations, relation 2 empty."""
    if segments:
        rel = torch.tensor([0, 0, 0, 1, 1, 3, 3, 3, 3, 3, 3])
        return torch.tensor([0, 3, 5, 5, 11]), None, rel
    rel = torch.tensor([3, 0, 1, 3, 0, 3, 1, 3, 0, 3, 3], dtype=idx_dtype)
    off, perm = _ops.group_rows(rel, 4)
    return off, perm, rel.long()


def _grouped_operands(requires_grad: bool):
    gen = torch.Generator().manual_seed(7)
    a = torch.randn(11, 3, generator=gen, dtype=torch.float64, requires_grad=requires_grad)
    M = torch.randn(4, 3, 5, generator=gen, dtype=torch.float64, requires_grad=requires_grad)
    G = torch.randn(11, 5, generator=gen, dtype=torch.float64, requires_grad=requires_grad)
    return a, M, G


@pytest.mark.parametrize("idx_dtype", [torch.int32, torch.int64])
def test_group_rows_op(idx_dtype):
    off, perm, rel = _grouping(False, idx_dtype)
    assert torch.equal(off, torch.tensor([0, 3, 5, 5, 11]))
    assert torch.equal(perm, torch.argsort(rel, stable=True))
    torch.library.opcheck(torch.ops.tsgu.group_rows.default, (rel.to(idx_dtype), 4))
    torch.library.opcheck(torch.ops.tsgu.group_rows.default, (torch.zeros(0, dtype=idx_dtype), 3))


@pytest.mark.parametrize("segments", [True, False], ids=["segments", "perm"])
def test_grouped_ops(segments):
    off, perm, rel = _grouping(segments)
    a, M, G = _grouped_operands(True)
    torch.library.opcheck(torch.ops.tsgu.grouped_mm.default, (off, perm, a, M))
    torch.library.opcheck(torch.ops.tsgu.grouped_mm_tn.default, (off, perm, a, G))
    torch.testing.assert_close(_ops.grouped_mm(off, perm, a, M), (a.unsqueeze(1) @ M[rel]).squeeze(1))
    ref_tn = torch.zeros(4, 3, 5, dtype=torch.float64).index_add(0, rel, a.unsqueeze(2) * G.unsqueeze(1))
    torch.testing.assert_close(_ops.grouped_mm_tn(off, perm, a, G), ref_tn)
    assert torch.autograd.gradgradcheck(lambda a, M: _ops.grouped_mm(off, perm, a, M), (a, M))
    assert torch.autograd.gradgradcheck(lambda a, G: _ops.grouped_mm_tn(off, perm, a, G), (a, G))


# ------------------------------------------------- torch.compile of the public ops
def _values_and_grads(fn, *inputs):
    """fn(*inputs) and the gradients of a fixed function of it w.r.t. the inputs that require grad."""
    out = fn(*inputs)
    outs = out if isinstance(out, tuple) else (out,)
    loss = sum((o.masked_fill(o.isinf(), 0.0) * torch.linspace(-1, 1, o.numel(), dtype=o.dtype).reshape(o.shape))
               .sum() for o in outs)
    return outs, torch.autograd.grad(loss, [t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad])


def _assert_same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


def _indexed_cases():
    """(op, groups of 11 rows, groups of their first 5)"""
    _, _, rel = _grouping(False)
    return [(gather_mm, rel, rel[:5]), (gather_mm, rel.int(), rel[:5].int()),
            (segment_mm, torch.tensor([3, 2, 0, 6]), torch.tensor([2, 1, 0, 2]))]


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_indexed_matmul_matches_eager(backend):
    """fullgraph: no graph break; outputs and gradients as eager, also for a second N
    (dynamic shapes), and bad relations still raise from the kernels."""
    torch._dynamo.reset()       # a fresh cache_size_limit: the other backend's run compiled these too
    a, M, _ = _grouped_operands(True)
    for op, *groupings in _indexed_cases():
        compiled = torch.compile(op, fullgraph=True, backend=backend)
        for groups in groupings:
            x = a[:groups.shape[0] if op is gather_mm else int(groups.sum())].detach().requires_grad_()
            for got, want in zip(_values_and_grads(compiled, x, M, groups), _values_and_grads(op, x, M, groups)):
                _assert_same(got, want)
    a, M, _ = _grouped_operands(False)
    with pytest.raises(ValueError, match="malformed grouping"):
        torch.compile(gather_mm, fullgraph=True, backend="aot_eager")(a, M, torch.full((11,), 4))
    for bad in ([3, 2, 0, 5], [3, -1, 3, 6]):      # a sum other than N; a negative length
        with pytest.raises(ValueError, match="malformed grouping"):
            torch.compile(segment_mm, fullgraph=True, backend="aot_eager")(a, M, torch.tensor(bad))


def _lse_all(S):
    """Every reduction of sparse_logsumexp / sparse_bidir_logsumexp, in one function."""
    rows = sparse_logsumexp(S, -1)
    cols = sparse_logsumexp(S, -2, keepdim=True, include_zeros=False)
    whole = sparse_logsumexp(S, (-2, -1))
    col_lse, row_lse = sparse_bidir_logsumexp(S, include_zeros=False)
    return rows, cols, whole, col_lse, row_lse, sparse_bidir_logsumexp(S, output_layout="padded")


@pytest.mark.parametrize("kind", ["csr", "batched_csr", "batched_coo"])
def test_compiled_logsumexp_of_a_sparse_csr_matches_eager(kind):
    """fullgraph on a SparseCSR: outputs as the eager torch-sparse path, gradients into
    its values as that path's values gradient."""
    A = _operand(kind)
    S = SparseCSR.from_torch(A)
    w = S.values.clone().requires_grad_()
    compiled = torch.compile(lambda w: _lse_all(S._replace(values=w)), fullgraph=True, backend="aot_eager")
    outs, (gw,) = _values_and_grads(compiled, w)
    # the same matrix as a COO tensor (a batched CSR's gradient cannot be summed over uses)
    want, (gA,) = _values_and_grads(_lse_all, A.to_dense().to_sparse().requires_grad_())
    _assert_same(outs, want)
    torch.testing.assert_close(gw, gA.coalesce().values().reshape(gw.shape))
    _, (ge,) = _values_and_grads(lambda w: _lse_all(S._replace(values=w)), w)   # eager on the SparseCSR
    torch.testing.assert_close(gw, ge)


def test_logsumexp_of_a_sparse_csr_detects_inplace_edits():
    S = SparseCSR.from_torch(_operand("csr"))
    w = S.values.clone().requires_grad_()
    x = w * 1
    out = sparse_logsumexp(S._replace(values=x), 1)
    with torch.no_grad():
        x.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


def test_default_compile_of_torch_sparse_logsumexp_graph_breaks():
    """A torch sparse tensor is run eagerly (a graph break), with eager's result."""
    A = _operand("coo")
    f = torch.compile(lambda A: sparse_logsumexp(A, 1) * 2, backend="aot_eager")
    torch.testing.assert_close(f(A), sparse_logsumexp(A, 1) * 2)


def test_importing_does_not_load_dynamo_and_a_later_compile_still_runs_sparse_eagerly():
    """Importing the package (every public module) leaves Dynamo unloaded (it takes
    seconds and only compiled code needs it); torch.compile loaded after that runs the
    torch-sparse ops eagerly, values and gradients as eager's, on every call."""
    if validate._eval_frame_callback is None:
        pytest.skip("this PyTorch cannot say whether a compiled region runs: the package disables at import")
    out = run_child("""
        import sys
        assert "torch._dynamo" not in sys.modules, "importing the package loaded Dynamo"
        A = torch.tensor([[1., 0, 2], [0, 3, 0]]).to_sparse().requires_grad_()
        B = torch.tensor([[1., 2], [3, 4], [5, 6]])

        def f(A, x):
            return (sparse_logsumexp(A, 1) * x).sum() + sparse_mm(A, B * x[0]).sum()

        compiled = torch.compile(f, backend="aot_eager")
        x = torch.tensor([2., 3.])
        f(A, x).backward()
        want = A.grad.to_dense().clone()
        for _ in range(2):
            A.grad = None
            compiled(A, x).backward()
            assert torch.equal(A.grad.to_dense(), want)
        print("OK")
    """)
    assert out.returncode == 0 and out.stdout.strip() == "OK", out.stdout + out.stderr


@pytest.mark.parametrize("mode", LSE_MODES)
@pytest.mark.parametrize("kind", ["csr", "batched_csr", "batched_coo"])
def test_lse_second_derivatives(kind, mode):
    """gradgradcheck through lse, lse_grad and lse_wsum (whose backwards are made of
    each other), and opcheck of lse_wsum; outputs at the -inf padding of "both" held at 0."""
    A = _operand(kind)
    view = as_csr(A)
    a = view.values.clone().requires_grad_()

    def f(a):
        out = _ops.lse(view, a, mode, True)
        return torch.where(out.isinf(), torch.zeros_like(out), out)

    assert torch.autograd.gradgradcheck(f, (a,))
    gen = torch.Generator().manual_seed(8)
    out = _ops.lse(view, a, mode, True).detach().requires_grad_()
    u = torch.randn(a.shape, generator=gen, dtype=torch.float64, requires_grad=True)
    G = torch.randn(out.shape, generator=gen, dtype=torch.float64, requires_grad=True)
    pattern = (view.ptr, view.col, list(view.shape))
    torch.library.opcheck(torch.ops.tsgu.lse_wsum.default, (*pattern, a, out, u, mode))
    # each with out as an input of its own: every partial derivative of both ops
    assert torch.autograd.gradcheck(lambda a, out, G: torch.ops.tsgu.lse_grad(*pattern, a, out, G, mode), (a, out, G))
    assert torch.autograd.gradcheck(lambda a, out, u: torch.ops.tsgu.lse_wsum(*pattern, a, out, u, mode), (a, out, u))


def test_logsumexp_of_a_malformed_sparse_csr_raises():
    """The kernels check the components they read, eagerly and compiled."""
    S = SparseCSR(torch.tensor([0, 1, 2]), torch.tensor([0, 7]), torch.ones(2), (2, 3))
    for fn in (sparse_logsumexp, torch.compile(sparse_logsumexp, fullgraph=True, backend="aot_eager")):
        for dim in (0, 1):
            with pytest.raises(ValueError, match="malformed"):
                fn(S, dim)


def test_compiled_logsumexp_with_dim_as_an_argument():
    """An int argument that changes between calls is traced symbolically after a
    recompile: the dims are still read right (not a silent wrong reduction)."""
    D = _operand("batched_coo").to_dense()
    S = SparseCSR.from_torch(D.to_sparse())
    f = torch.compile(lambda S, dim, keepdim: sparse_logsumexp(S, dim, keepdim=keepdim), fullgraph=True,
                      backend="aot_eager")
    for dim, keepdim in ((1, False), (2, False), (-1, False), ((2, 1), False), ((-2, -1), True)):
        torch.testing.assert_close(f(S, dim, keepdim), torch.logsumexp(D, dim, keepdim=keepdim))
    with pytest.raises(torch._dynamo.exc.Unsupported, match="batch dimension"):   # fullgraph: Dynamo's error
        f(S, 0, False)


# ------------------------------------------------- arguments checked as the public API checks them
def _spmm_family_calls(shape, a, ptr=torch.tensor([0, 1, 2]), col=torch.tensor([0, 1])):
    """Every op on a CSR pattern, called directly with these arguments."""
    X, Y = torch.ones(2, 1), torch.ones(2, 1)
    L = torch.zeros(1, 2)
    t = torch.ops.tsgu
    return {
        "spmm": lambda: t.spmm(ptr, col, None, shape, a, X),
        "spmm_t": lambda: t.spmm_t(ptr, col, None, shape, a, Y),
        "sddmm": lambda: t.sddmm(ptr, col, None, shape, Y, X),
        "trisolve": lambda: t.trisolve(ptr, col, None, shape, a, X, False, False, False),
        "lse": lambda: t.lse(ptr, col, shape, a, "rows", True),
        "lse_grad": lambda: t.lse_grad(ptr, col, shape, a, L, L, "rows"),
        "lse_wsum": lambda: t.lse_wsum(ptr, col, shape, a, L, a, "rows"),
    }


def _eager_and_fake(call):
    """call() on real tensors, then traced with fake tensors (the fake implementations)."""
    call()
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode(allow_non_fake_inputs=True):
        call()


@pytest.mark.parametrize("shape", [[1, 1, 2, 2], [2], [2, -2]], ids=["4d", "1d", "negative"])
def test_sparse_ops_refuse_a_size_that_is_not_2d_or_3d(shape):
    """A 4-element shape once passed, and the fake output's rank disagreed with the real one's."""
    for name, call in _spmm_family_calls(shape, torch.ones(2)).items():
        with pytest.raises(ValueError, match=r"size must be \(n, m\) or \(b, n, m\)"):
            _eager_and_fake(call)


def test_sparse_ops_refuse_values_that_are_not_one_per_entry():
    for values in (torch.ones(1, 2), torch.ones(3)):
        for name, call in _spmm_family_calls([2, 2], values).items():
            if name == "sddmm":
                continue                          # takes no values
            with pytest.raises(ValueError, match="values must have the shape of col_indices"):
                _eager_and_fake(call)


def test_sparse_ops_refuse_pointers_of_another_shape():
    for ptr in (torch.tensor([0, 1, 2, 2]), torch.tensor([[0, 1, 2]])):
        for name, call in _spmm_family_calls([2, 2], torch.ones(2), ptr=ptr).items():
            with pytest.raises(ValueError, match="crow_indices must have shape"):
                _eager_and_fake(call)


@pytest.mark.parametrize("op", ["lse", "lse_grad", "lse_wsum"])
def test_lse_ops_refuse_an_unknown_mode(op):
    """Once a bare KeyError (lse) or a silent column reduction (lse_grad, lse_wsum)."""
    ptr, col, a, L = torch.tensor([0, 1, 2]), torch.tensor([0, 1]), torch.ones(2), torch.zeros(1, 2)
    call = {"lse": lambda: torch.ops.tsgu.lse(ptr, col, [2, 2], a, "row", True),
            "lse_grad": lambda: torch.ops.tsgu.lse_grad(ptr, col, [2, 2], a, L, L, "row"),
            "lse_wsum": lambda: torch.ops.tsgu.lse_wsum(ptr, col, [2, 2], a, L, a, "row")}[op]
    with pytest.raises(ValueError, match="unknown log-sum-exp mode 'row'"):
        _eager_and_fake(call)


@pytest.mark.parametrize("path", ["C", "torch_ops"])
@pytest.mark.parametrize("perm", [[0, 0, 0, 0], [0, 1, 1, 3], [3, 2, 1, 4], [0, -1, 2, 3]],
                         ids=["zeros", "repeat", "too_large", "negative"])
def test_grouped_ops_refuse_a_row_order_that_is_not_a_permutation(path, perm, monkeypatch):
    """With a perm naming some row twice, grouped_mm once returned the rows never named
    as uninitialised memory."""
    monkeypatch.setattr(_backends, "force_torch_ops", path == "torch_ops")
    off, perm = torch.tensor([0, 1, 4]), torch.tensor(perm)
    a, M, G = torch.randn(4, 3), torch.randn(2, 3, 5), torch.randn(4, 5)
    with pytest.raises(ValueError, match="not a permutation of the rows"):
        torch.ops.tsgu.grouped_mm(off, perm, a, M)
    with pytest.raises(ValueError, match="not a permutation of the rows"):
        torch.ops.tsgu.grouped_mm_tn(off, perm, a, G)
