"""Cases, methods, references and the worker of the gather_mm / segment_mm,
sparse_logsumexp, sparse_mm reduce, sparse_softmax and sparse @ sparse benchmarks
(benchmarks/indexed_matmul.py, benchmarks/sparse_logsumexp.py, benchmarks/reduce.py,
benchmarks/sparse_softmax.py, benchmarks/spgemm.py).

Like _harness.py this file needs torch only, and runs as a subprocess worker:
``python -I benchmarks/_ops_worker.py`` reads one JSON job on stdin and prints
one JSON line, with the system interpreter (ours, the plain-PyTorch
formulation, and peak memory in a fresh process) or with the interpreter of the
published release's venv (whose ``torchsparsegradutils`` shares our import name).
It loads _harness.py by file path, so nothing of this repository is on sys.path.

Job keys: phases (a list of "time": each method checked, then timed on its own, one after
another; "memory": each method's peak memory; "in-process": all methods of a case checked,
then timed side by side in this process, interleaved round by round after a warm-up that
allocates like a training step, _harness.time_in_process; the smoke mode's one worker
takes all three), cases (each: id, op, params), methods, reps, warmup (default 1),
warm_mb (the in-process warm-up's allocation), threads, smoke (freeze the garbage collector's
generations after the imports: _harness.freeze_gc), and repo (put first on sys.path: the repository whose
``torchsparsegradutils`` is "ours"; absent for the published release).  Methods: "ours", "ours COO" (logsumexp on a torch COO tensor),
"published" (whatever ``torchsparsegradutils`` this interpreter imports) and
"plain" (the same op in plain PyTorch: torch.bmm over padded segments for the
products, scatter_reduce / scatter_add for log-sum-exp); for sparse_mm_reduce,
"ours" and "torch CSR" (torch.sparse.mm(A, B, reduce)) on a leaf CSR tensor, and
"scatter" (index_select of B's rows times the values, scatter_reduce by row: what
GNN code falls back to); for sparse_softmax, "ours" on a COO tensor built from the
values by our sparse_coo_tensor, "ours torch COO" by torch.sparse_coo_tensor, "ours CSR"
on our sparse_csr_tensor (with (nnz, H) values of several heads, "ours" is a SparseCSR's), "torch COO" (torch.sparse.softmax on torch's COO tensor) and "scatter" (PyG's softmax: scatter max, exp, scatter sum, divide);
for spgemm (C = A @ B, both sparse, the output C's values), "ours" and "torch COO" on
leaf COO tensors, "ours CSR" and "torch CSR" on leaf CSR tensors (PyTorch's CSR @ CSR
has no backward; its rows' columns come unsorted) and "scipy" (``A @ B`` of SciPy's
CSR matrices, one thread, forward only, columns unsorted).
"""
import importlib.util
import json
import os
import sys
import traceback

import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def _load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


H = _load("_harness")
M = _load("_matrices")


# --------------------------------------------------------------------------- inputs

def make_inputs(op: str, params: dict) -> dict:
    """Seeded inputs of one case.  Products: a (N, D1), b (R, D1, D2), relations
    uniform over R (gather: idx_b; segment: seglen_a); G the output gradient.
    Log-sum-exp: an n x m COO/CSR pattern with `per_row` entries per row at uniform
    random columns (coalesced), values N(0, 1), float32."""
    gen = torch.Generator().manual_seed(0)
    if op == "sparse_mm_reduce":
        return _reduce_inputs(params, gen)
    if op == "sparse_softmax":
        return _softmax_inputs(params, gen)
    if op == "spgemm":
        return _spgemm_inputs(params, gen)
    if op in ("gather_mm", "segment_mm"):
        N, R, D1, D2 = params["N"], params["R"], params["D1"], params["D2"]
        rel = torch.randint(0, R, (N,), generator=gen)
        inp = {"a": torch.randn(N, D1, generator=gen), "b": torch.randn(R, D1, D2, generator=gen) / D1 ** 0.5,
               "G": torch.randn(N, D2, generator=gen)}
        if op == "gather_mm":
            inp["idx_b"] = rel
        else:
            inp["seglen_a"] = torch.bincount(rel, minlength=R)
            inp["rel_sorted"] = torch.repeat_interleave(torch.arange(R), inp["seglen_a"])
        return inp
    n, m, k = params["n"], params["m"], params["per_row"]
    rows = torch.arange(n).repeat_interleave(k)
    cols = torch.randint(0, m, (n * k,), generator=gen)
    A = torch.sparse_coo_tensor(torch.stack([rows, cols]), torch.randn(n * k, generator=gen), (n, m)).coalesce()
    C = A.to_sparse_csr()
    out_numel = {"rows": n, "cols": m, "bidir": 2 * max(n, m)}[params["mode"]]
    return {"coo": A, "crow": C.crow_indices(), "col": C.col_indices(), "values": A.values(),
            "G": torch.randn(out_numel, generator=gen).reshape(2, -1) if params["mode"] == "bidir"
            else torch.randn(out_numel, generator=gen)}


def _reduce_inputs(params: dict, gen: torch.Generator) -> dict:
    """sparse_mm reduce: an n x n pattern of _matrices ("uniform" or "powerlaw", per_row
    entries per row on average), values N(0, 1), B and G (n, p), float32."""
    idx, shape = M.pattern(M.MatrixSpec(params["graph"], params["n"], params["n"], per_row=params["per_row"]))
    values = torch.randn(idx.shape[1], generator=gen)
    csr = torch.sparse_coo_tensor(idx, values, shape, is_coalesced=True).to_sparse_csr()
    return {"csr": csr, "rows": idx[0], "cols": idx[1], "values": values,
            "B": torch.randn(shape[1], params["p"], generator=gen), "G": torch.randn(shape[0], params["p"], generator=gen)}


def _softmax_inputs(params: dict, gen: torch.Generator) -> dict:
    """sparse_softmax: an n x n pattern of _matrices ("uniform" or "powerlaw", per_row
    entries per row on average), values N(0, 1) and the output's gradient G (nnz,), or
    (nnz, H) for `heads` H > 1 (multi-head attention scores), float32; `group` the row
    (dim 1) or column (dim 0) of every entry."""
    idx, shape = M.pattern(M.MatrixSpec(params["graph"], params["n"], params["n"], per_row=params["per_row"]))
    per_entry = (idx.shape[1], params["heads"]) if params.get("heads", 1) > 1 else (idx.shape[1],)
    values = torch.randn(per_entry, generator=gen)
    csr = torch.sparse_coo_tensor(idx, torch.ones(idx.shape[1]), shape, is_coalesced=True).to_sparse_csr()
    return {"indices": idx, "shape": shape, "crow": csr.crow_indices(), "col": csr.col_indices(), "values": values,
            "group": idx[0] if params["dim"] == 1 else idx[1], "G": torch.randn(per_entry, generator=gen)}


def _spgemm_inputs(params: dict, gen: torch.Generator) -> dict:
    """sparse @ sparse, float32 values N(0, 1): "uniform"/"powerlaw", A @ A of an n x n
    pattern of _matrices (per_row entries per row on average); "bow", a bag-of-words
    input X (n documents x `features`, per_row words each) times a weight W (features x
    `out`, `density` of it stored).  G is the gradient of C's values (nnz(C),)."""
    if params["graph"] == "bow":
        n, f = params["n"], params["features"]
        a_idx = M._coalesce2(torch.arange(n).repeat_interleave(params["per_row"]),
                             torch.randint(0, f, (n * params["per_row"],), generator=gen), n, f)
        w_mask = torch.rand(f, params["out"], generator=gen) < params["density"]
        b_idx, a_shape, b_shape = w_mask.nonzero().t().contiguous(), (n, f), (f, params["out"])
    else:
        a_idx, a_shape = M.pattern(M.MatrixSpec(params["graph"], params["n"], params["n"], per_row=params["per_row"]))
        b_idx, b_shape = a_idx, a_shape
    A = torch.sparse_coo_tensor(a_idx, torch.randn(a_idx.shape[1], generator=gen), a_shape, is_coalesced=True)
    B = torch.sparse_coo_tensor(b_idx, torch.randn(b_idx.shape[1], generator=gen), b_shape, is_coalesced=True)
    A_csr, B_csr = A.to_sparse_csr(), B.to_sparse_csr()
    nnz_c = torch.sparse.mm(A_csr, B_csr).values().numel()          # the structural product's size
    return {"A": A, "B": B, "A_csr": A_csr, "B_csr": B_csr, "G": torch.randn(nnz_c, generator=gen)}


def necessary_bytes(op: str, params: dict, inp: dict) -> int:
    """Output + gradients: what a forward+backward must hold at its end (for amax/amin
    also the arg of each output element, int32: the one temporary they need)."""
    if op == "sparse_mm_reduce":
        arg = inp["G"].numel() if params["reduce"] in ("amax", "amin") else 0
        return 4 * (inp["G"].numel() + inp["values"].numel() + inp["B"].numel() + arg)
    if op in ("gather_mm", "segment_mm"):
        return 4 * (inp["G"].numel() + inp["a"].numel() + inp["b"].numel())
    if op == "spgemm":      # C as CSR: values, int64 row pointers and columns; both values gradients
        return 12 * inp["G"].numel() + 8 * (inp["A"].shape[0] + 1) + 4 * (inp["A"]._nnz() + inp["B"]._nnz())
    return 4 * (inp["G"].numel() + inp["values"].numel())


# --------------------------------------------------------------------------- methods

def _leaf(t):
    return t.detach().clone().requires_grad_(True)


def _plain_padded(a, b, rel_sorted, perm, R):
    """out[i] = a[i] @ b[rel(i)] by torch.bmm over the groups padded to the longest one:
    rows sorted by relation (perm; None when a already is), scattered into (R, L, D1)."""
    counts = torch.bincount(rel_sorted, minlength=R)
    L = int(counts.max()) if rel_sorted.numel() else 0
    start = torch.cumsum(counts, 0) - counts
    pos = torch.arange(rel_sorted.numel()) - start[rel_sorted]
    a_sorted = a if perm is None else a.index_select(0, perm)
    padded = a.new_zeros(R, L, a.shape[1]).index_put((rel_sorted, pos), a_sorted)
    out_sorted = torch.bmm(padded, b)[rel_sorted, pos]
    if perm is None:
        return out_sorted
    return torch.zeros_like(out_sorted).index_copy(0, perm, out_sorted)


def _plain_gather(a, b, idx):
    perm = torch.argsort(idx, stable=True)
    return _plain_padded(a, b, idx.index_select(0, perm), perm, b.shape[0])


def _plain_lse(values, group, ngroups, full):
    """lse per group with `full - count` zeros per group, max-shifted, by scatter ops."""
    shift = torch.full((ngroups,), float("-inf")).scatter_reduce(0, group, values.detach(), "amax")
    count = torch.bincount(group, minlength=ngroups)
    shift = torch.where(count < full, shift.clamp(min=0), shift)
    shift = torch.where(shift.isfinite(), shift, torch.zeros_like(shift))
    s = torch.zeros(ngroups, dtype=values.dtype).scatter_add(0, group, (values - shift[group]).exp())
    return shift + (s + (full - count) * (-shift).exp()).log()


def _scatter_reduce(values, B, rows, cols, n, reduce):
    """A @ B with reduce, the scatter formulation: the nnz x p products of the entries with
    their rows of B, reduced by row (a row without entries stays 0)."""
    P = values.unsqueeze(1) * B.index_select(0, cols)
    out = torch.zeros(n, B.shape[1], dtype=P.dtype)
    return out.scatter_reduce(0, rows.unsqueeze(1).expand(-1, B.shape[1]), P, reduce, include_self=False)


def _scatter_softmax(v, group, ngroups):
    """PyG's softmax in plain PyTorch: the group max (scatter_reduce amax) gathered back,
    exp, the group sum (scatter_add) gathered back, divide; v (nnz,) or (nnz, H), each
    head on its own as PyG's index broadcast does."""
    at = group.view(-1, *([1] * (v.dim() - 1))).expand(v.shape)
    out_shape = (ngroups, *v.shape[1:])
    mx = torch.zeros(out_shape, dtype=v.dtype).scatter_reduce(0, at, v.detach(), "amax", include_self=False)
    e = (v - mx.index_select(0, group)).exp()
    s = torch.zeros(out_shape, dtype=v.dtype).scatter_add(0, at, e) + 1e-16
    return e / s.index_select(0, group)


def _prepare_softmax(method: str, params: dict, inp: dict):
    """The values of the softmax of each row (dim 1) or column (dim 0) of a leaf values
    tensor's sparse matrix, in its coalesced entry order."""
    idx, shape, dim = inp["indices"], inp["shape"], params["dim"]
    if method == "scatter":
        fn = lambda v: _scatter_softmax(v, inp["group"], shape[1 - dim])  # noqa: E731
        return H.Prepared([_leaf(inp["values"])], fn, lambda g: g[0])
    coo = lambda v: torch.sparse_coo_tensor(idx, v, shape, is_coalesced=True)  # noqa: E731
    if inp["values"].dim() == 2:       # heads: ours on a SparseCSR with (nnz, H) values; torch's hybrid COO
        if method == "ours":
            import torchsparsegradutils as tsgu
            S = tsgu.SparseCSR(inp["crow"], inp["col"], inp["values"], shape)
            fn = lambda v: tsgu.sparse_softmax(S._replace(values=v), dim).values  # noqa: E731
        elif method == "torch COO":
            hybrid = (*shape, inp["values"].shape[1])
            fn = lambda v: torch.sparse.softmax(  # noqa: E731
                torch.sparse_coo_tensor(idx, v, hybrid, is_coalesced=True), dim).values()
        else:
            raise H.Skip("(nnz, H) values: ours on a SparseCSR only")
        return H.Prepared([_leaf(inp["values"])], fn, lambda g: g[0])
    if method in ("ours", "ours CSR", "ours torch COO"):
        import torchsparsegradutils as tsgu
        if method == "ours":           # our constructor: its backward hands the values gradient through
            fn = lambda v: tsgu.sparse_softmax(tsgu.sparse_coo_tensor(idx, v, shape, is_coalesced=True),  # noqa: E731
                                               dim).values()
        elif method == "ours torch COO":   # torch's constructor, whose backward masks the gradient
            fn = lambda v: tsgu.sparse_softmax(coo(v), dim).values()  # noqa: E731
        else:
            fn = lambda v: tsgu.sparse_softmax(tsgu.sparse_csr_tensor(inp["crow"], inp["col"], v, shape),  # noqa: E731
                                               dim).values()
    elif method == "torch COO":
        fn = lambda v: torch.sparse.softmax(coo(v), dim).values()  # noqa: E731
    else:
        raise H.Skip(f"no method {method} for sparse_softmax")
    return H.Prepared([_leaf(inp["values"])], fn, lambda g: g[0])


def _prepare_reduce(method: str, params: dict, inp: dict):
    reduce, n, B = params["reduce"], inp["G"].shape[0], _leaf(inp["B"])
    if method == "scatter":
        fn = lambda v, B: _scatter_reduce(v, B, inp["rows"], inp["cols"], n, reduce)  # noqa: E731
        return H.Prepared([_leaf(inp["values"]), B], fn, lambda g: list(g))
    if method == "ours":
        import torchsparsegradutils as tsgu
        fn = lambda A, B: tsgu.sparse_mm(A, B, reduce)  # noqa: E731
    elif method == "torch CSR":
        fn = lambda A, B: torch.sparse.mm(A, B, reduce)  # noqa: E731
    else:
        raise H.Skip(f"no method {method} for sparse_mm_reduce")
    return H.Prepared([inp["csr"].detach().requires_grad_(True), B], fn, lambda g: [g[0].values(), g[1]])


def _prepare_spgemm(method: str, params: dict, inp: dict):
    """C = A @ B's values from leaf sparse tensors (the gradients: their values')."""
    values = lambda g: [g[0].coalesce().values() if g[0].layout == torch.sparse_coo else g[0].values(),  # noqa: E731
                        g[1].coalesce().values() if g[1].layout == torch.sparse_coo else g[1].values()]
    if method == "scipy":
        import numpy as np
        import scipy.sparse as sp
        csr = [sp.csr_matrix((X.values().numpy(), X.col_indices().numpy(), X.crow_indices().numpy()), shape=X.shape)
               for X in (inp["A_csr"], inp["B_csr"])]
        fn = lambda *_: torch.from_numpy(np.asarray((csr[0] @ csr[1]).data))  # noqa: E731
        return H.Prepared([], fn, values, bwd_skip="SciPy has no gradients", info={"unordered": True})
    csr = method in ("ours CSR", "torch CSR")
    leaves = [inp["A_csr" if csr else "A"].detach().requires_grad_(True),
              inp["B_csr" if csr else "B"].detach().requires_grad_(True)]
    if method in ("ours", "ours CSR"):
        import torchsparsegradutils as tsgu
        return H.Prepared(leaves, lambda A, B: tsgu.sparse_mm(A, B).values(), values)
    if method == "torch COO":
        return H.Prepared(leaves, lambda A, B: torch.sparse.mm(A, B).values(), values,
                          bwd_skip=params.get("torch_coo_backward_skip"))
    if method == "torch CSR":
        return H.Prepared([X.detach() for X in leaves], lambda A, B: torch.sparse.mm(A, B).values(), values,
                          bwd_skip="PyTorch's CSR @ CSR has no backward", info={"unordered": True})
    raise H.Skip(f"no method {method} for spgemm")


def prepare(method: str, op: str, params: dict, inp: dict):
    """A harness Prepared: the leaves, the function of them, and the gradients to check."""
    if op == "sparse_mm_reduce":
        return _prepare_reduce(method, params, inp)
    if op == "spgemm":
        return _prepare_spgemm(method, params, inp)
    if op == "sparse_softmax":
        return _prepare_softmax(method, params, inp)
    if op in ("gather_mm", "segment_mm"):
        a, b = _leaf(inp["a"]), _leaf(inp["b"])
        groups = inp["idx_b"] if op == "gather_mm" else inp["seglen_a"]
        if method in ("ours", "published"):
            import torchsparsegradutils as tsgu
            f = getattr(tsgu, op)
            fn = lambda a, b: f(a, b, groups)  # noqa: E731
        elif method == "plain":
            fn = ((lambda a, b: _plain_gather(a, b, groups)) if op == "gather_mm"
                  else (lambda a, b: _plain_padded(a, b, inp["rel_sorted"], None, b.shape[0])))
        else:
            raise H.Skip(f"no method {method} for {op}")
        return H.Prepared([a, b], fn, lambda g: g)
    mode, (n, m) = params["mode"], inp["coo"].shape
    vals = _leaf(inp["values"])
    if method == "plain":
        rows, cols = inp["coo"].indices()

        def fn(v):
            if mode == "bidir":
                G = max(n, m)
                padded = torch.full((2, G), float("-inf"))
                return padded.index_put((torch.tensor([0]), torch.arange(m)), _plain_lse(v, cols, m, n)) \
                    .index_put((torch.tensor([1]), torch.arange(n)), _plain_lse(v, rows, n, m))
            return _plain_lse(v, rows, n, m) if mode == "rows" else _plain_lse(v, cols, m, n)
        return H.Prepared([vals], fn, lambda g: g[0])
    import torchsparsegradutils as tsgu
    if method == "ours":
        build = lambda v: tsgu.sparse_csr_tensor(inp["crow"], inp["col"], v, (n, m))  # noqa: E731
    elif method in ("ours COO", "published"):
        build = lambda v: torch.sparse_coo_tensor(inp["coo"].indices(), v, (n, m), is_coalesced=True)  # noqa: E731
    else:
        raise H.Skip(f"no method {method} for {op}")

    def fn(v):
        S = build(v)
        if mode == "bidir":
            return tsgu.sparse_bidir_logsumexp(S, output_layout="padded")
        return tsgu.sparse_logsumexp(S, 1 if mode == "rows" else 0)
    return H.Prepared([vals], fn, lambda g: g[0])


# --------------------------------------------------------------------------- reference + check

def reference(op: str, params: dict, inp: dict) -> dict:
    """Output and gradients in float64: per-relation products on masked rows (a loop
    over R, for the reference only); log-sum-exp from its definition with scatter ops."""
    if op == "sparse_mm_reduce":
        if params["reduce"] in ("amax", "amin"):
            return _arg_reference(inp, params["reduce"])
        v, B = inp["values"].double().requires_grad_(True), inp["B"].double().requires_grad_(True)
        out = _scatter_reduce(v, B, inp["rows"], inp["cols"], inp["G"].shape[0], params["reduce"])
        return {"out": out.detach(), "grads": list(torch.autograd.grad(out, (v, B), inp["G"].double()))}
    if op == "spgemm":
        return _spgemm_reference(inp)
    if op == "sparse_softmax":
        v = inp["values"].double().requires_grad_(True)
        out = _scatter_softmax(v, inp["group"], inp["shape"][1 - params["dim"]])
        return {"out": out.detach(), "grads": list(torch.autograd.grad(out, v, inp["G"].double()))}
    if op in ("gather_mm", "segment_mm"):
        rel = inp["idx_b"] if op == "gather_mm" else inp["rel_sorted"]
        a, b, G = inp["a"].double(), inp["b"].double(), inp["G"].double()
        out, ga, gb = torch.zeros(a.shape[0], b.shape[2], dtype=torch.float64), torch.zeros_like(a), \
            torch.zeros_like(b)
        for r in range(b.shape[0]):
            rows = (rel == r).nonzero().squeeze(1)
            out[rows] = a[rows] @ b[r]
            ga[rows] = G[rows] @ b[r].t()
            gb[r] = a[rows].t() @ G[rows]
        return {"out": out, "grads": [ga, gb]}
    v = inp["values"].double().requires_grad_(True)
    rows, cols = inp["coo"].indices()
    n, m = inp["coo"].shape
    mode = params["mode"]

    def lse(group, ngroups, full):
        mx = torch.full((ngroups,), float("-inf"), dtype=torch.float64).scatter_reduce(0, group, v.detach(), "amax")
        mx = torch.where(torch.bincount(group, minlength=ngroups) < full, mx.clamp(min=0), mx)
        s = torch.zeros(ngroups, dtype=torch.float64).scatter_add(0, group, (v - mx[group]).exp())
        return mx + (s + (full - torch.bincount(group, minlength=ngroups)) * (-mx).exp()).log()
    if mode == "bidir":
        out = torch.full((2, max(n, m)), float("-inf"), dtype=torch.float64)
        out = out.index_put((torch.tensor([0]), torch.arange(m)), lse(cols, m, n))
        out = out.index_put((torch.tensor([1]), torch.arange(n)), lse(rows, n, m))
    else:
        out = lse(rows, n, m) if mode == "rows" else lse(cols, m, n)
    G = inp["G"].double()
    (g,) = torch.autograd.grad(out, v, G)
    return {"out": out.detach(), "grads": [g]}


def _arg_reference(inp: dict, reduce: str) -> dict:
    """amax / amin in float64 from the entry each output element takes: the first of its
    row (in entry order) whose float32 product is the extreme one, as the methods compare
    float32 products (in float64 two products a float32 rounding makes equal would differ)."""
    rows, cols, n = inp["rows"], inp["cols"], inp["G"].shape[0]
    P = inp["values"].unsqueeze(1) * inp["B"].index_select(0, cols)            # float32, nnz x p
    idx = rows.unsqueeze(1).expand_as(P)
    best = torch.zeros(n, P.shape[1]).scatter_reduce(0, idx, P, reduce, include_self=False)
    entry = torch.arange(P.shape[0]).unsqueeze(1).expand_as(P)
    hit = torch.where(P == best.index_select(0, rows), entry, P.shape[0])
    win = torch.full(best.shape, P.shape[0]).scatter_reduce(0, idx, hit, "amin")   # first winning entry
    has = win < P.shape[0]
    e, t = win[has], has.nonzero()[:, 1]
    v, B, G = inp["values"].double(), inp["B"].double(), inp["G"].double()[has]
    out = torch.zeros(best.shape, dtype=torch.float64)
    out[has] = v[e] * B[cols[e], t]
    gv = torch.zeros_like(v).index_add_(0, e, G * B[cols[e], t])
    gB = torch.zeros_like(B).index_put_((cols[e], t), G * v[e], accumulate=True)
    return {"out": out, "grads": [gv, gB]}


def _spgemm_reference(inp: dict) -> dict:
    """C's values (rows in order, columns increasing) and the values gradients in float64,
    from the list of every product A[i,j] B[j,c] (index arithmetic alone)."""
    (ri, rj), (bj, bc) = inp["A"].indices(), inp["B"].indices()
    a, b, m = inp["A"].values().double(), inp["B"].values().double(), inp["B"].shape[1]
    ptr = torch.searchsorted(bj, torch.arange(inp["B"].shape[0] + 1))        # B's row pointers
    counts = ptr[rj + 1] - ptr[rj]
    e = torch.repeat_interleave(torch.arange(rj.numel()), counts)            # A's entry of each product
    f = torch.arange(e.numel()) - (torch.cumsum(counts, 0) - counts)[e] + ptr[rj][e]   # B's entry
    key, where = torch.unique(ri[e] * m + bc[f], return_inverse=True)
    out = torch.zeros(key.numel(), dtype=torch.float64).index_add_(0, where, a[e] * b[f])
    g = inp["G"].double()[where]
    return {"out": out, "grads": [torch.zeros_like(a).index_add_(0, e, b[f] * g),
                                  torch.zeros_like(b).index_add_(0, f, a[e] * g)]}


def _rel_err(x, ref):
    x = x.detach().double().reshape(ref.shape)
    finite = ref.isfinite()
    if not torch.equal(finite, x.isfinite()):
        return float("inf")
    scale = ref[finite].abs().max().item() if finite.any() else 1.0
    return (x[finite] - ref[finite]).abs().max().item() / (scale or 1.0) if finite.any() else 0.0


def check(prep, inp, ref) -> dict:
    """Relative errors of the output and (where the method has a backward) the gradients;
    an output whose entries come in another order (info "unordered") is compared sorted."""
    out = prep.fn(*prep.leaves)
    if prep.info.get("unordered"):
        res = {"err_out": _rel_err(out.detach().double().sort().values, ref["out"].sort().values)}
    else:
        res = {"err_out": _rel_err(out, ref["out"])}
    grads = [] if prep.bwd_skip else prep.grad_a_values(torch.autograd.grad(out, prep.leaves, inp["G"]))
    grads = grads if isinstance(grads, (list, tuple)) else [grads]
    for i, (g, r) in enumerate(zip(grads, ref["grads"])):
        res[f"err_grad{i}"] = _rel_err(g, r)
    res["ok"] = all(v <= 1e-4 for k, v in res.items() if k.startswith("err"))
    return res


# --------------------------------------------------------------------------- worker

def _fail(row: dict, e: Exception) -> None:
    if isinstance(e, H.Skip):
        row["skip"] = str(e)
    else:
        row["error"] = f"{type(e).__name__}: {e}"
        row["traceback"] = traceback.format_exc(limit=3)


def one_by_one(job: dict, case: dict, inp: dict, ref, phases) -> list:
    """Each method on its own, one after another: checked and timed ("time"), its peak
    memory ("memory"); a row per method."""
    rows = []
    for name in job["methods"]:
        row = {"case": case["id"], "method": name}
        try:
            prep = prepare(name, case["op"], case["params"], inp)
            if "time" in phases:
                row["check"] = check(prep, inp, ref)
                row["timing"] = H.time_method(prep, inp["G"], job["reps"], warmup=job.get("warmup", 1),
                                              budget_s=1.0, max_reps=9, cpu_time=job.get("cpu_time", False))
            if "memory" in phases:
                row["memory"] = H.peak_memory(prep, inp["G"])
                row["memory"]["necessary_bytes"] = necessary_bytes(case["op"], case["params"], inp)
            del prep
        except Exception as e:  # noqa: BLE001 - reported, not hidden
            _fail(row, e)
        rows.append(row)
        print(json.dumps({"progress": row}), file=sys.stderr, flush=True)
    return rows


def side_by_side(job: dict, case: dict, inp: dict, ref) -> list:
    """All methods of the case in this process: each checked, then timed side by side
    (_harness.time_in_process); a row per method, everything under its "in_process"."""
    rows, preps = {}, {}
    for name in job["methods"]:
        rows[name] = {"case": case["id"], "method": name, "in_process": {}}
        try:
            prep = prepare(name, case["op"], case["params"], inp)
            rows[name]["in_process"]["check"] = check(prep, inp, ref)
            preps[name] = prep
        except Exception as e:  # noqa: BLE001 - reported, not hidden
            _fail(rows[name]["in_process"], e)
    if preps:
        try:
            t = H.time_in_process(preps, inp["G"], job["reps"], job["warm_mb"], warmup=job.get("warmup", 1),
                                  cpu_time=job.get("cpu_time", False))
            for name, res in t["methods"].items():
                rows[name]["in_process"].update(res, rounds=t["rounds"], warm_up=t["warm_up"])
        except Exception as e:  # noqa: BLE001 - reported, not hidden
            for name in preps:
                _fail(rows[name]["in_process"], e)
    del preps
    for row in rows.values():
        print(json.dumps({"progress": row}), file=sys.stderr, flush=True)
    return list(rows.values())


def main() -> None:
    job = json.loads(sys.stdin.read())
    H.env_threads(job["threads"])
    if job.get("repo"):        # ours: this repository's package, not an installed one
        sys.path.insert(0, job["repo"])
    import torchsparsegradutils as tsgu
    if job.get("smoke"):
        H.freeze_gc()
    phases = set(job["phases"])
    out = {"module_file": tsgu.__file__, "torch": torch.__version__, "results": []}
    for case in job["cases"]:
        inp = make_inputs(case["op"], case["params"])
        ref = reference(case["op"], case["params"], inp) if phases & {"time", "in-process"} else None
        if phases & {"time", "memory"}:
            out["results"] += one_by_one(job, case, inp, ref, phases)
        if "in-process" in phases:
            out["results"] += side_by_side(job, case, inp, ref)
        del inp, ref
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
