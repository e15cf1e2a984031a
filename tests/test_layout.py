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
    assert f"{PKG}._backends" in GRAPH[f"{PKG}.sparse_matmul"]
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
    backend module."""
    backends = {f"{PKG}._backends.{b}" for b in ("cpu", "cuda", "torch_ops")}
    users = {a for a, deps in GRAPH.items() if deps & backends} - {f"{PKG}._backends"} - backends
    assert users == set()
