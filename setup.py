"""Build of the C extension torchsparsegradutils._C.

It needs only a C compiler and the Python headers: no libtorch, no pybind11.
The module uses CPython's limited API, so one build serves Python >= 3.9 and,
since tensors arrive through DLPack, any PyTorch the package supports (2.4 on).

Where `nvcc` is found (on the PATH, or under $CUDA_HOME), the CUDA kernels of
csrc/cuda/ are compiled into the same module, with the CUDA runtime linked
statically: the module still loads on machines without a GPU or a CUDA
runtime.  If they fail to compile, the build goes on without them and says
so, unless TSGU_CUDA=1 or TSGU_WERROR is set (then it fails).  Environment:
TSGU_CUDA=0 builds without them even where nvcc is found; TSGU_CUDA_ARCHS
lists the GPU architectures, e.g. "80;90" (default: those of 7.0, 7.5, 8.0,
8.6 and 9.0 that this nvcc supports), with machine code for each and PTX of
the newest for later GPUs; TSGU_OPT the C files' optimisation level (default
-O3).  The C files compile in parallel, one per core."""
import glob
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# -fvisibility=hidden: the module exports PyInit__C alone (PyMODINIT_FUNC marks it), so the
# glue's and kernels' functions shared between files bind within the module, never elsewhere
# TSGU_OPT: the optimisation level (the sanitizer build, .ci/sanitize, takes -O0)
extra = ["-std=c11", os.environ.get("TSGU_OPT", "-O3"), "-Wall", "-Wextra", "-pthread", "-fvisibility=hidden"]
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


def gpu_archs(nvcc):
    """TSGU_CUDA_ARCHS, or the default architectures this nvcc supports."""
    if os.environ.get("TSGU_CUDA_ARCHS"):
        return os.environ["TSGU_CUDA_ARCHS"].split(";")
    wanted = ["70", "75", "80", "86", "90"]
    listed = subprocess.run([nvcc, "--list-gpu-arch"], capture_output=True, text=True).stdout.split()
    supported = {a[len("compute_"):] for a in listed if a.startswith("compute_")}
    return [a for a in wanted if a in supported] or wanted


def _compile_in_parallel(compiler) -> None:
    """Have `compiler` compile an extension's C files on every core, one file a job
    (setuptools compiles them one after another)."""
    serial = compiler.compile
    if getattr(serial, "parallel", False):
        return

    def compile(sources, *args, **kwargs):
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            parts = list(pool.map(lambda src: serial([src], *args, **kwargs), sources))
        return [obj for objs in parts for obj in objs]

    compile.parallel = True
    compiler.compile = compile


class BuildExt(build_ext):
    """build_ext that first compiles csrc/cuda/*.cu with nvcc when CUDA was found."""

    def build_extension(self, ext):
        _compile_in_parallel(self.compiler)
        cuda = find_cuda()
        if cuda:
            try:
                ext.extra_objects = self.compile_cuda(cuda[0])
                ext.extra_compile_args = ext.extra_compile_args + ["-DTSGU_CUDA"]
                ext.extra_link_args = ext.extra_link_args + [f"-L{cuda[1]}", "-lcudart_static", "-ldl", "-lrt",
                                                             "-lstdc++"]
            except (OSError, subprocess.CalledProcessError) as e:
                if os.environ.get("TSGU_CUDA") == "1" or os.environ.get("TSGU_WERROR"):
                    raise
                print(f"warning: the CUDA kernels did not compile ({e}); building without them "
                      "(CUDA tensors then go through PyTorch's ops)", file=sys.stderr)
        super().build_extension(ext)

    def compile_cuda(self, nvcc):
        archs = gpu_archs(nvcc)
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
    extra_compile_args=extra,
    extra_link_args=["-pthread"] + (["-ldl"] if sys.platform.startswith("linux") else []),  # dlsym before glibc 2.34
    define_macros=[("Py_LIMITED_API", "0x03090000")],
    py_limited_api=True,
)

setup(
    ext_modules=[ext],
    cmdclass={"build_ext": BuildExt},
    options={"bdist_wheel": {"py_limited_api": "cp39"}} if sys.platform != "win32" else {},
)
