"""utils.reverse_cuthill_mckee against a Python reference of the same rules and SciPy's
bandwidths; utils.sparse_permute against dense indexing and dense autograd."""
from collections import deque

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.csgraph as csgraph
import torch
from support.children import child_outcomes
from support.malformed import MALFORMED

from torchsparsegradutils.utils import reverse_cuthill_mckee, sparse_permute


def _reference_rcm(n, edges, symmetric=False):
    """The ordering csrc/rcm.c documents, written out plainly: neighbours of the graph of
    A + A^T (symmetric: A) less the diagonal; components from their node of least
    (degree, id), in that order; the root moved to a least-(degree, id) node of the last level while the search deepens
    (at most 16 times); neighbours numbered in (degree, id) order; reversed."""
    nbrs = [set() for _ in range(n)]
    for i, j in edges:
        if i != j:
            nbrs[i].add(j)
            if not symmetric:
                nbrs[j].add(i)
    adj = [sorted(s) for s in nbrs]
    deg = [len(a) for a in adj]
    numbered = [False] * n

    def levels(root):
        seen, level, out = {root}, [root], []
        while level:
            out.append(level)
            nxt = []
            for v in level:
                for w in adj[v]:
                    if w not in seen and not numbered[w]:
                        seen.add(w)
                        nxt.append(w)
            level = nxt
        return out

    order = []
    for s in sorted(range(n), key=lambda v: (deg[v], v)):
        if numbered[s]:
            continue
        root, lv = s, levels(s)
        for _ in range(16):
            if len(lv) <= 1:
                break
            x = min(lv[-1], key=lambda v: (deg[v], v))
            lx = levels(x)
            if len(lx) <= len(lv):
                break
            root, lv = x, lx
        numbered[root] = True
        queue, start = deque([root]), len(order)
        order.append(root)
        while queue:
            v = queue.popleft()
            new = sorted((w for w in adj[v] if not numbered[w]), key=lambda w: (deg[w], w))
            for w in new:
                numbered[w] = True
                queue.append(w)
                order.append(w)
        assert len(order) > start
    return order[::-1]


def _random_edges(n, nnz, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, n, (2, nnz), generator=g)


def _coo(idx, n, dtype=torch.float64):
    return torch.sparse_coo_tensor(idx, torch.rand(idx.shape[1], dtype=dtype), (n, n)).coalesce()


def _bandwidth(A, perm):
    """max |i - j| over the entries of A[perm][:, perm] (A a scipy matrix)."""
    B = A[perm][:, perm].tocoo()
    return int(np.abs(B.row - B.col).max()) if B.nnz else 0


def _grid(k, seed):
    """A k x k 5-point grid (COO, with its diagonal) whose nodes are numbered at random."""
    ij = torch.arange(k * k).reshape(k, k)
    e = torch.cat([torch.stack([ij[:, :-1].reshape(-1), ij[:, 1:].reshape(-1)], 1),
                   torch.stack([ij[:-1].reshape(-1), ij[1:].reshape(-1)], 1)])
    relabel = torch.randperm(k * k, generator=torch.Generator().manual_seed(seed))
    e = relabel[e].T
    return _coo(torch.cat([e, e.flip(0), torch.arange(k * k).repeat(2, 1)], 1), k * k)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("symmetric", [False, True])
def test_rcm_matches_reference(seed, symmetric):
    n = [1, 2, 7, 30, 64, 200][seed % 6]
    nnz = [0, 3, 10, 45, 150, 500][(seed * 5) % 6]
    idx = _random_edges(n, nnz, seed)
    A = _coo(idx, n)
    perm = reverse_cuthill_mckee(A, symmetric_mode=symmetric)
    assert perm.dtype == torch.int64 and perm.shape == (n,)
    assert torch.equal(perm, torch.tensor(_reference_rcm(n, A.indices().T.tolist(), symmetric), dtype=torch.int64))


@pytest.mark.parametrize("layout", ["coo", "coo_unsorted", "csr", "csc", "csr_int32"])
def test_rcm_layouts_agree(layout):
    idx = _random_edges(150, 600, 3)
    A = _coo(idx, 150)
    want = reverse_cuthill_mckee(A)
    if layout == "coo_unsorted":
        p = torch.randperm(A._nnz(), generator=torch.Generator().manual_seed(0))
        B = torch.sparse_coo_tensor(A.indices()[:, p], A.values()[p], A.shape)
    elif layout == "csr":
        B = A.to_sparse_csr()
    elif layout == "csc":
        B = A.to_sparse_csc()
    elif layout == "csr_int32":
        C = A.to_sparse_csr()
        B = torch.sparse_csr_tensor(C.crow_indices().int(), C.col_indices().int(), C.values(), C.shape)
    else:
        B = A
    assert torch.equal(reverse_cuthill_mckee(B), want)


def test_rcm_symmetrizes():
    """The default reads the graph of A + A^T: A and A^T give the same ordering, as does
    symmetric_mode on A + A^T."""
    A = _coo(_random_edges(120, 300, 5), 120)
    S = (A + A.t()).coalesce()
    want = reverse_cuthill_mckee(S, symmetric_mode=True)
    assert torch.equal(reverse_cuthill_mckee(A), want)
    assert torch.equal(reverse_cuthill_mckee(A.t().coalesce()), want)
    assert torch.equal(reverse_cuthill_mckee(S), want)


@pytest.mark.parametrize("k", [5, 17, 40])
def test_rcm_recovers_a_grid(k):
    """A randomly numbered k x k grid: RCM brings its bandwidth from about n down to the
    grid's own scale (at most 2k here), no wider than SciPy's ordering gives."""
    A = _grid(k, k)
    perm = reverse_cuthill_mckee(A)
    S = sp.csr_matrix((A.values().numpy(), A.indices().numpy()), shape=A.shape)
    ours, scipy_bw = _bandwidth(S, perm.numpy()), _bandwidth(S, csgraph.reverse_cuthill_mckee(S))
    assert ours <= 2 * k, (ours, k)
    assert ours <= scipy_bw, (ours, scipy_bw)
    assert _bandwidth(S, np.arange(k * k)) > ours            # the random numbering's is wider


@pytest.mark.parametrize("seed", range(4))
def test_rcm_bandwidth_against_scipy(seed):
    """Random sparse symmetric patterns with several components: our bandwidth within
    that of SciPy's ordering (its root is a least-degree node, ours pseudo-peripheral)
    plus a margin of a tenth."""
    n = 400
    A = _coo(_random_edges(n, 500 + 100 * seed, seed), n)
    S = sp.csr_matrix((A.values().numpy(), A.indices().numpy()), shape=A.shape)
    S = (S + S.T).tocsr()
    ours = _bandwidth(S, reverse_cuthill_mckee(A).numpy())
    assert ours <= 1.1 * _bandwidth(S, csgraph.reverse_cuthill_mckee(S, symmetric_mode=True))


def test_rcm_components_and_isolated_nodes():
    """Nodes without neighbours (self loops only) are numbered first, so they come last;
    every node its own component; an empty matrix."""
    n = 6
    A = _coo(torch.arange(n).repeat(2, 1), n)
    assert torch.equal(reverse_cuthill_mckee(A), torch.arange(n - 1, -1, -1))
    B = _coo(torch.tensor([[1, 2, 4], [2, 1, 4]]), n)           # the edge 1 - 2; 0, 3, 4, 5 alone
    assert torch.equal(reverse_cuthill_mckee(B), torch.tensor([2, 1, 5, 4, 3, 0]))
    E = torch.sparse_coo_tensor(torch.zeros(2, 0, dtype=torch.int64), torch.zeros(0), (0, 0))
    assert reverse_cuthill_mckee(E).shape == (0,)


def test_rcm_refuses_bad_input():
    A = _coo(_random_edges(5, 8, 0), 5)
    with pytest.raises(TypeError, match="sparse COO, CSR or CSC"):
        reverse_cuthill_mckee(A.to_dense())
    with pytest.raises(TypeError, match="sparse COO, CSR or CSC"):
        reverse_cuthill_mckee([[1]])
    with pytest.raises(ValueError, match="square"):
        reverse_cuthill_mckee(torch.sparse_coo_tensor(torch.tensor([[0], [1]]), torch.ones(1), (1, 3)))
    with pytest.raises(ValueError, match="2D"):
        reverse_cuthill_mckee(torch.stack([A, A]))


@pytest.mark.parametrize("bad", ["col_range", "col_negative", "ptr_order", "col_order"])
def test_rcm_malformed_structure(bad):
    """Indices PyTorch did not check are refused by the kernel's own check, naming the
    problem, and the arrays are left as they were."""
    crow, col = torch.tensor([0, 2, 3, 4]), torch.tensor([0, 2, 1, 0])
    if bad == "col_range":
        col[1] = 3
    elif bad == "col_negative":
        col[2] = -1
    elif bad == "ptr_order":
        crow[1] = 4
    else:
        col[:2] = torch.tensor([2, 0])
    A = torch.sparse_csr_tensor(crow, col, torch.ones(4), (3, 3), check_invariants=False)
    before = crow.clone(), col.clone()
    with pytest.raises(ValueError, match="column|row pointer|increasing"):
        reverse_cuthill_mckee(A)
    assert torch.equal(crow, before[0]) and torch.equal(col, before[1])


def test_malformed_structures_raise():
    """Every malformed structure of the shared set (square, COO and CSR, int32 and int64)
    ends in ValueError from both functions, in a child process (a crash fails the test),
    inputs unchanged."""
    calls = {"rcm": "reverse_cuthill_mckee(A)", "permute": "sparse_permute(A, torch.arange(A.shape[-2]))"}
    cases = {f"{fn}-{name}": f"A = {src}\ninputs = [A]\ncall = lambda: tsgu.utils.{call}"
             for fn, call in calls.items() for name, src in MALFORMED.items()}
    outcomes = child_outcomes(cases)
    wrong = {name: o for name, o in outcomes.items() if o[0] != "ValueError"}
    assert len(outcomes) == len(cases) and not wrong, wrong


def test_custom_op():
    A = _coo(_random_edges(40, 90, 6), 40).to_sparse_csr()
    args = (A.crow_indices(), A.col_indices(), 40, False)
    assert torch.equal(torch.ops.tsgu.rcm(*args), reverse_cuthill_mckee(A))
    torch.library.opcheck(torch.ops.tsgu.rcm.default, args)
    torch.library.opcheck(torch.ops.tsgu.rcm.default, (torch.zeros(1, dtype=torch.int32), torch.zeros(0, dtype=torch.int32),
                                                       0, True))


def test_rcm_input_unchanged_and_values_ignored():
    A = _coo(_random_edges(50, 200, 1), 50)
    idx, val = A.indices().clone(), A.values().clone()
    perm = reverse_cuthill_mckee(A)
    assert torch.equal(A.indices(), idx) and torch.equal(A.values(), val)
    zeros = torch.sparse_coo_tensor(A.indices(), torch.zeros_like(val), A.shape)
    assert torch.equal(reverse_cuthill_mckee(zeros), perm)


def test_rcm_thread_count():
    A = _coo(_random_edges(3000, 12000, 2), 3000)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = reverse_cuthill_mckee(A)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(reverse_cuthill_mckee(A), one)


# ------------------------------------------------------------------ sparse_permute
@pytest.mark.parametrize("layout,itype", [(torch.sparse_coo, torch.int64)] + [
    (layout, itype) for layout in (torch.sparse_csr, torch.sparse_csc) for itype in (torch.int32, torch.int64)])
@pytest.mark.parametrize("square", [True, False])
def test_permute_matches_dense(layout, itype, square):    # (PyTorch's COO indices are int64 only)
    g = torch.Generator().manual_seed(7)
    n, m = 9, 9 if square else 6
    D = torch.rand(n, m, generator=g, dtype=torch.float64) * (torch.rand(n, m, generator=g) < 0.35)
    A = D.to_sparse(layout=layout)
    if itype == torch.int32:
        A = _with_int32(A)
    perm = torch.randperm(n, generator=g)
    cperm = None if square else torch.randperm(m, generator=g).int()
    out = sparse_permute(A, perm, cperm)
    assert out.layout == layout and out.shape == (n, m)
    assert (out.indices() if layout == torch.sparse_coo else
            out.crow_indices() if layout == torch.sparse_csr else out.ccol_indices()).dtype == itype
    cols = perm if square else cperm.long()
    assert torch.equal(out.to_dense(), D[perm][:, cols])
    if layout == torch.sparse_coo:
        assert out.is_coalesced()
    else:                         # PyTorch's own invariant check passes
        kind = torch.sparse_csr_tensor if layout == torch.sparse_csr else torch.sparse_csc_tensor
        arrays = ((out.crow_indices(), out.col_indices()) if layout == torch.sparse_csr
                  else (out.ccol_indices(), out.row_indices()))
        kind(*arrays, out.values(), out.shape, check_invariants=True)


def _with_int32(A):
    if A.layout == torch.sparse_csr:
        return torch.sparse_csr_tensor(A.crow_indices().int(), A.col_indices().int(), A.values(), A.shape)
    return torch.sparse_csc_tensor(A.ccol_indices().int(), A.row_indices().int(), A.values(), A.shape)


@pytest.mark.parametrize("layout", [torch.sparse_coo, torch.sparse_csr])
def test_permute_gradient(layout):
    """The values' gradient against dense autograd of D[perm][:, perm], at A's entries."""
    g = torch.Generator().manual_seed(1)
    n = 8
    D = torch.rand(n, n, generator=g, dtype=torch.float64) * (torch.rand(n, n, generator=g) < 0.4)
    W = torch.rand(n, n, generator=g, dtype=torch.float64)
    perm = torch.randperm(n, generator=g)
    A = D.to_sparse(layout=layout).requires_grad_()
    (sparse_permute(A, perm).to_dense() * W).sum().backward()
    Dd = D.clone().requires_grad_()
    (Dd[perm][:, perm] * W).sum().backward()
    assert torch.allclose(A.grad.to_dense(), Dd.grad * (D != 0))


def test_permute_product_identity():
    """(A @ X)[perm] == sparse_permute(A, perm) @ X[perm], on an RCM ordering."""
    A = _coo(_random_edges(60, 240, 4), 60)
    X = torch.rand(60, 3, dtype=torch.float64)
    perm = reverse_cuthill_mckee(A)
    assert torch.allclose(torch.sparse.mm(A, X)[perm], torch.sparse.mm(sparse_permute(A, perm), X[perm]))


def test_permute_refuses_bad_permutations():
    A = _coo(_random_edges(4, 6, 0), 4)
    with pytest.raises(TypeError, match="int32 or int64"):
        sparse_permute(A, torch.arange(4.0))
    with pytest.raises(TypeError, match="int32 or int64"):
        sparse_permute(A, [0, 1, 2, 3])
    with pytest.raises(ValueError, match="shape"):
        sparse_permute(A, torch.arange(3))
    with pytest.raises(ValueError, match="permutation"):
        sparse_permute(A, torch.tensor([0, 1, 1, 3]))
    with pytest.raises(ValueError, match="permutation"):
        sparse_permute(A, torch.tensor([0, 1, 2, 4]))
    with pytest.raises(ValueError, match="permutation"):
        sparse_permute(A, torch.tensor([0, -1, 2, 3]))
    R = torch.sparse_coo_tensor(torch.tensor([[0], [1]]), torch.ones(1), (2, 3))
    with pytest.raises(ValueError, match="needs col_perm"):
        sparse_permute(R, torch.arange(2))
    with pytest.raises(TypeError, match="sparse COO, CSR or CSC"):
        sparse_permute(A.to_dense(), torch.arange(4))
