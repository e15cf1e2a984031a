"""pytest's hooks and the shared fixtures: a fixed global seed, the `path` fixture (the C
kernels and the torch-ops route), `triton_route` (the Triton kernels forced on CPU
tensors), and dtypes by name in test ids.

Everything else the tests share is a plain module under support/ (operands, the op
registry, child processes, ...): test files import it with ``from support.<module>
import ...``, never from conftest.py or from each other.
"""
import os

import pytest
import torch

# JAX (tests of the JAX bridge) on the CPU, beside the torch CPU tensors the tests
# build, also where a GPU build of JAX is installed; and without taking the GPU's
# memory ahead of the tests that use it
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Triton's interpreter, which the Triton kernels' tests (`triton_route`) run them under on
# CPU tensors; read as triton is imported, so chosen here.  Only where there is no GPU:
# there nothing else runs Triton, and a GPU run keeps its compiled kernels (and skips
# those tests, unless started with TRITON_INTERPRET=1).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from torchsparsegradutils import _backends


def pytest_configure(config):
    """Under pytest-xdist, each worker takes its share of the cores for torch's (and so
    our kernels') threads: N workers each with every core would run N times as many
    threads as cores, whose waits spin (a quarter of the suite's time on 2 cores).  The
    tests of thread counts set theirs (support.checks.num_threads)."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers:
        torch.set_num_threads(max(1, torch.get_num_threads() // int(workers)))


@pytest.fixture(autouse=True)
def _fixed_global_seed():
    """Tests that draw from torch's global generator get the same numbers every run."""
    torch.manual_seed(0)


@pytest.fixture(params=["c_kernels", "torch_ops"])
def path(request, monkeypatch):
    """Run a CPU test through the C kernels, and through the torch-ops route that other
    devices take (forced on the CPU)."""
    monkeypatch.setattr(_backends, "force_torch_ops", request.param == "torch_ops")
    return request.param


@pytest.fixture
def triton_route(monkeypatch):
    """The Triton kernels forced on CPU tensors (_backends.force_triton), interpreted:
    skipped without triton, and without TRITON_INTERPRET=1 (set above where there is no
    GPU; read as the kernels are defined, and by the interpreter as they run: setting it
    later in the process does not take); returns the switch, route(True) / route(False)."""
    pytest.importorskip("triton")
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("the Triton route on CPU tensors runs under TRITON_INTERPRET=1")
    return lambda on: monkeypatch.setattr(_backends, "force_triton", on)


def pytest_make_parametrize_id(config, val, argname):
    """A dtype's name in test ids (float32, int64, ...), so that `-k` can select by it."""
    if isinstance(val, torch.dtype):
        return str(val).removeprefix("torch.")
    return None
