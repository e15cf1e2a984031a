"""Methods under test, the float64 reference, the correctness check and the timers.

Like _matrices.py this file needs torch only: the worker of the published
release loads it by path inside its own virtual environment, where
``import torchsparsegradutils`` is the release from the package registry.

A method is built from the inputs into a `Prepared`: the leaf tensors that
require grad, the function computing C from them, and how to read its gradient
w.r.t. A back as values on A's (coalesced, row-major) pattern.  A method may
carry a reason to skip its backward (e.g. PyTorch's COO backward would build a
dense n x m gradient of several GB).

Two timers: time_method times one method on its own loops; time_in_process times all
of a case's methods side by side in this process, after allocate_like_training, in
interleaved rounds, with each call's CPU time and minor page faults.
"""
import gc
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

import torch

GB = 1e9
# Skip limits, in bytes: a dense n x m operand, a densified gradient, the
# gather backward's nnz x p temporaries.  Above them a phase is recorded as skipped.
DENSE_LIMIT = 2.0 * GB
DENSIFY_LIMIT = 2.0 * GB
GATHER_LIMIT = 3.0 * GB


def set_limits(dense: float, densify: float, gather: float) -> None:
    """Change the skip limits (bytes); the quick mode lowers them."""
    global DENSE_LIMIT, DENSIFY_LIMIT, GATHER_LIMIT
    DENSE_LIMIT, DENSIFY_LIMIT, GATHER_LIMIT = dense, densify, gather


@dataclass
class Prepared:
    leaves: List[torch.Tensor]
    fn: Callable[..., torch.Tensor]
    grad_a_values: Callable[[Sequence[torch.Tensor]], torch.Tensor]
    bwd_skip: Optional[str] = None
    info: Dict[str, object] = field(default_factory=dict)


class Skip(Exception):
    """The whole method does not apply to (or does not fit) this case."""


def failure(e: Exception) -> Dict[str, str]:
    """How a method's exception is recorded: a skip (it does not apply, or PyTorch has
    no kernel for the dtype: 'unsupported'), or an error (reported, never fatal)."""
    if isinstance(e, Skip):
        return {"skip": str(e)}
    if isinstance(e, NotImplementedError):        # e.g. 16-bit CSR in torch.sparse.mm on CPU
        return {"skip": f"unsupported: {e}"}
    return {"error": f"{type(e).__name__}: {e}"}


# --------------------------------------------------------------------------- helpers

def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _dims(inp):
    shape = inp["shape"]
    b = shape[0] if len(shape) == 3 else 1
    return b, shape[-2], shape[-1]


def _global_rc(inp):
    """Global row / column of every stored entry, the batch laid out block-diagonally."""
    idx = inp["indices"]
    b, n, m = _dims(inp)
    if idx.shape[0] == 3:
        return idx[0] * n + idx[1], idx[0] * m + idx[2]
    return idx[0], idx[1]


def _values_on_pattern(g: torch.Tensor, inp) -> torch.Tensor:
    """A gradient w.r.t. A (sparse COO / CSR or dense) as values on A's pattern."""
    idx = inp["indices"]
    if g.layout == torch.strided:
        return g[tuple(idx)]
    if g.layout == torch.sparse_csr:
        A = inp["csr"]
        if g.values().numel() == inp["nnz"] and torch.equal(g.crow_indices().long(), A.crow_indices().long()) \
                and torch.equal(g.col_indices().long(), A.col_indices().long()):
            return g.values().reshape(-1)
        g = g.to_sparse_coo()
    g = g.coalesce()
    if g._nnz() == inp["nnz"] and torch.equal(g._indices(), idx):
        return g._values()
    return g.sparse_mask(inp["coo"]).coalesce()._values()


def _leaf(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone().requires_grad_(True) if t.layout == torch.strided else t.detach().requires_grad_(True)


# --------------------------------------------------------------------------- methods

def _sparse_mm_method(mod, layout):
    def build(inp):
        A = _leaf(inp[layout])
        B = _leaf(inp["B"])
        return Prepared([A, B], mod.sparse_mm, lambda g: _values_on_pattern(g[0], inp))
    return build


def _torch_sparse(layout):
    def build(inp):
        b, n, m = _dims(inp)
        if b > 1 and layout == "csr":
            raise Skip("torch.bmm has no batched-CSR @ dense")
        A = _leaf(inp[layout])
        B = _leaf(inp["B"])
        fn = torch.bmm if b > 1 else torch.sparse.mm
        dense_bytes = b * n * m * _itemsize(inp["dtype"])
        skip = None
        # PyTorch's COO backward (and bmm's) returns/builds the dense n x m gradient.
        if (layout == "coo" or b > 1) and dense_bytes > DENSIFY_LIMIT:
            skip = f"skipped: would allocate {dense_bytes / GB:.1f} GB (dense n x m gradient)"
        return Prepared([A, B], fn, lambda g: _values_on_pattern(g[0], inp), bwd_skip=skip)
    return build


def _dense(inp):
    b, n, m = _dims(inp)
    nbytes = b * n * m * _itemsize(inp["dtype"])
    if nbytes > DENSE_LIMIT:
        raise Skip(f"skipped: dense A would take {nbytes / GB:.1f} GB")
    A = inp["coo"].to_dense().requires_grad_(True)
    B = _leaf(inp["B"])
    fn = torch.bmm if b > 1 else torch.mm
    return Prepared([A, B], fn, lambda g: _values_on_pattern(g[0], inp))


class _GatherMM(torch.autograd.Function):
    """The published algorithm: forward torch.sparse.mm; backward
    grad_A = (G[row] * B[col]).sum(1) (nnz x p temporaries), grad_B = A^T @ G."""

    @staticmethod
    def forward(ctx, values, A2, B2):
        ctx.save_for_backward(A2, B2)
        return torch.sparse.mm(A2, B2)

    @staticmethod
    def backward(ctx, G):
        A2, B2 = ctx.saved_tensors
        row, col = A2._indices()
        grad_vals = (G.index_select(0, row) * B2.index_select(0, col)).sum(1)
        grad_B = torch.sparse.mm(A2.t(), G)
        return grad_vals, None, grad_B


def _gather(inp):
    b, n, m = _dims(inp)
    p = inp["p"]
    tmp = 3 * inp["nnz"] * p * _itemsize(inp["dtype"])
    skip = f"skipped: nnz x p temporaries would take {tmp / GB:.1f} GB" if tmp > GATHER_LIMIT else None
    row, col = _global_rc(inp)
    A2 = torch.sparse_coo_tensor(torch.stack([row, col]), inp["coo"]._values(), (b * n, b * m),
                                 is_coalesced=True)
    vals = _leaf(inp["coo"]._values())
    B = _leaf(inp["B"])

    def fn(values, B):
        A = torch.sparse_coo_tensor(A2._indices(), values, A2.shape, is_coalesced=True)
        C = _GatherMM.apply(values, A.detach(), B.reshape(b * m, p))
        return C.reshape(inp["G"].shape)
    return Prepared([vals, B], fn, lambda g: g[0], bwd_skip=skip)


def _torch_loop(inp):
    """Batched case only: a Python loop of torch.sparse.mm (CSR) over the items."""
    b, n, m = _dims(inp)
    if len(inp["shape"]) != 3:
        raise Skip("batched cases only")
    A = inp["csr"]
    items = [torch.sparse_csr_tensor(A.crow_indices()[i], A.col_indices()[i], A.values()[i], (n, m))
             .detach().requires_grad_(True) for i in range(b)]
    B = _leaf(inp["B"])

    def fn(*leaves):
        Bt = leaves[-1]
        return torch.stack([torch.sparse.mm(a, Bt[i]) for i, a in enumerate(leaves[:-1])])

    def grad_values(g):
        return torch.cat([_values_on_pattern_item(gi, A, i) for i, gi in enumerate(g[:-1])])
    return Prepared(items + [B], fn, grad_values)


def _values_on_pattern_item(g, A, i):
    if g.layout == torch.sparse_csr and g.values().numel() == A.col_indices().shape[1]:
        return g.values()
    d = g.to_dense()
    crow = A.crow_indices()[i].long()
    rows = torch.repeat_interleave(torch.arange(crow.numel() - 1), crow[1:] - crow[:-1])
    return d[rows, A.col_indices()[i].long()]


def methods_here(published: bool) -> Dict[str, Callable]:
    """Methods runnable in this process: ours + PyTorch baselines, or (published=True) the release."""
    import torchsparsegradutils as tsgu
    if published:
        return {"published COO": _sparse_mm_method(tsgu, "coo"),
                "published CSR": _sparse_mm_method(tsgu, "csr")}
    return {
        "ours COO": _sparse_mm_method(tsgu, "coo"),
        "ours CSR": _sparse_mm_method(tsgu, "csr"),
        "torch COO": _torch_sparse("coo"),
        "torch CSR": _torch_sparse("csr"),
        "torch loop": _torch_loop,
        "dense": _dense,
        "gather": _gather,
    }


# --------------------------------------------------------------------------- reference + check

def reference(inp) -> Dict[str, torch.Tensor]:
    """C, grad_A values on the pattern, grad_B: in float64, through index arithmetic and
    torch.sparse.mm on the block-diagonal 2D matrix, chunked so that no temporary is large."""
    b, n, m = _dims(inp)
    p = inp["p"]
    row, col = _global_rc(inp)
    vals = inp["coo"]._values().double()
    B = inp["B"].double().reshape(b * m, p)
    G = inp["G"].double().reshape(b * n, p)
    A2 = torch.sparse_coo_tensor(torch.stack([row, col]), vals, (b * n, b * m)).to_sparse_csr()
    At = torch.sparse_coo_tensor(torch.stack([col, row]), vals, (b * m, b * n)).coalesce().to_sparse_csr()
    C = torch.sparse.mm(A2, B).reshape(inp["G"].shape)
    gB = torch.sparse.mm(At, G).reshape(inp["B"].shape)
    gA = torch.empty(row.numel(), dtype=torch.float64)
    step = max(1, (1 << 23) // max(p, 1))
    for s in range(0, row.numel(), step):
        gA[s:s + step] = (G.index_select(0, row[s:s + step]) * B.index_select(0, col[s:s + step])).sum(1)
    return {"C": C, "gA": gA, "gB": gB}


def _rel_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    if ref.numel() == 0:
        return 0.0
    x = x.detach().to(torch.float64).reshape(ref.shape)
    scale = ref.abs().max().item() or 1.0
    return (x - ref).abs().max().item() / scale


# relative to the largest reference value: 16-bit results are rounded once (ours) or
# summed in their own precision (some PyTorch paths)
TOLERANCE = {torch.float64: 1e-10, torch.float32: 2e-4, torch.float16: 5e-3, torch.bfloat16: 3e-2}


def tolerance(dtype: torch.dtype) -> float:
    return TOLERANCE[dtype]


def check(prep: Prepared, inp, ref) -> Dict[str, object]:
    """One forward + backward against the reference: relative max errors and ok."""
    C = prep.fn(*prep.leaves)
    out = {"err_C": _rel_err(C, ref["C"])}
    if prep.bwd_skip is None:
        grads = torch.autograd.grad(C, prep.leaves, inp["G"])
        out["err_gA"] = _rel_err(prep.grad_a_values(grads), ref["gA"])
        out["err_gB"] = _rel_err(grads[-1], ref["gB"])
    tol = tolerance(inp["dtype"])
    out["ok"] = all(v <= tol for k, v in out.items() if k.startswith("err"))
    return out


# --------------------------------------------------------------------------- timing

def _stats(ts: List[float]) -> Dict[str, float]:
    return {"median_s": statistics.median(ts), "min_s": min(ts), "runs": len(ts)}


def time_method(prep: Prepared, G: torch.Tensor, reps: int, warmup: int = 1,
                budget_s: float = 0.3, max_reps: int = 30, cpu_time: bool = False) -> Dict[str, object]:
    """Median and min of forward, backward (grad_A + grad_B) and forward+backward.

    Forward is timed on its own loop; backward and forward+backward come from one
    loop of training steps (forward, then autograd.grad), each step split at the
    end of its forward.  At least `reps` runs per loop, more (up to `max_reps`)
    for cheap calls, so that a loop takes about `budget_s`.  Call after `check`,
    whose run is the first warm-up; `warmup` more steps follow it.  With cpu_time,
    the process's CPU time (all its threads) instead of the wall clock: on a machine
    shared with other work, what the call costs without the waits for a core."""
    fn, leaves = prep.fn, prep.leaves
    clock = time.process_time if cpu_time else time.perf_counter
    do_bwd = prep.bwd_skip is None
    t_step = 0.0
    for _ in range(warmup):
        t0 = clock()
        C = fn(*leaves)
        if do_bwd:
            torch.autograd.grad(C, leaves, G)
        t_step = clock() - t0
        del C
    n = reps if t_step <= 0 else int(min(max_reps, max(reps, budget_s / t_step)))
    res = {}
    ts = []
    for _ in range(n):
        t0 = clock()
        C = fn(*leaves)
        ts.append(clock() - t0)
        del C
    res["fwd"] = _stats(ts)
    if not do_bwd:
        res["bwd"] = res["fwdbwd"] = prep.bwd_skip
        return res
    tb, tfb = [], []
    for _ in range(n):
        t0 = clock()
        C = fn(*leaves)
        t1 = clock()
        grads = torch.autograd.grad(C, leaves, G)
        t2 = clock()
        tb.append(t2 - t1)
        tfb.append(t2 - t0)
        del C, grads
    res["bwd"] = _stats(tb)
    res["fwdbwd"] = _stats(tfb)
    return res


# --------------------------------------------------------------------------- in one process, side by side

# The sizes (MiB) of allocate_like_training's tensors, in the order made: two over 32 MiB,
# glibc's mmap ceiling (a block above it is always mapped fresh from the OS and unmapped on
# free), the rest below it (freed, they stay in the heap, mapped, for the next allocation).
WARM_SIZES_MIB = (40, 8, 0.25, 20, 1, 72, 3, 12, 0.5, 24, 2, 6)


def allocate_like_training(total_mb: float) -> Dict[str, float]:
    """Leave this process's allocator as a few training steps leave it: float32 tensors of
    the assorted WARM_SIZES_MIB, cycled until about `total_mb` MB are allocated, every page
    written; every other one freed and as much allocated again (holes of assorted sizes
    in the heap); then all freed.  Afterwards glibc's dynamic mmap threshold has risen to
    the largest block under 32 MiB that was freed, the heap is grown and fragmented, and
    blocks over 32 MiB still go to the OS and back on every allocation: a result that
    size page-faults again on each call, smaller ones come back from the heap already
    mapped.  A fresh process starts instead at a 128 KiB threshold and an empty heap."""
    t0 = time.perf_counter()
    sizes, total = [], 0.0
    while total < total_mb:
        mib = WARM_SIZES_MIB[len(sizes) % len(WARM_SIZES_MIB)]
        sizes.append(mib)
        total += mib * 1.048576
    live = [torch.ones(int(mib * (1 << 18))) for mib in sizes]      # ones: every page written
    for i in range(1, len(live), 2):
        live[i] = None
    refill = [torch.ones(int(mib * (1 << 18))) for mib in sizes[1::2]]
    del live, refill
    return {"allocated_mb": round((sum(sizes) + sum(sizes[1::2])) * 1.048576, 1), "largest_mib": max(sizes),
            "seconds": time.perf_counter() - t0}


def _usage():
    """(user CPU s, system CPU s, minor page faults) of this process so far, all its threads."""
    import resource
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime, r.ru_stime, r.ru_minflt


def _per_call(sums, n: int) -> Dict[str, float]:
    return {"user_s": sums[0] / n, "sys_s": sums[1] / n, "minflt": sums[2] / n}


def time_in_process(preps: Dict[str, Prepared], G: torch.Tensor, reps: int, warm_mb: float, warmup: int = 1,
                    budget_s: float = 1.0, max_reps: int = 9,
                    cpu_time: bool = False) -> Dict[str, object]:
    """Every method of a case side by side in this one process, as a training script runs
    them: after `check` (each method's first call), allocate_like_training(warm_mb) and
    `warmup` untimed forward + backward steps of each method in turn; then interleaved
    rounds: round r times method 1's forward, then its training step (forward, then
    autograd.grad, split at the end of the forward: backward and forward+backward, as
    time_method), then method 2's, ..., so that drift and other load hit every method
    alike.  At least `reps` rounds, more (up to `max_reps`) where a round is cheap, so
    that the rounds take about `budget_s`.  Per method: the medians and mins, and per
    call of each phase the process's user and system CPU time and minor page faults
    (getrusage over the same window as the clock: the call, not the freeing of its
    result).  Returns {"warm_up": ..., "rounds": n, "methods": {name: ...}}."""
    clock = time.process_time if cpu_time else time.perf_counter
    warm = allocate_like_training(warm_mb)
    t_round = 0.0
    for _ in range(warmup):
        t0 = clock()
        for prep in preps.values():
            C = prep.fn(*prep.leaves)
            if prep.bwd_skip is None:
                torch.autograd.grad(C, prep.leaves, G)
            del C
        t_round = clock() - t0
    n = reps if t_round <= 0 else int(min(max_reps, max(reps, budget_s / t_round)))
    ts = {name: {"fwd": [], "bwd": [], "fwdbwd": []} for name in preps}
    use = {name: {"fwd": [0.0, 0.0, 0], "fwdbwd": [0.0, 0.0, 0]} for name in preps}
    for _ in range(n):
        for name, prep in preps.items():
            fn, leaves = prep.fn, prep.leaves
            u0 = _usage()
            t0 = clock()
            C = fn(*leaves)
            t1 = clock()
            u1 = _usage()
            del C
            ts[name]["fwd"].append(t1 - t0)
            use[name]["fwd"] = [a + (b - c) for a, b, c in zip(use[name]["fwd"], u1, u0)]
            if prep.bwd_skip is not None:
                continue
            u0 = _usage()
            t0 = clock()
            C = fn(*leaves)
            t1 = clock()
            grads = torch.autograd.grad(C, leaves, G)
            t2 = clock()
            u1 = _usage()
            del C, grads
            ts[name]["bwd"].append(t2 - t1)
            ts[name]["fwdbwd"].append(t2 - t0)
            use[name]["fwdbwd"] = [a + (b - c) for a, b, c in zip(use[name]["fwdbwd"], u1, u0)]
    out = {}
    for name, prep in preps.items():
        res = {"fwd": _stats(ts[name]["fwd"]), "usage": {"fwd": _per_call(use[name]["fwd"], n)}}
        if prep.bwd_skip is None:
            res.update(bwd=_stats(ts[name]["bwd"]), fwdbwd=_stats(ts[name]["fwdbwd"]))
            res["usage"]["fwdbwd"] = _per_call(use[name]["fwdbwd"], n)
        else:
            res["bwd"] = res["fwdbwd"] = prep.bwd_skip
        out[name] = res
    return {"warm_up": warm, "rounds": n, "methods": out}


def interleaved(steps: Dict[str, Callable[[], object]], rounds: int, warm_mb: float, warmup: int = 1,
                cpu_time: bool = False, after: Optional[Callable[[str], None]] = None) -> Dict[str, object]:
    """Whole steps of several methods (e.g. a layer's training step) side by side in this
    process, as time_in_process times a Prepared's calls: allocate_like_training(warm_mb),
    `warmup` untimed rounds, then `rounds` rounds, each calling every step once, in turn.
    What a step returns is freed after its clock stops, and after(name) (e.g. an optimizer's
    update) runs then too, outside the timed window.  Per name: median, min and runs,
    and per step the process's user and system CPU time and minor page faults.  Returns
    {"warm_up": ..., "rounds": rounds, "methods": {name: ...}}."""
    clock = time.process_time if cpu_time else time.perf_counter
    warm = allocate_like_training(warm_mb)
    for _ in range(warmup):
        for name, step in steps.items():
            step()
            if after:
                after(name)
    ts = {name: [] for name in steps}
    use = {name: [0.0, 0.0, 0] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            u0 = _usage()
            t0 = clock()
            res = step()
            t1 = clock()
            u1 = _usage()
            del res
            if after:
                after(name)
            ts[name].append(t1 - t0)
            use[name] = [a + (b - c) for a, b, c in zip(use[name], u1, u0)]
    return {"warm_up": warm, "rounds": rounds,
            "methods": {name: dict(_stats(ts[name]), usage=_per_call(use[name], rounds)) for name in steps}}


# --------------------------------------------------------------------------- memory

def _status_kb(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def freeze_gc() -> None:
    """Collect, then move every live object to the permanent generation (gc.freeze), so
    that later collections skip what the imports made: once torchsparsegradutils has
    loaded torch._dynamo, each of peak_memory's collections takes about 0.25 s.  For the
    smoke mode's workers, where those collections would be most of the run."""
    gc.collect()
    gc.freeze()


def _trim():
    """Give freed memory back: the garbage, what the library keeps between calls (so that
    a peak measured from here counts our outputs and workspace as new, as in a fresh
    process), and glibc's free heap."""
    gc.collect()
    release = getattr(sys.modules.get("torchsparsegradutils"), "release_memory", None)
    if release is not None:            # (the published release keeps nothing)
        release()
    try:
        import ctypes
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def peak_memory(prep: Prepared, G: torch.Tensor) -> Dict[str, object]:
    """Peak resident memory of one forward + backward above what the process held before
    (inputs already built), with C and the gradients kept alive as a training step would.

    Call this in a fresh process started with a fixed glibc mmap threshold
    (MALLOC_MMAP_THRESHOLD_), so that large blocks go back to the OS when freed.
    The high-water mark is reset through /proc/self/clear_refs (Linux >= 4.0);
    without it, ru_maxrss minus a baseline is used, which can only over-report."""
    import resource

    fn, leaves = prep.fn, prep.leaves
    do_bwd = prep.bwd_skip is None
    C = fn(*leaves)                     # warm-up: lazy initialisation, thread pools
    if do_bwd:
        g = torch.autograd.grad(C, leaves, G)
        del g
    del C
    _trim()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        how = "VmHWM after clear_refs"
    except OSError:
        how = "ru_maxrss delta"
    base_kb = _status_kb("VmRSS")
    base_max = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    C = fn(*leaves)
    grads = torch.autograd.grad(C, leaves, G) if do_bwd else ()
    if how.startswith("VmHWM"):
        peak = (_status_kb("VmHWM") - base_kb) * 1024
    else:
        peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base_max) * 1024
    del C, grads
    return {"peak_bytes": peak, "how": how, "with_backward": do_bwd}


def necessary_bytes(inp) -> int:
    """Output + grad_B + grad_A values: what a fwd+bwd must hold at the end."""
    it = _itemsize(inp["dtype"])
    return inp["G"].numel() * it + inp["B"].numel() * it + inp["nnz"] * it


def env_threads(n: int) -> None:
    torch.set_num_threads(n)
    os.environ.setdefault("OMP_NUM_THREADS", str(n))
