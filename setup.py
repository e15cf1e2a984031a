"""Build of the C extension torchsparsegradutils._C.

It needs only a C compiler and the Python headers: no libtorch, no pybind11.
The module uses CPython's limited API, so one build serves Python >= 3.9 and,
since tensors arrive through DLPack, any PyTorch 2.x.

Where `nvcc` is found (on the PATH, or under $CUDA_HOME), the CUDA kernels of
csrc/cuda/ are compiled into the same module, with the CUDA runtime linked
statically: the module still loads on machines without a GPU or a CUDA
runtime.  Environment: TSGU_CUDA=0 builds without them even where nvcc is
found; TSGU_CUDA_ARCHS (default "70;75;80;86;90") lists the GPU architectures
(machine code for each, and PTX of the newest for later GPUs)."""
import glob
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

extra = ["-std=c11", "-O3", "-Wall", "-Wextra", "-pthread"]
if os.environ.get("TSGU_WERROR"):
    extra.append("-Werror")


def find_cuda():
    """(nvcc, CUDA library folder) or None."""
    if os.environ.get("TSGU_CUDA") == "0":
        return None
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    nvcc = os.path.join(home, "bin", "nvcc") if home else shutil.which("nvcc")
    if not nvcc or not os.path.exists(nvcc):
        return None
    for root in ([home] if home else []) + [os.path.dirname(os.path.dirname(nvcc)), "/usr/local/cuda"]:
        for lib in ("lib64", "lib", os.path.join("targets", "x86_64-linux", "lib")):
            if os.path.exists(os.path.join(root, lib, "libcudart_static.a")):
                return nvcc, os.path.join(root, lib)
    return None


CUDA = find_cuda()


class BuildExt(build_ext):
    """build_ext that first compiles csrc/cuda/*.cu with nvcc when CUDA was found."""

    def build_extension(self, ext):
        if CUDA:
            ext.extra_objects = self.compile_cuda(CUDA[0])
        super().build_extension(ext)

    def compile_cuda(self, nvcc):
        archs = os.environ.get("TSGU_CUDA_ARCHS", "70;75;80;86;90").split(";")
        gencode = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in archs]
        gencode.append(f"-gencode=arch=compute_{archs[-1]},code=compute_{archs[-1]}")
        flags = ["-std=c++17", "-O3", "-Icsrc", "-Xcompiler", "-fPIC,-Wall,-Wextra", *gencode]
        if os.environ.get("TSGU_WERROR"):
            flags += ["-Werror", "all-warnings"]
        out = os.path.join(self.build_temp, "cuda")
        os.makedirs(out, exist_ok=True)
        sources = sorted(glob.glob("csrc/cuda/*.cu"))
        objects = [os.path.join(out, os.path.basename(s) + ".o") for s in sources]
        headers = glob.glob("csrc/cuda/*.h*") + glob.glob("csrc/*.h")
        newest = max(os.path.getmtime(h) for h in headers)

        def compile_one(src_obj):
            src, obj = src_obj
            if self.force or not os.path.exists(obj) or os.path.getmtime(obj) < max(newest, os.path.getmtime(src)):
                subprocess.run([nvcc, *flags, "-c", src, "-o", obj], check=True)

        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            list(pool.map(compile_one, zip(sources, objects)))
        return objects


ext = Extension(
    "torchsparsegradutils._C",
    sources=sorted(glob.glob("csrc/*.c")),
    depends=sorted(glob.glob("csrc/*.h") + glob.glob("csrc/cuda/*")),
    include_dirs=["csrc"],
    extra_compile_args=extra + (["-DTSGU_CUDA"] if CUDA else []),
    extra_link_args=["-pthread"] + ([f"-L{CUDA[1]}", "-lcudart_static", "-ldl", "-lrt", "-lstdc++"] if CUDA else []),
    define_macros=[("Py_LIMITED_API", "0x03090000")],
    py_limited_api=True,
)

setup(
    ext_modules=[ext],
    cmdclass={"build_ext": BuildExt},
    options={"bdist_wheel": {"py_limited_api": "cp39"}} if sys.platform != "win32" else {},
)
