"""Sphinx configuration: the site is Markdown (MyST), the API reference comes from the
NumPy-style docstrings (autodoc + napoleon, one generated page per module listed in
api.md), and `sphinx-build -b doctest` runs the pages' testcode blocks and the
docstrings' >>> examples."""
import importlib.util
import os
import sys

from docutils import nodes

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)  # the checkout's package (with its built extension) wins

import torchsparsegradutils  # noqa: E402

project = "torchsparsegradutils"
author = "the torchsparsegradutils developers"
copyright = author
release = version = torchsparsegradutils.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.doctest",
    "sphinx.ext.mathjax",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build", "generated/*.md"]
templates_path = ["_templates"]
html_theme = "furo"
html_title = "torchsparsegradutils"
html_static_path = ["_static"]
html_css_files = ["custom.css"]
nitpicky = False

myst_enable_extensions = ["colon_fence", "dollarmath"]
myst_heading_anchors = 3

# API reference: one page per module of api.md's autosummary list, through
# _templates/autosummary/module.rst; members are what each module's __all__ names, and
# the page's docstring examples run with `from <module> import *` done.
autosummary_generate = True
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "signature"  # the docstrings give types in words (NumPy style)
autodoc_inherit_docstrings = False  # no torch.nn.Module / autograd.Function boilerplate
# Optional dependencies of documented modules: without them installed the module is
# documented against a mock and its docstring examples are shown but not run.
OPTIONAL = {"torchsparsegradutils.jax": "jax"}
MISSING = {mod for mod, dep in OPTIONAL.items() if importlib.util.find_spec(dep) is None}
autodoc_mock_imports = [OPTIONAL[mod] for mod in MISSING]
autosummary_context = {"missing_extras": sorted(MISSING)}

napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False  # "Returns: <what>": the sections name what comes back, in words
napoleon_custom_sections = [("Gradients", "notes_style")]

# `sphinx-build -b doctest`: every testcode block and docstring example; each page's run
# starts from this (API pages add their module's names, see the template)
doctest_global_setup = """
import warnings
import torch
import torchsparsegradutils
torch.manual_seed(0)
warnings.filterwarnings("ignore", "Sparse CSR tensor support is in beta state", UserWarning)
warnings.filterwarnings("ignore", "Sparse invariant checks are implicitly disabled", UserWarning)
"""


def _skip_examples_needing_missing_extras(app, doctree):
    if app.env.docname in {f"generated/{mod}" for mod in MISSING}:
        for block in doctree.findall(nodes.doctest_block):
            block["skipif"] = "True"


def _drop_namedtuple_field_boilerplate(app, what, name, obj, options, lines):
    """A NamedTuple's fields are listed with their names and types, without Python's
    "Alias for field number N" as their text (the class docstring describes them)."""
    if what == "attribute" and len(lines) <= 2 and lines and lines[0].startswith("Alias for field number"):
        lines.clear()


def setup(app):
    app.connect("doctree-read", _skip_examples_needing_missing_extras)
    app.connect("autodoc-process-docstring", _drop_namedtuple_field_boilerplate)
