"""Build of the C extension torchsparsegradutils._C.

It needs only a C compiler and the Python headers: no libtorch, no pybind11.
The module uses CPython's limited API, so one build serves Python >= 3.9 and,
since tensors arrive through DLPack, any PyTorch 2.x."""
import glob
import os
import sys

from setuptools import Extension, setup

extra = ["-std=c11", "-O3", "-Wall", "-Wextra", "-pthread"]
if os.environ.get("TSGU_WERROR"):
    extra.append("-Werror")

ext = Extension(
    "torchsparsegradutils._C",
    sources=sorted(glob.glob("csrc/*.c")),
    depends=sorted(glob.glob("csrc/*.h")),
    include_dirs=["csrc"],
    extra_compile_args=extra,
    extra_link_args=["-pthread"],
    define_macros=[("Py_LIMITED_API", "0x03090000")],
    py_limited_api=True,
)

setup(
    ext_modules=[ext],
    options={"bdist_wheel": {"py_limited_api": "cp39"}} if sys.platform != "win32" else {},
)
