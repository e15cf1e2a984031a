"""torch.autograd.gradcheck with its default check of undefined output gradients
(check_undefined_grad=True), in float64, over every public op, the sparse operands
given to gradcheck themselves (torch sparse leaves, COO and CSR): a backward given an
undefined gradient returns None, as PyTorch's own ops do, not a sparse zero on A's
pattern, which that check cannot compare (``eq`` is not defined for sparse layouts;
issue 26).  The ops reached through custom operators (SparseCSR, graph_attention,
graph_attention_v2, gather_mm, segment_mm) are swept too."""
import pytest
import torch

from torchsparsegradutils import (SparseCSR, gather_mm, graph_attention, graph_attention_v2, sampled_addmm, segment_mm,
                                  sparse_bidir_logsumexp, sparse_generic_lstsq, sparse_generic_solve,
                                  sparse_log_softmax, sparse_logsumexp, sparse_mm, sparse_softmax,
                                  sparse_triangular_solve)

F64 = torch.float64


def _matrix(n, m, seed, density=0.6):
    """A float64 (n, m) matrix with about `density` of its entries nonzero."""
    gen = torch.Generator().manual_seed(seed)
    D = torch.randn(n, m, generator=gen, dtype=F64) + 0.5
    return D * (torch.rand(n, m, generator=gen) < density)


def _leaf(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64).requires_grad_()


def _sparse(D, layout):
    return (D.to_sparse() if layout == "coo" else D.to_sparse_csr()).requires_grad_()


def _dense(Y):
    return Y if Y.layout == torch.strided else Y.to_dense()


def _exact(A, B):
    """The least-squares solution of A X = B (of a square A: its solve) by the normal
    equations: direct, so that gradcheck's finite differences see no iteration's
    tolerance, and the same bits every call."""
    D = A.to_dense()
    return torch.linalg.solve(D.T @ D, D.T @ B)


def _exact_t(A, G):
    """The minimum-norm solution of A^T Y = G."""
    D = A.to_dense()
    return D @ torch.linalg.solve(D.T @ D, G)


_SPD = (torch.diag(torch.full((5,), 4.0, dtype=F64)) - torch.diag(torch.ones(4, dtype=F64), 1)
        - torch.diag(torch.ones(4, dtype=F64), -1))
_UPPER = torch.triu(_matrix(5, 5, 3)) + 3 * torch.eye(5, dtype=F64)


# name -> layout -> (function, inputs); each function's outputs dense
CASES = {
    "sparse_mm": lambda L: (sparse_mm, (_sparse(_matrix(4, 3, 0), L), _leaf(3, 2))),
    "sparse_mm_mean": lambda L: (lambda A, B: sparse_mm(A, B, "mean"), (_sparse(_matrix(4, 3, 0), L), _leaf(3, 2))),
    "sparse_mm_amax": lambda L: (lambda A, B: sparse_mm(A, B, "amax"), (_sparse(_matrix(4, 3, 0), L), _leaf(3, 2))),
    "sparse_mm_sparse": lambda L: (lambda A, B: _dense(sparse_mm(A, B)),
                                   (_sparse(_matrix(4, 3, 0), L), _sparse(_matrix(3, 2, 1), L))),
    "sparse_softmax_rows": lambda L: (lambda A: _dense(sparse_softmax(A, -1)), (_sparse(_matrix(4, 3, 0), L),)),
    "sparse_log_softmax_cols": lambda L: (lambda A: _dense(sparse_log_softmax(A, -2)),
                                          (_sparse(_matrix(4, 3, 0), L),)),
    "sparse_logsumexp": lambda L: (lambda A: sparse_logsumexp(A, 1), (_sparse(_matrix(4, 3, 0), L),)),
    # one output (gradcheck compares a sparse gradient with 0 where some outputs' are undefined)
    "sparse_bidir_logsumexp": lambda L: (lambda A: torch.cat(sparse_bidir_logsumexp(A)),
                                         (_sparse(_matrix(4, 3, 0), L),)),
    "sampled_addmm": lambda L: (lambda A, X, Y: _dense(sampled_addmm(A, X, Y)),
                                (_sparse(_matrix(4, 3, 0), L), _leaf(4, 2), _leaf(2, 3, seed=1))),
    "sparse_triangular_solve": lambda L: (sparse_triangular_solve, (_sparse(_UPPER, L), _leaf(5, 2))),
    "sparse_generic_solve": lambda L: (lambda A, B: sparse_generic_solve(A, B, _exact, _exact_t),
                                       (_sparse(_SPD, L), _leaf(5, 2))),
    "sparse_generic_lstsq": lambda L: (lambda A, B: sparse_generic_lstsq(A, B, _exact, _exact_t),
                                       (_sparse(_SPD[:, :3], L), _leaf(5, 2))),
}


@pytest.mark.parametrize("layout", ["coo", "csr"])
@pytest.mark.parametrize("name", CASES)
def test_gradcheck_with_undefined_output_gradients(name, layout):
    fn, inputs = CASES[name](layout)
    assert torch.autograd.gradcheck(fn, inputs, masked=True)     # check_undefined_grad=True: the default


def _sparse_csr(D):
    C = D.to_sparse_csr()
    return C.crow_indices(), C.col_indices(), C.values().clone().requires_grad_()


CUSTOM_OPS = {
    "SparseCSR.sparse_mm": lambda: (lambda v, B: sparse_mm(SparseCSR(*_S[:2], v, (4, 3)), B), (_S[2], _leaf(3, 2))),
    "SparseCSR.sparse_softmax": lambda: (lambda v: sparse_softmax(SparseCSR(*_S[:2], v, (4, 3))).values, (_S[2],)),
    "graph_attention": lambda: (lambda x, s, d: graph_attention(_matrix(4, 4, 5).to_sparse(), x, s, d, 0.2),
                                (_leaf(4, 1, 2), _leaf(4, 1, seed=1), _leaf(4, 1, seed=2))),
    "graph_attention_v2": lambda: (lambda xl, xr, att: graph_attention_v2(_matrix(4, 4, 5).to_sparse(), xl, xr, att),
                                   (_leaf(4, 1, 2), _leaf(4, 1, 2, seed=1), _leaf(1, 2, seed=2))),
    "gather_mm": lambda: (lambda a, b: gather_mm(a, b, torch.tensor([0, 1, 1])), (_leaf(3, 2), _leaf(2, 2, 2))),
    "segment_mm": lambda: (lambda a, b: segment_mm(a, b, torch.tensor([1, 2])), (_leaf(3, 2), _leaf(2, 2, 2))),
}
_S = _sparse_csr(_matrix(4, 3, 0))


@pytest.mark.parametrize("name", CUSTOM_OPS)
def test_custom_ops_gradcheck_with_undefined_output_gradients(name):
    fn, inputs = CUSTOM_OPS[name]()
    assert torch.autograd.gradcheck(fn, inputs)
