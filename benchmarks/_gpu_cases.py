"""The cases of benchmarks/gpu.py: its graphs, its timer (CUDA events; perf_counter in the CPU
smoke run), the check of each method against its reference, and one function per op family
that adds the family's rows.

A row is one op (or layer) in one phase against its PyTorch (or PyG) counterpart:
``fwd`` the forward alone; ``fwd+bwd fresh`` forward and backward with the differentiable
operands cloned into new leaves every call (new index tensors: our structure caches miss,
as when a model rebuilds its sparse tensor each step); ``fwd+bwd same`` the same leaves
every call (the caches hit, as in a training loop over a fixed graph); ``step`` a layer's
training step (zero_grad, forward, loss, backward).  Before any timing each side runs
once and its output (and, for the backward phases, the gradient of every leaf) is
compared with the other side's.
"""
import copy
import math
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Optional, Tuple

import torch

import torchsparsegradutils as tsgu
from torchsparsegradutils import sparse_mm

TOL = 1e-4            # the largest relative difference (by norm) that passes a check, in float32
LAYER_TOL = 1e-3      # a layer's output and every parameter gradient (sums over millions of edges)
DENSE_GRAD_LIMIT = 2 ** 31   # bytes: a counterpart whose gradient of L is dense n x n is skipped above this


# --------------------------------------------------------------------------- graphs

def _ends(dev, n: int, deg: int, seed: int):
    """n*deg (first, second) endpoints, each drawn with weight rand^3 + 1e-3: hubs on both sides."""
    g = torch.Generator(device=dev).manual_seed(seed)
    w = torch.rand(n, device=dev, generator=g).pow(3) + 1e-3
    first = torch.multinomial(w, n * deg, replacement=True, generator=g)
    return first, torch.multinomial(w, n * deg, replacement=True, generator=g), g


def powerlaw(dev, n: int, deg: int, seed: int = 0) -> torch.Tensor:
    """A coalesced n x n COO matrix, about deg entries a row (fewer where draws repeat), skewed rows and columns."""
    cols, rows, g = _ends(dev, n, deg, seed)
    return torch.sparse_coo_tensor(torch.stack([rows, cols]), torch.rand(n * deg, device=dev, generator=g),
                                   (n, n)).coalesce()


def uniform(dev, n: int, deg: int, seed: int = 0) -> torch.Tensor:
    """A coalesced n x n COO matrix, deg uniformly random columns a row."""
    g = torch.Generator(device=dev).manual_seed(seed)
    rows = torch.arange(n, device=dev).repeat_interleave(deg)
    cols = torch.randint(0, n, (n * deg,), device=dev, generator=g)
    return torch.sparse_coo_tensor(torch.stack([rows, cols]), torch.rand(n * deg, device=dev, generator=g),
                                   (n, n)).coalesce()


def edges(dev, n: int, deg: int, seed: int = 0) -> torch.Tensor:
    """A power-law graph's edge_index (source, target), duplicates removed."""
    src, dst, _ = _ends(dev, n, deg, seed)
    return torch.unique(torch.stack([src, dst]), dim=1)


def lower_unit(A: torch.Tensor) -> torch.Tensor:
    """CSR: A's strictly lower entries scaled by 0.1, plus a unit diagonal (well conditioned)."""
    i, n = A.indices(), A.shape[0]
    low = i[0] > i[1]
    diag = torch.arange(n, device=A.device).repeat(2, 1)
    vals = torch.cat([A.values()[low] * 0.1, torch.ones(n, device=A.device)])
    return torch.sparse_coo_tensor(torch.cat([i[:, low], diag], 1), vals, A.shape).coalesce().to_sparse_csr()


# --------------------------------------------------------------------------- checks

def _coo(t: torch.Tensor):
    """A sparse tensor as coalesced COO; a dense one as it is."""
    t = t.detach()
    if t.layout == torch.strided:
        return t
    if t.layout == torch.sparse_csr:     # not to_sparse_coo(): it marks the result coalesced, and a CSR
        crow = t.crow_indices()          # product's columns need not be sorted within a row
        rows = torch.repeat_interleave(torch.arange(t.shape[0], device=t.device), crow.diff())
        t = torch.sparse_coo_tensor(torch.stack([rows, t.col_indices()]), t.values(), t.shape)
    return t.coalesce()


def rel_err(got: torch.Tensor, ref: torch.Tensor) -> float:
    """||got - ref|| / ||ref||, sparse or dense on either side: two sparse tensors on the union of
    their patterns; a sparse one against a dense one at the sparse one's entries; the stored values
    of one against a dense vector of the same entries (a scatter formulation's values leaf).
    Equal infinities (log-sum-exp of an empty row) count as equal."""
    g, r = _coo(got), _coo(ref)
    gs, rs = g.layout == torch.sparse_coo, r.layout == torch.sparse_coo
    if gs and rs:
        g, r = g.to(torch.float64), r.to(torch.float64)
        return ((g - r).coalesce().values().norm() / r.values().norm().clamp_min(1e-30)).item()
    if gs != rs:
        s, d = (g, r) if gs else (r, g)
        vals = d[tuple(s.indices())] if d.shape == s.shape else d
        g, r = (s.values(), vals) if gs else (vals, s.values())
    if g.shape != r.shape:
        return math.inf
    g, r = g.double(), r.double()
    same = g == r
    d = torch.where(same, 0.0, g - r)
    r = torch.where(same & torch.isinf(r), 0.0, r)
    return (d.norm() / r.norm().clamp_min(1e-30)).item()


def verdict(errs, tol: float) -> dict:
    worst = max(errs) if errs else 0.0
    return {"rel_err": worst, "tol": tol, "ok": bool(worst <= tol)}


# --------------------------------------------------------------------------- one side of a row

@dataclass
class Side:
    """A method: fn(*args) -> its output; `grad` the positions of args that are leaves in fwd+bwd."""
    fn: Callable
    args: tuple
    grad: Tuple[int, ...] = (0,)

    def leaves(self) -> tuple:
        """The args with the differentiable ones cloned into new leaves (new index tensors too)."""
        return tuple(a.detach().clone().requires_grad_() if i in self.grad else a for i, a in enumerate(self.args))


def widened(side: Side) -> Side:
    """side with its floating-point args in float64 (sparse ones too)."""
    return Side(side.fn, tuple(a.double() if a.is_floating_point() else a for a in side.args), side.grad)


_SEEDS = {}


def seed_for(out: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """(what to differentiate, its gradient): a dense output, or a sparse one's stored values; the
    gradient random but the same for the same shape, so both sides of a row get the same one."""
    vals = out if out.layout == torch.strided else out.coalesce().values() if out.layout == torch.sparse_coo \
        else out.values()
    key = (tuple(vals.shape), vals.device, vals.dtype)
    if key not in _SEEDS:
        g = torch.Generator().manual_seed(3)
        _SEEDS[key] = torch.randn(vals.shape, generator=g, dtype=vals.dtype).to(vals.device)
    return vals, _SEEDS[key]


def backward(out: torch.Tensor) -> None:
    vals, seed = seed_for(out)
    vals.backward(seed)


def run_grads(side: Side):
    """One fwd+bwd on fresh leaves: (output, the leaves' gradients)."""
    args = side.leaves()
    out = side.fn(*args)
    backward(out)
    return out, [args[i].grad for i in side.grad]


def step_fn(side: Side, fresh: bool) -> Callable:
    held = None if fresh else side.leaves()

    def run():
        args = side.leaves() if fresh else held
        if not fresh:
            for i in side.grad:
                args[i].grad = None
        backward(side.fn(*args))
    return run


# --------------------------------------------------------------------------- the timer and the rows

class Bench:
    """What every case shares: the device, the timer's settings, the sizes' divisor, and the rows."""

    def __init__(self, device: str, scale: int, reps_fwd: int, reps_step: int, warmup: int):
        self.dev = torch.device(device)
        self.cuda = self.dev.type == "cuda"
        self.scale, self.reps_fwd, self.reps_step, self.warmup = scale, reps_fwd, reps_step, warmup
        self.rows = []

    def n(self, full: int, least: int = 64) -> int:
        """A size of the full mode, divided by the mode's scale."""
        return max(full // self.scale, least)

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def time(self, fn: Callable, reps: int) -> dict:
        """Seconds per call: warm-up calls, then `reps` calls, each between two CUDA events
        (the device's time, queued work drained first); perf_counter on the CPU."""
        for _ in range(self.warmup):
            fn()
        self.sync()
        ts = []
        for _ in range(reps):
            if self.cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                end.synchronize()
                ts.append(start.elapsed_time(end) / 1e3)
            else:
                t0 = time.perf_counter()
                fn()
                ts.append(time.perf_counter() - t0)
        return {"median_s": statistics.median(ts), "min_s": min(ts), "reps": reps}

    def peak(self, fn: Callable) -> Optional[int]:
        """Device bytes allocated by one call beyond what was allocated before it (None on the CPU)."""
        if not self.cuda:
            return None
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        fn()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base

    def attempt(self, fn: Callable, reps: int, memory: bool = False) -> dict:
        """The timing of fn (and its peak memory), or {"error": why} where it fails."""
        try:
            t = self.time(fn, reps)
            if memory:
                t["peak_bytes"] = self.peak(fn)
            return t
        except Exception as e:  # noqa: BLE001 - recorded in the row, the run goes on
            return {"error": _why(e)}
        finally:
            if self.cuda:
                torch.cuda.empty_cache()

    def add(self, family: str, case: str, phase: str, against: str, ours: dict, theirs: dict, check: dict,
            **info) -> None:
        row = {"family": family, "case": case, "phase": phase, "against": against, "ours": ours,
               "theirs": theirs, "check": check, **info}
        o, t = ours.get("median_s"), theirs.get("median_s")
        row["ratio"] = t / o if o and t else None
        self.rows.append(row)
        def ms(r):
            return f"{r['median_s'] * 1e3:.3f} ms" if "median_s" in r else r.get("error") or r.get("skip")
        ok = "ok" if check.get("ok") else f"CHECK {check}"
        print(f"{case} [{phase}]: theirs {ms(theirs)}, ours {ms(ours)}"
              + (f", ratio {row['ratio']:.2f}x" if row["ratio"] else "") + f" ({ok})", flush=True)

    def op(self, family: str, case: str, against: str, ours: Side, theirs: Side, phases=("fwd", "fresh"),
           tol: float = TOL, theirs_skip: Optional[str] = None, check_float64: bool = False, **info) -> None:
        """The rows of one op on one input: each phase checked, then timed on both sides.
        theirs_skip: why the counterpart's backward is not run (its time and check are left out).
        check_float64: both sides checked on float64 copies of the operands (timed as given)."""
        co, ct = (widened(ours), widened(theirs)) if check_float64 else (ours, theirs)
        if "fwd" in phases:
            check = self.check(lambda: co.fn(*co.args), lambda: ct.fn(*ct.args),
                               lambda o, t: [rel_err(o, t)], tol)
            self.add(family, case, "fwd", against, self.attempt(lambda: ours.fn(*ours.args), self.reps_fwd),
                     self.attempt(lambda: theirs.fn(*theirs.args), self.reps_fwd), check, **info)
        for fresh in (True, False):
            if ("fresh" if fresh else "same") not in phases:
                continue
            if theirs_skip:         # our output after the backward against their forward's
                check = self.check(lambda: run_grads(co)[0], lambda: ct.fn(*ct.args),
                                   lambda o, t: [rel_err(o, t)], tol)
                check["note"] = "the output only (the counterpart's backward is not run)"
                theirs_t = {"skip": theirs_skip}
            else:
                check = self.check(lambda: run_grads(co), lambda: run_grads(ct),
                                   lambda o, t: [rel_err(o[0], t[0])] + [rel_err(a, b) for a, b in zip(o[1], t[1])],
                                   tol)
                theirs_t = self.attempt(step_fn(theirs, fresh), self.reps_step, memory=True)
            self.add(family, case, "fwd+bwd " + ("fresh" if fresh else "same"), against,
                     self.attempt(step_fn(ours, fresh), self.reps_step, memory=True), theirs_t, check, **info)

    def check(self, ours: Callable, theirs: Callable, compare: Callable, tol: float) -> dict:
        """Run ours, then theirs, then compare(our result, theirs) -> relative errors.  Where ours
        fails the check fails; where only theirs fails (out of memory, not supported on the
        device) the row says so and passes: ours is still timed."""
        try:
            try:
                got = ours()
            except Exception as e:  # noqa: BLE001 - recorded in the row, the run goes on
                return {"ok": False, "note": f"ours failed: {_why(e)}"}
            try:
                ref = theirs()
            except Exception as e:  # noqa: BLE001
                return {"ok": True, "note": f"not checked: the counterpart failed ({_why(e)})"}
            return verdict(compare(got, ref), tol)
        finally:
            if self.cuda:
                torch.cuda.empty_cache()


def _why(e: Exception) -> str:
    if isinstance(e, torch.OutOfMemoryError):
        return "out of memory"
    return f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:160]}"


# --------------------------------------------------------------------------- the op families

def spmm(b: Bench, graphs, ps, phases) -> None:
    """sparse_mm(CSR, dense) against torch.sparse.mm on the same CSR (cuSPARSE on the GPU)."""
    for gname, A in graphs:
        csr = A.to_sparse_csr()
        for p in ps:
            B = torch.randn(A.shape[1], p, device=b.dev)
            b.op("sparse_mm", f"spmm {gname} p={p}", "torch.sparse.mm, CSR", Side(sparse_mm, (csr, B), (0, 1)),
                 Side(torch.sparse.mm, (csr, B), (0, 1)), phases, nnz=A._nnz(), p=p)


def dropin(b: Bench, cases) -> None:
    """The drop-in case: a COO adjacency with learnable values through two hops of propagation,
    sparse_mm against torch.sparse.mm (whose COO backward forms a dense n x n gradient)."""
    for n, deg, p in cases:
        ei = edges(b.dev, n, deg)
        A = torch.sparse_coo_tensor(ei, torch.rand(ei.shape[1], device=b.dev), (n, n)).coalesce()
        X = torch.randn(n, p, device=b.dev)
        W = torch.randn(p, p, device=b.dev) / p ** 0.5
        two_hop = lambda mm: Side(lambda a: mm(a, mm(a, X) @ W), (A,))  # noqa: E731
        b.op("drop-in COO", f"2-hop A(A X W) n={n}", "torch.sparse.mm, COO", two_hop(sparse_mm),
             two_hop(torch.sparse.mm), ("fresh",), nnz=A._nnz(), p=p)


def spgemm(b: Bench, graphs) -> None:
    """sparse @ sparse: the CSR forward against torch.sparse.mm(CSR, CSR) (cuSPARSE SpGEMM), and
    COO @ COO forward + backward against torch.sparse.mm's."""
    for gname, A in graphs:
        csr = A.to_sparse_csr()
        b.op("sparse @ sparse", f"spgemm CSR {gname}", "torch.sparse.mm, CSR @ CSR", Side(sparse_mm, (csr, csr)),
             Side(torch.sparse.mm, (csr, csr)), ("fwd",), nnz=A._nnz())
        b.op("sparse @ sparse", f"spgemm COO {gname}", "torch.sparse.mm, COO @ COO", Side(sparse_mm, (A, A), (0, 1)),
             Side(torch.sparse.mm, (A, A), (0, 1)), ("fresh",), nnz=A._nnz())


def reduce(b: Bench, graphs, p: int) -> None:
    """sparse_mm(A, B, reduce) for mean and amax against scatter_reduce over A's entries."""
    for gname, A, phases in graphs:
        csr, idx, n = A.to_sparse_csr(), A.indices(), A.shape[0]
        B = torch.randn(A.shape[1], p, device=b.dev)
        rows = idx[0][:, None].expand(-1, p)
        for how in ("mean", "amax"):
            def scatter(vals, Bx, how=how):
                prod = vals[:, None] * Bx[idx[1]]
                if how == "mean":
                    out = torch.zeros(n, p, device=b.dev, dtype=vals.dtype)
                    return out.scatter_reduce(0, rows, prod, how, include_self=False)
                # amax from -inf, the empty rows' -inf then 0: with include_self=False scatter_reduce's
                # gradient still counts the untouched start value among the ties, so a maximum of exactly
                # 0 (an exactly-0 value of A: torch.rand draws one in 2^24) gave half its gradient to it
                out = torch.full((n, p), -math.inf, device=b.dev, dtype=vals.dtype)
                out = out.scatter_reduce(0, rows, prod, how, include_self=True)
                return torch.where(out == -math.inf, 0.0, out)
            # amax checked in float64: float32 products tie at a maximum tens of times in 10^7 outputs, and
            # scatter_reduce's gradient splits among tied entries where ours (as torch.sparse.mm's reduce)
            # gives it to one; float64 products of float32 operands are exact, and tie only where the
            # real products are equal
            b.op("reduce", f"reduce {how} {gname} p={p}", "scatter_reduce", Side(lambda a, x, h=how: sparse_mm(a, x, h),
                 (csr, B), (0, 1)), Side(scatter, (A.values(), B), (0, 1)), phases, check_float64=how == "amax",
                 nnz=A._nnz(), p=p)


def softmax(b: Bench, graphs) -> None:
    """Edge softmax over each row's stored entries (COO) against torch.sparse.softmax."""
    for gname, A, phases in graphs:
        b.op("softmax", f"softmax COO {gname}", "torch.sparse.softmax", Side(lambda a: tsgu.sparse_softmax(a, 1), (A,)),
             Side(lambda a: torch.sparse.softmax(a, 1), (A,)), phases, nnz=A._nnz())


def sampled_addmm(b: Bench, gname: str, A: torch.Tensor, k: int) -> None:
    """sampled_addmm on a CSR pattern against torch.sparse.sampled_addmm."""
    csr = A.to_sparse_csr()
    X = torch.randn(A.shape[0], k, device=b.dev)
    Y = torch.randn(k, A.shape[1], device=b.dev)
    b.op("sampled_addmm", f"sampled_addmm CSR {gname} k={k}", "torch.sparse.sampled_addmm",
         Side(tsgu.sampled_addmm, (csr, X, Y), (0, 1, 2)), Side(torch.sparse.sampled_addmm, (csr, X, Y), (0, 1, 2)),
         ("fwd", "fresh"), nnz=A._nnz(), p=k)


def logsumexp(b: Bench, gname: str, A: torch.Tensor) -> None:
    """sparse_logsumexp over each row's stored entries against a scatter formulation (amax, then
    index_add of the shifted exponentials), which forms nothing dense either."""
    idx, n = A.indices(), A.shape[0]

    def scatter_lse(v):
        m = torch.full((n,), -math.inf, device=b.dev).scatter_reduce(0, idx[0], v, "amax", include_self=True)
        m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
        return torch.zeros(n, device=b.dev).index_add(0, idx[0], (v - m[idx[0]]).exp()).log() + m
    b.op("sparse_logsumexp", f"logsumexp rows {gname}", "scatter formulation",
         Side(lambda a: tsgu.sparse_logsumexp(a, 1, include_zeros=False), (A,)), Side(scatter_lse, (A.values(),)),
         ("fwd", "fresh"), nnz=A._nnz())


def indexed(b: Bench, n: int, k: int, m: int, E: int) -> None:
    """gather_mm (a relation per row) and segment_mm (sorted rows, a length per relation) against
    torch.bmm on the weights gathered per row (an n x k x m temporary)."""
    x = torch.randn(n, k, device=b.dev)
    W = torch.randn(E, k, m, device=b.dev)
    idx = torch.randint(0, E, (n,), device=b.dev, generator=torch.Generator(device=b.dev).manual_seed(0))
    bmm = lambda a, w, i: torch.bmm(a[:, None, :], w[i]).squeeze(1)  # noqa: E731
    shape = f"{n}x{k}x{m} E={E}"
    b.op("gather_mm / segment_mm", f"gather_mm {shape}", "gathered bmm", Side(tsgu.gather_mm, (x, W, idx), (0, 1)),
         Side(bmm, (x, W, idx), (0, 1)), nnz=n, p=m)
    seglen = torch.bincount(idx, minlength=E)
    rel = torch.repeat_interleave(torch.arange(E, device=b.dev), seglen)
    b.op("gather_mm / segment_mm", f"segment_mm {shape}", "gathered bmm", Side(tsgu.segment_mm, (x, W, seglen), (0, 1)),
         Side(lambda a, w: bmm(a, w, rel), (x, W), (0, 1)), nnz=n, p=m)


def trisolve(b: Bench, gname: str, A: torch.Tensor, p: int) -> None:
    """The lower triangular solve L X = B (CSR, unit diagonal) against torch.triangular_solve, whose
    gradient of L is a dense n x n tensor: its backward runs only where that stays under 2 GiB."""
    L = lower_unit(A)
    B = torch.randn(A.shape[0], p, device=b.dev)
    n = A.shape[0]
    dense = n * n * 4
    skip = None if dense <= DENSE_GRAD_LIMIT else f"its gradient of L is dense n x n ({dense / 2 ** 30:.0f} GiB)"
    b.op("triangular solve", f"trisolve lower CSR {gname} p={p}", "torch.triangular_solve",
         Side(lambda low, x: tsgu.sparse_triangular_solve(low, x, upper=False), (L, B), (0, 1)),
         Side(lambda low, x: torch.triangular_solve(x, low, upper=False).solution, (L, B), (0, 1)),
         tol=1e-3, theirs_skip=skip, nnz=L._nnz(), p=p)


# --------------------------------------------------------------------------- layers

def layers(b: Bench, cases) -> None:
    """One training step (zero_grad, forward, square().mean(), backward) of each layer, ours against
    PyG's with the same weights (PyG's state_dict loaded into ours), and each step's peak memory."""
    try:
        import torch_geometric.nn as pyg
    except ImportError:
        print("torch_geometric is not installed (the bench extra): no layer rows", flush=True)
        return
    import torchsparsegradutils.nn as tnn
    for n, deg, f in cases:
        ei = edges(b.dev, n, deg)
        x = torch.randn(n, f, device=b.dev, generator=torch.Generator(device=b.dev).manual_seed(1))
        torch.manual_seed(0)
        mlp = torch.nn.Sequential(torch.nn.Linear(f, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64))
        pairs = (("GCNConv", pyg.GCNConv(f, 64), tnn.GCNConv(f, 64)),
                 ("SAGEConv mean", pyg.SAGEConv(f, 64), tnn.SAGEConv(f, 64)),
                 ("GATConv 8x8", pyg.GATConv(f, 8, heads=8), tnn.GATConv(f, 8, heads=8)),
                 ("GINConv", pyg.GINConv(copy.deepcopy(mlp)), tnn.GINConv(copy.deepcopy(mlp))))
        for name, theirs, ours in pairs:
            theirs, ours = theirs.to(b.dev), ours.to(b.dev)
            ours.load_state_dict(theirs.state_dict())
            steps = {}
            for side, layer in (("ours", ours), ("theirs", theirs)):
                def step(layer=layer):
                    layer.zero_grad(set_to_none=True)
                    out = layer(x, ei)
                    out.square().mean().backward()
                    return out
                steps[side] = step
            def grads(side, layer):
                return lambda: (steps[side](), {k: p.grad for k, p in layer.named_parameters()})
            check = b.check(grads("ours", ours), grads("theirs", theirs), lambda o, t: [rel_err(o[0], t[0])] +
                            [rel_err(o[1][k], g) for k, g in t[1].items()], LAYER_TOL)
            b.add("layers", f"{name} n={n} E={ei.shape[1]} f={f}", "step", "PyG",
                  b.attempt(steps["ours"], b.reps_step, memory=True),
                  b.attempt(steps["theirs"], b.reps_step, memory=True), check, nnz=ei.shape[1], p=f)
