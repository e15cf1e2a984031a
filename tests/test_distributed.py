"""Data-parallel training on PyTorch's distributed engine: a model with SparseLinear and
GCNConv under DistributedDataParallel (gloo, 2 processes on the loopback address) ends
with the parameters of one process training on the whole batch."""
import datetime
import faulthandler
import os
import signal
import socket
import time

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from torchsparsegradutils.nn import GCNConv, SparseLinear, gcn_norm

STEPS, N, F = 4, 40, 6
COLLECTIVE_TIMEOUT_S = 30     # a gloo collective waiting longer raises in the worker
PAIR_TIMEOUT_S = 90           # the pair takes 5-20 s on the 2-core machine


class _Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        self.lin = SparseLinear(F, 8, density=0.5, generator=gen)
        self.conv = GCNConv(8, 3)
        torch.nn.init.normal_(self.conv.lin.weight, generator=gen)      # the same start in every process

    def forward(self, x, A):
        return self.conv(torch.relu(self.lin(x)), A)


def _data():
    gen = torch.Generator().manual_seed(1)
    edge_index = torch.randint(0, N, (2, 120), generator=gen)
    return torch.randn(N, F, generator=gen), gcn_norm(edge_index, N), torch.randint(0, 3, (N,), generator=gen)


def _loss(model, x, A, y, nodes):
    return torch.nn.functional.cross_entropy(model(x, A)[nodes], y[nodes])


def _train(model, step_loss):
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for _ in range(STEPS):
        opt.zero_grad()
        step_loss(model).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def _worker(rank, port, workdir):
    faulthandler.register(signal.SIGUSR1, file=open(os.path.join(workdir, f"stacks{rank}.txt"), "w"),
                          all_threads=True)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S))
    try:
        x, A, y = _data()
        ddp = torch.nn.parallel.DistributedDataParallel(_Model())
        nodes = torch.arange(N).reshape(2, -1)[rank]                  # each rank: half the labelled nodes
        params = _train(ddp, lambda m: _loss(m, x, A, y, nodes))
        # DDP goes before its process group. Left alive, its Reducer would hold the group's
        # last reference, and freeing it (with the GIL held) runs ~ProcessGroupGloo, which
        # joins gloo's worker threads; one of them may still be freeing the last all-reduce,
        # whose captured thread-local state holds the contextvars.Context that backward()
        # stashes (torch 2.13), and that needs the GIL: a deadlock. destroy_process_group
        # drops the group's last reference with the GIL released.
        del ddp
        if rank == 0:
            torch.save(params, os.path.join(workdir, "params.pt"))
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="no gloo backend")
def test_ddp_matches_one_process(tmp_path):
    ctx = mp.start_processes(_worker, args=(_free_port(), str(tmp_path)), nprocs=2, join=False, start_method="spawn")
    deadline = time.monotonic() + PAIR_TIMEOUT_S
    while not ctx.join(timeout=1):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                if p.is_alive():
                    os.kill(p.pid, signal.SIGUSR1)                    # each worker dumps its threads' stacks
            time.sleep(2)
            for p in ctx.processes:
                p.kill()
            stacks = [tmp_path / f"stacks{rank}.txt" for rank in range(2)]
            dumps = "\n".join(f"rank {r}:\n{f.read_text() if f.exists() else '(none)'}" for r, f in enumerate(stacks))
            pytest.fail(f"the DDP workers did not finish within {PAIR_TIMEOUT_S} s; their stacks:\n{dumps}")
    x, A, y = _data()
    halves = torch.arange(N).reshape(2, -1)
    single = _train(_Model(), lambda m: (_loss(m, x, A, y, halves[0]) + _loss(m, x, A, y, halves[1])) / 2)
    for p_ddp, p_one in zip(torch.load(tmp_path / "params.pt"), single):
        torch.testing.assert_close(p_ddp, p_one, rtol=1e-5, atol=1e-6)
