"""The package's version: one source (``torchsparsegradutils.__version__``, which
pyproject.toml reads), numbered above the published 0.2.7 whose API we implement."""
import json
import subprocess
import sys
import textwrap

from packaging.specifiers import SpecifierSet

import torchsparsegradutils as tsgu
from support.children import PACKAGE_ROOT


def test_built_metadata_has_the_package_version():
    """The version a wheel's metadata gets (setuptools' own metadata step, as pip runs
    it) is ``__version__``."""
    code = textwrap.dedent("""
        import contextlib, email, io, json, os, tempfile
        import setuptools.build_meta as backend
        out = tempfile.mkdtemp()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            info = backend.prepare_metadata_for_build_wheel(out)
        with open(os.path.join(out, info, "METADATA")) as f:
            print(json.dumps(email.message_from_file(f)["Version"]))
        """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=PACKAGE_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == tsgu.__version__


def test_version_satisfies_requirements_on_the_published_api():
    # not a pre-release: pip (without --pre) and older `packaging` reject those for ">=0.2.7"
    assert SpecifierSet(">=0.2.7").contains(tsgu.__version__, prereleases=False), tsgu.__version__
