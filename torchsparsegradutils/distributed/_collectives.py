"""The collectives of :mod:`torchsparsegradutils.distributed`: where a group's tensors
go (the CPU for gloo, CUDA for NCCL) and an all-to-all of rows, each waiting at most a
timeout.
"""
import datetime

import torch
import torch.distributed as dist


def _comm_device(group) -> torch.device:
    """Where the group's collectives take tensors: CUDA for NCCL, else the CPU."""
    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _wait(work, timeout: datetime.timedelta) -> None:
    if not work.wait(timeout):
        raise RuntimeError(f"a collective did not finish within {timeout}")


def _all_to_all(send: torch.Tensor, send_counts, recv_counts, group, timeout) -> torch.Tensor:
    """Rows send[...] (in rank order, send_counts[q] to rank q) exchanged for
    recv_counts[q] rows from each rank q; waits at most `timeout`."""
    out = send.new_empty((sum(recv_counts), *send.shape[1:]))
    _wait(dist.all_to_all_single(out, send.contiguous(), recv_counts, send_counts, group=group, async_op=True),
          timeout)
    return out
