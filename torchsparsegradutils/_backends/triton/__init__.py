"""Our Triton kernels (one family a module): the route for CUDA tensors of the ops that
have one, where Triton is importable, and, forced (_backends.force_triton), for CPU
tensors under Triton's interpreter (TRITON_INTERPRET=1), which is how they are tested.

Importing this package imports triton: _backends/__init__.py does so lazily, only
when a route asks for it, so the package itself imports without triton.  Each module
has the signatures of the cpu and torch_ops backends for the ops it covers; the
route is chosen in _backends/__init__.py, and the ops stay the torch.library custom
ops of _ops/ (with their fake implementations).  Every kernel writes each output
element from one program: no atomics, so the results do not depend on scheduling;
sums over columns go through the transpose's pattern (_common.transpose).
"""
from .gat import gat, gat_grad  # noqa: F401
from .gatv2 import gatv2, gatv2_grad  # noqa: F401
from .reduce import sddmm, sddmm_arg, spmm, spmm_arg, spmm_t, spmm_t_arg  # noqa: F401
from .softmax import softmax, softmax_grad  # noqa: F401
from .spgemm import spgemm, spgemm_grad  # noqa: F401
from .trisolve import trisolve  # noqa: F401
