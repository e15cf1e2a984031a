"""The C extension, configured for this process: how tensors reach it.

Every tensor reaches the C kernels as a DLTensor: borrowed through PyTorch's
DLPack C exchange table where it has one (no capsule, about 0.05 us a tensor),
else through this C-level DLPack export (Tensor.__dlpack__ costs ten times more
per call, in Python).  Neither checks what view.plain() makes true: no negation bit.
Import _C from here, so that it is configured before its first call.

`cuda_kernels()` says whether our CUDA kernels can run: built into _C and
enabled (a caller checks its tensors' device itself).  `STATUS` holds the messages of the
kernels' errors, {status name: message}, for the Python paths that raise the
same errors (the messages are written once, in csrc/module.c).
"""
from torch import Tensor
from torch.utils.dlpack import to_dlpack

from .. import _C

_C.set_exporter(to_dlpack)
_C.use_exchange_api(Tensor)

STATUS = _C.status_messages()

# Tests set this to False to run CUDA tensors through PyTorch's ops, as a build
# without nvcc does.
cuda_enabled = True


def cuda_kernels() -> bool:
    """Are our CUDA kernels built into _C and enabled?"""
    return _C.cuda and cuda_enabled
