"""One hygiene sweep over every public op and surface (registry.OPS: the ops, SparseCSR and
its to_torch, the nn layers, the distribution, the encoder and the custom operators called
directly; ones this build lacks are skipped):
inputs unchanged, reference counts stable over many calls, in-place edits between
forward and backward detected (or harmless), the same bits for 1 and 2 threads (16-bit
values too, where an op takes them), and malformed structure a ValueError, never a
crash (run in a child process)."""
import contextlib
import gc
import json
import os
import sys
from dataclasses import replace

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from support.checks import num_threads
from support.children import SANITIZED, child_outcomes, run_child
from support.registry import HYPERSPARSE, OP_IDS, OPS, malformed_cases, run_case, small

from torchsparsegradutils import _C

INPLACE = "modified by an inplace operation"
def _snapshot(tensors):
    return [(t.clone(), t.stride(), t.is_neg()) for t in tensors]


def _same(t, snap):
    value, stride, neg = snap
    return t.dtype == value.dtype and t.stride() == stride and t.is_neg() == neg and torch.equal(t, value)


def _params(pairs):
    """pytest params (op, x) with readable ids."""
    return [pytest.param(op, x, id=f"{op.name}-{x}") for op, x in pairs]


UNCHANGED = _params((op, layout) for op in OPS for layout in ("csr", "coo_uncoalesced", "coo_sliced", "dense")
                    if layout in op.layouts)


@pytest.mark.parametrize("op,layout", UNCHANGED)
@pytest.mark.parametrize("bmode", ["contig", "neg"])
def test_inputs_unchanged(op, layout, bmode):
    op.fn()
    case = op.make(small(op, layout=layout, bmode=bmode))
    inputs = list(case.leaves.values()) + list(case.structure)
    before = _snapshot(inputs)
    run_case(case)
    assert all(_same(t, s) for t, s in zip(inputs, before)), "an input was modified"


@pytest.mark.parametrize("op", OPS, ids=OP_IDS)
def test_reference_counts_stable(op):
    op.fn()
    case = op.make(small(op))
    leaves = [t.requires_grad_() for t in case.leaves.values()]
    watched = leaves + list(case.structure)

    def step():
        for t in leaves:
            t.grad = None
        out = case.run(*leaves)
        outs = out if isinstance(out, tuple) else (out,)
        sum(o.sum() for o in outs).backward()

    for _ in range(3):                                  # warm caches
        step()
    gc.collect()
    # every object alive now is frozen: the collections and the censuses below see only
    # what the steps made (rather than the whole test session's heap, each time)
    gc.freeze()
    try:
        refs = [sys.getrefcount(t) for t in watched]
        step()                                          # what a step keeps (a cache's entry)
        gc.collect()
        tensors = sum(type(o) is torch.Tensor for o in gc.get_objects())
        for _ in range(50):                             # a leak per step shows after one
            step()
        gc.collect()
        assert [sys.getrefcount(t) for t in watched] == refs
        assert sum(type(o) is torch.Tensor for o in gc.get_objects()) <= tensors
    finally:
        gc.unfreeze()


def _grads(case, requires, a_leaf=False, edit=None):
    """Forward, optional in-place edit (x3) of the named leaf, backward.  Returns
    the gradients of the leaves that require grad (and of A when a_leaf, made a
    leaf from values that do not require grad)."""
    leaves = {k: t.detach().clone().requires_grad_(k in requires) for k, t in case.leaves.items()}
    args = list(leaves.values())
    first = case.build(args[0]) if case.build else args[0]
    if a_leaf:
        first.requires_grad_()
    out = case.apply(first, *args[1:])
    outs = out if isinstance(out, tuple) else (out,)
    if edit is not None:
        with torch.no_grad():
            leaves[edit].mul_(3)
    sum((o * torch.linspace(-1, 2, o.numel(), dtype=o.dtype).reshape(o.shape)).sum() for o in outs).backward()
    grads = {k: t.grad for k, t in leaves.items() if k in requires}
    if a_leaf:
        grads["A"] = first.grad.to_dense()
    return grads


def _raises_or_matches(case, requires, a_leaf, edit):
    """The contract of an in-place edit: autograd's version-counter error, or
    exactly the gradients of the unedited inputs; never gradients of edited ones."""
    clean = _grads(case, requires, a_leaf)
    try:
        edited = _grads(case, requires, a_leaf, edit)
    except RuntimeError as e:
        assert INPLACE in str(e) or "inplace" in str(e), e
        return "raised"
    assert clean.keys() == edited.keys()
    for k in clean:
        assert torch.equal(clean[k], edited[k]), f"gradient of {k} computed from the edited {edit}"
    return "matched"


@pytest.mark.parametrize("op,leaf", _params((op, leaf) for op in OPS for leaf in op.make(small(op)).leaves))
def test_inplace_edit_between_forward_and_backward(op, leaf):
    """Every leaf requires grad; one is edited after forward.  Where the backward
    reads it (op.must_raise) the edit must raise; elsewhere it may also be harmless."""
    op.fn()
    case = op.make(small(op))
    if leaf in op.must_raise:
        with pytest.raises(RuntimeError, match=INPLACE):
            _grads(case, list(case.leaves), edit=leaf)
    else:
        _raises_or_matches(case, list(case.leaves), False, leaf)


# how A is made from a values tensor that does NOT require grad (finding 3, second bullet)
CONSTRUCTORS = {
    "coo_coalesced_flag": dict(layout="coo"),          # rebuilt with is_coalesced=True
    "coo_uncoalesced": dict(layout="coo_uncoalesced"),
    "csr_torch": dict(layout="csr", ours=False),
    "csr_ours": dict(layout="csr", ours=True),
}


def _needs_grad(op, a_leaf):
    """What requires grad besides A's values: the op's other inputs, or A as a leaf."""
    return "A_leaf" if a_leaf else "others" if len(op.make(small(op)).leaves) > 1 else None


@pytest.mark.parametrize("op,grad_of", _params((op, _needs_grad(op, a_leaf)) for op in OPS if op.sparse_input
                                               for a_leaf in (False, True) if _needs_grad(op, a_leaf)))
@pytest.mark.parametrize("ctor", sorted(CONSTRUCTORS))
def test_edit_of_values_that_do_not_require_grad(op, grad_of, ctor):
    """A built from values that need no gradient; B (or A itself, as a leaf) does.
    Editing the values after forward must raise or leave every gradient as it
    was for the unedited values."""
    op.fn()
    case = op.make(small(op, **CONSTRUCTORS[ctor]))
    requires = [k for k in case.leaves if k != "values"]
    _raises_or_matches(case, requires, grad_of == "A_leaf", "values")


# op.large's dtype, and the 16-bit dtypes of the ops that take them
BITS = _params((op, str(dtype).split(".")[-1]) for op in OPS
               for dtype in (op.large.dtype,) + tuple(d for d in op.dtypes if d.itemsize == 2))


@contextlib.contextmanager
def kernel_threads(t: int):
    """Our kernels on t threads, PyTorch's own ops on one.  The kernels take their thread
    count from torch.get_num_threads() at each call (README, Threads); PyTorch's ops take
    theirs from ATen, which that Python name does not reach.  Yields the counts handed out,
    so that a test can check the kernels asked."""
    asked = []

    def ours():
        asked.append(t)
        return t
    with num_threads(1), pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch, "get_num_threads", ours)
        yield asked


# PyTorch's dense matrix products on 1 and 2 threads (op.dense_products): MKL's float64
# results differ by 3e-14 to 7e-13 on Intel hosts (AMD ones happen to agree)
DENSE_PRODUCT_TOL = {torch.float64: 1e-12, torch.float32: 1e-5}


@pytest.mark.parametrize("op,dtype", BITS)
def test_same_bits_for_1_and_2_threads(op, dtype):
    """op.large is big enough that every kernel splits its work across two threads.

    The promise is our kernels': the same bits for any thread count.  An op with
    dense_products (the nn layers) also runs PyTorch's dense matrix products (its linear
    maps: the forward x W^T, and the weight gradient, a sum over every node), whose bits
    are PyTorch's (MKL's, on Intel hosts) and may change with the thread count.  For those,
    PyTorch's ops stay on one thread while only our kernels are given 1 and then 2 threads
    (kernel_threads), so every output and gradient is still compared bit for bit and any
    difference is ours; then the whole op on 1 and 2 threads of PyTorch's too agrees within
    DENSE_PRODUCT_TOL of each tensor's largest magnitude."""
    _check_same_bits(op, dtype)


def _check_same_bits(op, dtype):
    op.fn()
    case = op.make(replace(op.large, dtype=getattr(torch, dtype)))
    threads = kernel_threads if op.dense_products else num_threads
    results = []
    for t in (1, 2):
        with threads(t) as asked:
            results.append(run_case(case))
        assert asked is None or t in asked, "the kernels never asked for their thread count"
    (out1, grads1), (out2, grads2) = results
    assert all(torch.equal(x, y) for x, y in zip(out1, out2))
    assert grads1.keys() == grads2.keys()
    assert all(torch.equal(grads1[k], grads2[k]) for k in grads1)
    if op.dense_products:
        with num_threads(2):
            out, grads = run_case(case)
        for got, want in list(zip(out, out1)) + [(grads[k], grads1[k]) for k in grads1]:
            tol = DENSE_PRODUCT_TOL[want.dtype]
            torch.testing.assert_close(got, want, rtol=tol, atol=tol * float(want.abs().max()))


class _ThreadDependentProducts(TorchDispatchMode):
    """PyTorch's dense matrix products as MKL computes them on an Intel host: their float64
    bits change with ATen's thread count (here by one unit in the last place on 2)."""
    PRODUCTS = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in self.PRODUCTS and torch._C.get_num_threads() > 1:
            out = out * (1 + torch.finfo(out.dtype).eps)
        return out


@pytest.mark.parametrize("op", [op for op in OPS if op.dense_products], ids=lambda op: op.name)
def test_same_bits_check_holds_where_pytorchs_products_depend_on_threads(op):
    """The check above on an Intel-like host (simulated on any): it passes for the layers,
    while comparing them bit for bit with PyTorch's own thread count changed would fail."""
    op.fn()
    with _ThreadDependentProducts():
        _check_same_bits(op, "float64")
        case = op.make(replace(op.large, dtype=torch.float64))
        with num_threads(1):
            out1, _ = run_case(case)
        with num_threads(2):
            out2, _ = run_case(case)
    assert not all(torch.equal(x, y) for x, y in zip(out1, out2))


PORTABLE = [p for p in BITS if p.values[0].own_kernels]
_PORTABLE_CHILD = """
import sys
from dataclasses import replace
sys.path.insert(0, {tests!r})
from support.registry import OPS_BY_NAME, run_case
assert tsgu._C.simd() == "portable", tsgu._C.simd()
results = {{}}
for name, dtype in {pairs!r}:
    op = OPS_BY_NAME[name]
    results[name, dtype] = run_case(op.make(replace(op.large, dtype=getattr(torch, dtype))))
torch.save(results, {path!r})
"""


@pytest.fixture(scope="session")
def portable_results(tmp_path_factory):
    """Every case of test_portable_kernels_agree with the portable kernels (TSGU_PORTABLE=1),
    all in one child process: {(op name, dtype): (outputs, gradients)}."""
    path = str(tmp_path_factory.mktemp("portable") / "portable.pt")
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))       # where support/ is
    pairs = [(op.name, dtype) for op, dtype in (p.values for p in PORTABLE)]
    r = run_child(_PORTABLE_CHILD.format(tests=tests, pairs=pairs, path=path), env={"TSGU_PORTABLE": "1"},
                  timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    return torch.load(path)


@pytest.mark.skipif(_C.simd() == "portable", reason="these kernels are the portable ones already")
@pytest.mark.xdist_group("portable")        # one worker runs the session's child process
@pytest.mark.parametrize("op,dtype", PORTABLE)
def test_portable_kernels_agree(portable_results, op, dtype):
    """The portable kernels (what an x86-64 processor without AVX2 runs; TSGU_PORTABLE=1
    there) give the AVX2 kernels' results within the op's tolerance, on op.large."""
    op.fn()
    out_p, grads_p = portable_results[op.name, dtype]
    out, grads = run_case(op.make(replace(op.large, dtype=getattr(torch, dtype))))
    tol = op.tol[getattr(torch, dtype)]
    for x, y in zip(out, out_p):
        torch.testing.assert_close(y, x, **tol)
    assert grads.keys() == grads_p.keys()
    for k in grads:
        torch.testing.assert_close(grads_p[k], grads[k], **tol)


# every case on both routes: the C kernels, and the PyTorch-ops one that devices without
# our kernels take (forced on CPU here)
PATHS = {"C": False, "torch_ops": True}
MALFORMED_IDS = [(op, f"{name}-{path}") for op in OPS for name in sorted(malformed_cases(op)) for path in PATHS]


@pytest.fixture(scope="session")
def malformed_outcomes():
    """Every available op's malformed cases, run in child processes once per session."""
    cases = {f"{op.name}/{name}-{path}": f"tsgu._backends.force_torch_ops = {forced}\n{src}"
             for op in OPS if op.available() is not None
             for name, src in malformed_cases(op).items() for path, forced in PATHS.items()}
    return child_outcomes(cases)


def test_child_runner_reports_each_outcome():
    """The runner itself: a crash is reported and the cases after it still run."""
    outcomes = child_outcomes({
        "ok": "inputs = []\ncall = lambda: None",
        "crash": "import os\ninputs = []\ncall = os.abort",
        "error": "inputs = []\ncall = lambda: int('x')",
        "modified": "t = torch.zeros(2)\ninputs = [t]\ncall = lambda: t.add_(1)",
    })
    assert {k: v[0] for k, v in outcomes.items()} == {
        "ok": "OK", "crash": "CRASH", "error": "ValueError", "modified": "MODIFIED"}


@pytest.mark.xdist_group("malformed")       # one worker runs the session's child processes
@pytest.mark.parametrize("op,name", _params(MALFORMED_IDS))
def test_malformed_structure_is_value_error(malformed_outcomes, op, name):
    op.fn()
    outcome, message = malformed_outcomes[f"{op.name}/{name}"]
    assert outcome == "ValueError", f"{outcome}: {message}"
    match = op.malformed_match
    assert match in message, f"{match!r} not in {message!r}"


REFUSE_HALF = _params((op, str(dtype).split(".")[-1]) for op in OPS if op.dtype_error is not None
                      for dtype in (torch.float16, torch.bfloat16) if dtype not in op.dtypes)


@pytest.mark.parametrize("op,dtype", REFUSE_HALF)
def test_16_bit_values_refused_where_unsupported(op, dtype):
    """An op without 16-bit kernels says so with an error naming the dtypes it takes."""
    op.fn()
    case = op.make(small(op, dtype=getattr(torch, dtype)))
    error, match = op.dtype_error
    with pytest.raises(error, match=match):
        case.run(*case.leaves.values())


# ---------------------------------------------------------------- hypersparse inputs
def test_every_op_has_a_hypersparse_case_or_a_reason():
    """registry.HYPERSPARSE names every op of the registry: calls, or why none applies."""
    assert sorted(HYPERSPARSE) == sorted(OP_IDS)
    assert all(isinstance(v, tuple) and v or isinstance(v, str) and v for v in HYPERSPARSE.values())


HYPERSPARSE_ROWS = (0, 5, -1)        # A's non-empty rows (-1: the last), in each batch item
# (op, call number, batched); an op that takes no batch runs 2D only
HYPERSPARSE_IDS = [(op, i, batched) for op in OPS if isinstance(HYPERSPARSE[op.name], tuple)
                   for i in range(len(HYPERSPARSE[op.name])) for batched in ((False, True) if op.batched else (False,))]

_HYPERSPARSE_CHILD = """
import json, resource, torch

M = 3

def kept(n):
    return [r % n for r in {rows!r}] if n > len({rows!r}) else list(range(n))

def coo(n, batched):
    rows = kept(n)
    items = (0, 1) if batched else (0,)
    idx = [[k, r, c] for k in items for q, r in enumerate(rows) for c in range(q % 2, 1 + 2 * (q % 2))]
    idx = torch.tensor(idx).t()[0 if batched else 1:].contiguous()
    v = torch.linspace(-1.5, 2.0, idx.shape[1], dtype=torch.float64).requires_grad_()
    shape = ((2,) if batched else ()) + (n, M)
    return idx, v, torch.sparse_coo_tensor(idx, v, shape, is_coalesced=True)

def run(src, n, batched):
    idx, v, A = coo(n, batched)
    gen = torch.Generator().manual_seed(0)
    leaves = []
    def leaf(t):
        t = t.detach().requires_grad_()
        leaves.append(t)
        return t
    ns = dict(globals(), A=A, idx=idx, v=v, n=n, m=M, lead=(2,) if batched else (), leaf=leaf,
              rnd=lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64))
    out = eval(src, ns)
    if out.layout == torch.sparse_coo:
        out = out.coalesce()
        index, vals = out.indices(), out.values()
    else:
        index, vals = None, out
    (vals * torch.linspace(-1, 2, vals.numel(), dtype=vals.dtype).reshape(vals.shape)).sum().backward()
    grads = [v.grad] + [t.grad.to_dense() for t in leaves]
    return tuple(out.shape), index, vals.detach(), grads

def compare(src, batched):
    small = run(src, len({rows!r}), batched)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        big = run(src, N_BATCHED if batched else N, batched)
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    n = N_BATCHED if batched else N
    rows = torch.tensor(kept(n))
    shape, index, vals, grads = big
    if index is not None:                  # sparse: the same entries at the kept rows' ranks
        r = -2                             # the row index row, 2D or batched
        assert shape[-2] == n and shape[:-2] + shape[-1:] == small[0][:-2] + small[0][-1:], (shape, small[0])
        ranks = torch.searchsorted(rows, index[r])
        assert bool((rows[ranks.clamp(max=len(rows) - 1)] == index[r]).all()), "an entry outside A's rows"
        index = index.clone()
        index[r] = ranks
        assert torch.equal(index, small[1]), (index, small[1])
    elif len(shape) >= 2 and shape[-2] == n:
        vals = vals.index_select(-2, rows)
    torch.testing.assert_close(vals, small[2], rtol=1e-12, atol=1e-12)
    assert len(grads) == len(small[3])
    for g, h in zip(grads, small[3]):
        torch.testing.assert_close(g, h, rtol=1e-12, atol=1e-12)

N, N_BATCHED = 2**31 + 5, 2**30 + 3
soft, hard = resource.getrlimit(resource.RLIMIT_AS)
size = int(open("/proc/self/status").read().split("VmSize:")[1].split()[0]) * 1024
limit = size + {headroom}
torch.set_num_threads(2)
results = {{}}
for name, src, batched in json.loads({cases!r}):
    try:
        compare(src, batched)
        results[name] = ["OK", ""]
    except BaseException as e:
        results[name] = [type(e).__name__, str(e)[-1500:]]
print("RESULTS" + json.dumps(results))
"""
# the address space the child may take beyond what it holds before the first big call:
# any allocation of a byte per row of A (2**31 + 5 rows) is more
HYPERSPARSE_HEADROOM = 2 << 30


@pytest.fixture(scope="session")
def hypersparse_outcomes():
    """Every hypersparse case, run in one child process."""
    cases = [(f"{op.name}/{i}/{batched}", HYPERSPARSE[op.name][i], batched) for op, i, batched in HYPERSPARSE_IDS
             if op.available() is not None]
    r = run_child(_HYPERSPARSE_CHILD.format(rows=HYPERSPARSE_ROWS, cases=json.dumps(cases),
                                            headroom=HYPERSPARSE_HEADROOM), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    line = next(line for line in r.stdout.splitlines() if line.startswith("RESULTS"))
    return json.loads(line[len("RESULTS"):])


@pytest.mark.skipif(SANITIZED, reason="RLIMIT_AS cannot be combined with ASan's shadow memory")
@pytest.mark.parametrize("op,call,batched", [pytest.param(op, i, b, id=f"{op.name}-{i}-{'batched' if b else '2d'}")
                                             for op, i, b in HYPERSPARSE_IDS])
def test_hypersparse_coo_memory_is_o_nnz(hypersparse_outcomes, op, call, batched):
    """A COO A of 2**31 + 5 rows (or 2 x (2**30 + 3)) and a few entries, forward and
    backward in O(nnz) memory (under an address-space limit that an allocation of a byte
    per row exceeds), its results those of the same call on A's non-empty rows alone."""
    op.fn()
    outcome, message = hypersparse_outcomes[f"{op.name}/{call}/{batched}"]
    assert outcome == "OK", f"{HYPERSPARSE[op.name][call]}: {outcome}: {message}"
