"""The docstring examples of every public module run and pass (as the published release's test_doctests does).

Public: every module under torchsparsegradutils with no underscore-prefixed part.
Every one that is not a package __init__ (those only re-export) must hold examples.
"""
import doctest
import importlib
import pkgutil
import warnings

import pytest

import torchsparsegradutils

PUBLIC_MODULES = ["torchsparsegradutils"] + sorted(
    m.name for m in pkgutil.walk_packages(torchsparsegradutils.__path__, "torchsparsegradutils.")
    if not any(part.startswith("_") for part in m.name.split(".")[1:]))



@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_docstring_examples(name):
    if name.startswith("torchsparsegradutils.jax."):
        pytest.importorskip("jax")                 # an optional extra
    module = importlib.import_module(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        failed, attempted = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
                                            report=False)
    assert failed == 0, f"{failed} of {attempted} examples fail in {name} (run python -m doctest -v on it)"
    if not hasattr(module, "__path__"):
        assert attempted > 0, f"{name} has no docstring examples"
