"""The docstring examples of every public module run and pass (as the published release's test_doctests does).

Public: every module under torchsparsegradutils with no underscore-prefixed part.
Every one that is not a package __init__ (those only re-export) must hold examples.
A private module's examples run too, where it holds some (a helper moved out of a
public module keeps its example tested).
"""
import doctest
import importlib
import importlib.util
import pathlib
import pkgutil
import warnings

import pytest

import torchsparsegradutils

MODULES = ["torchsparsegradutils"] + sorted(
    m.name for m in pkgutil.walk_packages(torchsparsegradutils.__path__, "torchsparsegradutils."))
PUBLIC_MODULES = [m for m in MODULES if not any(part.startswith("_") for part in m.split(".")[1:])]


def _holds_examples(name: str) -> bool:
    path = pathlib.Path(importlib.util.find_spec(name).origin)
    return path.suffix == ".py" and ">>>" in path.read_text()


PRIVATE_WITH_EXAMPLES = [m for m in MODULES if m not in PUBLIC_MODULES and _holds_examples(m)]



@pytest.mark.parametrize("name", PUBLIC_MODULES + PRIVATE_WITH_EXAMPLES)
def test_docstring_examples(name):
    if name.startswith("torchsparsegradutils.jax."):
        pytest.importorskip("jax")                 # an optional extra
    module = importlib.import_module(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        failed, attempted = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
                                            report=False)
    assert failed == 0, f"{failed} of {attempted} examples fail in {name} (run python -m doctest -v on it)"
    if not hasattr(module, "__path__") and name in PUBLIC_MODULES:
        assert attempted > 0, f"{name} has no docstring examples"
