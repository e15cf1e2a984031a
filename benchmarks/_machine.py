"""The machine's description, its background load, and the published release's venv: what
the benchmark drivers share (benchmarks/sparse_mm.py re-exports them).

Needs no torch (its version is read from the installed distribution's metadata), so that
a driver which only starts workers (benchmarks/_ops_suite.py) does not load it itself.
"""
import importlib.metadata
import os
import platform
import subprocess
import sys
import time
from typing import Dict, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
PUBLISHED_PACKAGE = "torchsparsegradutils==0.2.7"   # newest on PyPI when this suite was written


def torch_version() -> str:
    """torch.__version__; where torch is not loaded yet, its distribution's metadata says it."""
    if "torch" in sys.modules:
        return sys.modules["torch"].__version__
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        import torch
        return torch.__version__


# --------------------------------------------------------------------------- machine

def machine_info(threads: int) -> Dict[str, object]:
    cpu = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "threads": threads, "torch": torch_version(),
            "python": platform.python_version(), "platform": platform.platform(),
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "")}


def background_load(seconds: float = 1.0) -> float:
    """CPUs busy with other work while this process sleeps (0 .. cores), from /proc/stat."""
    def busy_total():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        idle = v[3] + (v[4] if len(v) > 4 else 0)
        return sum(v) - idle, sum(v)
    try:
        b0, t0 = busy_total()
        time.sleep(seconds)
        b1, t1 = busy_total()
    except OSError:
        return float("nan")
    return (b1 - b0) / max(t1 - t0, 1) * (os.cpu_count() or 1)


# --------------------------------------------------------------------------- published venv

def _venv_python(venv: str) -> str:
    return os.path.join(venv, "bin", "python")


def _probe_published(py: str) -> Tuple[bool, str]:
    code = ("import torch, torchsparsegradutils as t, os, importlib.metadata as md; "
            "print(md.version('torchsparsegradutils'), torch.__version__, os.path.dirname(t.__file__))")
    try:
        r = subprocess.run([py, "-I", "-c", code], capture_output=True, text=True, timeout=120, cwd="/")
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"{type(e).__name__}: {e}"
    if r.returncode != 0:
        return False, r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "import failed"
    ver, tv, where = r.stdout.split()
    if os.path.abspath(where).startswith(os.path.dirname(HERE) + os.sep + "torchsparsegradutils"):
        return False, "the venv imports this repository's torchsparsegradutils, not the release"
    return True, f"torchsparsegradutils {ver} (torch {tv}) at {where}"


def ensure_published(venv: str, create: bool) -> Tuple[Optional[str], str]:
    """The venv's interpreter and a description, or (None, why it is unavailable).

    Creation installs the pinned CPU torch first (pip finds the local build for this
    exact pin: never let pip resolve an unpinned torch), then the release's other
    dependencies, then the release itself with --no-deps."""
    py = _venv_python(venv)
    if os.path.exists(py):
        ok, msg = _probe_published(py)
        if ok:
            return py, msg
        if not create:
            return None, f"venv at {venv} is broken: {msg}"
    elif not create:
        return None, f"no venv at {venv} (the full mode or --setup-published creates it)"
    torch_pin = "torch==" + torch_version().split("+")[0]
    steps = [[sys.executable, "-m", "venv", venv],
             [py, "-m", "pip", "install", "-q", "--retries", "1", "--timeout", "60", torch_pin],
             [py, "-m", "pip", "install", "-q", "--retries", "1", "--timeout", "60", torch_pin,
              "numpy", "scipy", "packaging"],
             [py, "-m", "pip", "install", "-q", "--retries", "1", "--timeout", "60", "--no-deps",
              PUBLISHED_PACKAGE]]
    print(f"setting up the published release in {venv} ...", flush=True)
    for cmd in steps:
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd="/")
        except (OSError, subprocess.TimeoutExpired) as e:
            return None, f"venv setup failed at {' '.join(cmd[-2:])}: {type(e).__name__}"
        if r.returncode != 0:
            tail = (r.stderr.strip().splitlines() or ["?"])[-1]
            return None, f"venv setup failed at `{' '.join(cmd[2:])}`: {tail}"
    ok, msg = _probe_published(py)
    return (py, msg) if ok else (None, msg)
