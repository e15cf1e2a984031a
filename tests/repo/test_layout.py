"""The package's layout (see README, "Layout"): every import, at module level or inside a
function, read from the source; no import loop; each layer imports only from itself and
the layers below; the backends are reached through the one module that chooses a route."""
import ast
import pathlib

import pytest

import torchsparsegradutils

ROOT = pathlib.Path(torchsparsegradutils.__file__).parent
PKG = ROOT.name


def _modules():
    """{dotted name: path} of every module of the package."""
    mods = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        mods[".".join(parts)] = path
    return mods


MODULES = _modules()


def _imports(name: str):
    """The package modules that module `name` imports, anywhere in its source."""
    path = MODULES[name]
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            stem = ".".join(base + ([node.module] if node.module else []))
            # `from P import m` of a submodule m names m; of anything else, P itself
            subs = [f"{stem}.{a.name}" for a in node.names]
            targets = [t if t in MODULES or t == f"{PKG}._C" else stem for t in subs]
        else:
            continue
        found.update(t for t in targets if t in MODULES or t == f"{PKG}._C")
    found.discard(name)
    return found


GRAPH = {name: _imports(name) for name in MODULES}


def _layer(name: str) -> int:
    """0: the C extension; 1: _core; 2: _backends; 3: the custom ops; 4: the public modules."""
    parts = name.split(".")[1:]
    if parts[:1] == ["_C"]:
        return 0
    return {"_core": 1, "_backends": 2, "_ops": 3}.get(parts[0] if parts else "", 4)


def test_the_graph_is_read():
    """The reader finds the imports it must (a reader that finds none would pass every test)."""
    assert f"{PKG}._ops.products" in GRAPH[f"{PKG}.sparse_matmul"]
    assert f"{PKG}._core.intake" in GRAPH[f"{PKG}._backends"]
    assert f"{PKG}._C" in GRAPH[f"{PKG}._core.native"]


def test_no_import_loop():
    state, stack = {}, []

    def visit(name):
        state[name] = "open"
        stack.append(name)
        for dep in sorted(GRAPH.get(name, ())):
            if state.get(dep) == "open":
                pytest.fail("import loop: " + " -> ".join(stack[stack.index(dep):] + [dep]))
            if dep not in state:
                visit(dep)
        stack.pop()
        state[name] = "done"

    for name in sorted(GRAPH):
        if name not in state:
            visit(name)


def test_layers_import_only_downward():
    upward = [f"{a} -> {b}" for a, deps in GRAPH.items() for b in deps if _layer(b) > _layer(a)]
    assert upward == []


def test_backends_are_reached_through_the_route():
    """_backends/__init__.py is the one place a route is chosen: no other module names a
    backend module or a module of a backend package (a backend may build on another's
    helpers: the Triton package's modules on torch_ops' global_csr)."""
    backends = {f"{PKG}._backends.{b}" for b in ("cpu", "cuda", "torch_ops", "triton")}
    inside = {a for a in GRAPH if a.startswith((f"{PKG}._backends.triton.", f"{PKG}._backends.torch_ops."))}
    users = {a for a, deps in GRAPH.items() if deps & (backends | inside)} - {f"{PKG}._backends"} - backends - inside
    assert users == set()


# ------------------------------------------------------- one call down the layers, each module once
def _trace(call):
    """What call() runs in the package: every call stack, as the package modules it
    passes through (a run of frames of one module is one pass; eager_only's wrapper, a
    decorator frame of _core.validate, is transparent), each ending with the _C entry
    point it calls, if any; and how many times each module is entered from another."""
    import collections
    import sys
    import threading

    from torchsparsegradutils._core.validate import eager_only
    wrappers = {getattr(eager_only(lambda: None), "__code__", None)}
    chains, entries = set(), collections.Counter()

    def chain_of(frame):
        mods = []
        while frame is not None:
            m = frame.f_globals.get("__name__", "")
            if frame.f_code not in wrappers and m.startswith(PKG) and (not mods or mods[-1] != m):
                mods.append(m)
            frame = frame.f_back
        return tuple(reversed(mods))

    def profile(frame, event, arg):
        if event == "call":
            chain = chain_of(frame)
            chains.add(chain)
            m = frame.f_globals.get("__name__", "")
            if frame.f_code not in wrappers and m.startswith(PKG) and chain_of(frame.f_back)[-1:] != (m,):
                entries[m] += 1
            if m == f"{PKG}._backends" and frame.f_code.co_name == "_backend":
                entries["route choices"] += 1
        elif event == "c_call" and getattr(arg, "__module__", None) == f"{PKG}._C":
            chains.add(chain_of(frame) + (f"{PKG}._C.{arg.__name__}",))
            entries[f"{PKG}._C"] += 1
            if frame.f_globals.get("__name__") == f"{PKG}._backends.cpu":
                entries["kernel calls"] += 1

    sys.setprofile(profile)
    threading.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    return {c for c in chains if c}, entries


def _one_call_cases():
    import torch
    import torchsparsegradutils as tsgu
    g = torch.Generator().manual_seed(0)
    D = torch.rand(30, 20, generator=g, dtype=torch.float64) * (torch.rand(30, 20, generator=g) < 0.2)
    B = torch.randn(20, 4, generator=g, dtype=torch.float64)
    L = (D[:20].tril() + torch.eye(20, dtype=torch.float64)).to_sparse_csr()
    a, W = torch.randn(6, 20, dtype=torch.float64), torch.randn(3, 20, 4, dtype=torch.float64)

    def backward(f, *leaves):
        leaves = [t.detach().requires_grad_() for t in leaves]
        return lambda: f(*leaves).sum().backward()

    S = tsgu.SparseCSR.from_torch(D.to_sparse_csr())
    return {
        "sparse_mm CSR, no grad": lambda: tsgu.sparse_mm(D.to_sparse_csr(), B),
        "sparse_mm COO, no grad": lambda: tsgu.sparse_mm(D.to_sparse(), B),
        "sparse_mm SparseCSR, no grad": lambda: tsgu.sparse_mm(S, B),
        "sparse_mm CSR mean, no grad": lambda: tsgu.sparse_mm(D.to_sparse_csr(), B, "mean"),
        "sparse_triangular_solve, no grad": lambda: tsgu.sparse_triangular_solve(L, B, upper=False),
        "sparse_triangular_solve SparseCSR, no grad":
            lambda: tsgu.sparse_triangular_solve(tsgu.SparseCSR.from_torch(L), B, upper=False),
        "sparse_logsumexp, no grad": lambda: tsgu.sparse_logsumexp(D.to_sparse_csr(), 1),
        "sparse_mm CSR": backward(tsgu.sparse_mm, D.to_sparse_csr(), B),
        "sparse_mm COO": backward(tsgu.sparse_mm, D.to_sparse(), B),
        "sparse_mm COO amax": backward(lambda A, B: tsgu.sparse_mm(A, B, "amax"), D.to_sparse(), B),
        "sparse_mm SparseCSR": backward(lambda v, B: tsgu.sparse_mm(S._replace(values=v), B), S.values, B),
        "sparse_triangular_solve": backward(lambda A, B: tsgu.sparse_triangular_solve(A, B, upper=False), L, B),
        "sparse_logsumexp": backward(lambda A: tsgu.sparse_logsumexp(A, 1), D.to_sparse()),
        "gather_mm": backward(lambda a, W: tsgu.gather_mm(a, W, torch.tensor([0, 2, 1, 0, 2, 2])), a, W),
    }


@pytest.mark.parametrize("name", list(_one_call_cases()))
def test_one_call_passes_each_module_once(name):
    """From the public op to the C kernels, forward and backward: no module is entered
    twice on one call stack, and each kernel call passes the route (_backends), which
    chooses once, and its wrapper (_backends.cpu) once: the review found one sparse_mm
    entering _kernels.py 7 times and _csr.py 5 times."""
    chains, entries = _trace(_one_call_cases()[name])
    assert any(c[-1].startswith(f"{PKG}._C.") and f"{PKG}._backends.cpu" in c for c in chains), \
        "the trace reached no kernel through _backends.cpu"
    twice = sorted(" -> ".join(c) for c in chains if len(set(c)) != len(c))
    assert twice == []
    # once per kernel call: into _backends, into _backends.cpu, and the route's choice
    # (spmm_tensor of a CSR A once chose it twice)
    calls = entries["kernel calls"]
    assert entries[f"{PKG}._backends.cpu"] <= calls and entries[f"{PKG}._backends"] <= calls, dict(entries)
    assert entries["route choices"] <= calls, dict(entries)


def test_layout_docs_name_every_module_of_the_layers():
    """README's Layout table and docs/design.md name each module of _core and _backends
    (design.md once left out _core/torch_sparse.py)."""
    repo = ROOT.parent
    docs = {"README.md": repo / "README.md", "docs/design.md": repo / "docs" / "design.md"}
    if not all(p.exists() for p in docs.values()):
        pytest.skip("not a source checkout")
    layers = sorted(p.name for d in ("_core", "_backends", "_ops") for p in (ROOT / d).glob("*.py")
                    if p.name != "__init__.py")
    readme = docs["README.md"].read_text()
    texts = {"README.md": readme[readme.index("## Layout"):], "docs/design.md": docs["docs/design.md"].read_text()}
    missing = {name: [m for m in layers if m not in text] for name, text in texts.items()}
    assert missing == {name: [] for name in texts}
