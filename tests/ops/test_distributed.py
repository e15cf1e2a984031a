"""torchsparsegradutils on PyTorch's distributed engine (gloo, processes on the loopback
address, each group spawned once and bounded in time):

- data-parallel training: a model with SparseLinear and GCNConv under
  DistributedDataParallel ends with the parameters of one process training on the
  whole batch;
- the row-partitioned dist_sparse_mm (2 and 4 processes): forward and both gradients
  equal sparse_mm on the whole matrix, over the cases in _CASES; malformed or
  inconsistent partitions raise ValueError on every rank;
- the partitioning helpers, in this process.
"""
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

from support.checks import num_threads
from torchsparsegradutils.nn import GCNConv, SparseLinear, gcn_adjacency

STEPS, N, F = 4, 40, 6
COLLECTIVE_TIMEOUT_S = 30     # a gloo collective waiting longer raises in the worker
PAIR_TIMEOUT_S = 90           # the pair takes 5-20 s on the 2-core machine
needs_gloo = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="no gloo backend")


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
    return torch.randn(N, F, generator=gen), gcn_adjacency(edge_index, N), torch.randint(0, 3, (N,), generator=gen)


def _loss(model, x, A, y, nodes):
    return torch.nn.functional.cross_entropy(model(x, A)[nodes], y[nodes])


def _train(model, step_loss):
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for _ in range(STEPS):
        opt.zero_grad()
        step_loss(model).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def _ddp_worker(rank, workdir):
    x, A, y = _data()
    ddp = torch.nn.parallel.DistributedDataParallel(_Model())
    nodes = torch.arange(N).reshape(2, -1)[rank]                      # each rank: half the labelled nodes
    params = _train(ddp, lambda m: _loss(m, x, A, y, nodes))
    # DDP goes before its process group. Left alive, its Reducer would hold the group's
    # last reference, and freeing it (with the GIL held) runs ~ProcessGroupGloo, which
    # joins gloo's worker threads; one of them may still be freeing the last all-reduce,
    # whose captured thread-local state holds the contextvars.Context that backward()
    # stashes (torch 2.13), and that needs the GIL: a deadlock. destroy_process_group
    # (in _traced) drops the group's last reference with the GIL released.
    del ddp
    if rank == 0:
        torch.save(params, os.path.join(workdir, "params.pt"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawn(worker, nprocs: int, workdir, limit_s: float, *args) -> None:
    """Run worker(rank, port, workdir, *args) in nprocs spawned processes; fails the test
    with every worker's thread stacks if they have not all finished within limit_s."""
    ctx = mp.start_processes(_traced, args=(worker, nprocs, _free_port(), str(workdir), *args), nprocs=nprocs,
                             join=False, start_method="spawn")
    deadline = time.monotonic() + limit_s
    while not ctx.join(timeout=1):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                if p.is_alive():
                    os.kill(p.pid, signal.SIGUSR1)                    # each worker dumps its threads' stacks
            time.sleep(2)
            for p in ctx.processes:
                p.kill()
            stacks = [workdir / f"stacks{rank}.txt" for rank in range(nprocs)]
            dumps = "\n".join(f"rank {r}:\n{f.read_text() if f.exists() else '(none)'}" for r, f in enumerate(stacks))
            pytest.fail(f"the workers did not finish within {limit_s} s; their stacks:\n{dumps}")


def _traced(rank, worker, nprocs, port, workdir, *args):
    """A spawned worker in a gloo group, its stacks dumped on SIGUSR1."""
    faulthandler.register(signal.SIGUSR1, file=open(os.path.join(workdir, f"stacks{rank}.txt"), "w"),
                          all_threads=True)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=nprocs,
                            timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S))
    try:
        worker(rank, workdir, *args)
    finally:
        dist.destroy_process_group()


@needs_gloo
def test_ddp_matches_one_process(tmp_path):
    _spawn(_ddp_worker, 2, tmp_path, PAIR_TIMEOUT_S)
    x, A, y = _data()
    halves = torch.arange(N).reshape(2, -1)
    single = _train(_Model(), lambda m: (_loss(m, x, A, y, halves[0]) + _loss(m, x, A, y, halves[1])) / 2)
    for p_ddp, p_one in zip(torch.load(tmp_path / "params.pt"), single):
        torch.testing.assert_close(p_ddp, p_one, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------ dist_sparse_mm
CASES_TIMEOUT_S = 150         # a group runs every case of _CASES; 10-40 s on the 2-core machine
P = 5                         # columns of B


def _random_csr(n: int, nnz: int, seed: int, powerlaw: bool = False) -> torch.Tensor:
    """A square float64 CSR matrix, coalesced; with powerlaw, rows and columns drawn with
    a heavy skew (hub rows and popular columns)."""
    gen = torch.Generator().manual_seed(seed)
    if powerlaw:
        w = torch.arange(1, n + 1, dtype=torch.float64).pow(-1.2)
        rows = torch.multinomial(w, nnz, replacement=True, generator=gen)
        cols = torch.multinomial(w[torch.randperm(n, generator=gen)], nnz, replacement=True, generator=gen)
    else:
        rows, cols = torch.randint(0, n, (2, nnz), generator=gen) if n else torch.empty(2, 0, dtype=torch.int64)
    values = torch.randn(rows.numel(), generator=gen, dtype=torch.float64)
    return torch.sparse_coo_tensor(torch.stack([rows, cols]), values, (n, n)).coalesce().to_sparse_csr()


def _compare(A: torch.Tensor, part, seed: int = 3, p: int = P) -> None:
    """dist_sparse_mm on this rank's part of A against sparse_mm on the whole A, with B
    of p columns: this rank's rows of C and of grad_B, and the gradient of its values;
    its exchange plan against partition_report's; its inputs left unchanged."""
    from torchsparsegradutils import sparse_mm
    from torchsparsegradutils.distributed import dist_sparse_mm, partition_report

    n = A.shape[0]
    gen = torch.Generator().manual_seed(seed)
    B, W = torch.randn(n, p, generator=gen, dtype=torch.float64), torch.randn(n, p, generator=gen, dtype=torch.float64)
    A_ref = A.detach().clone().requires_grad_()
    B_ref = B.clone().requires_grad_()
    C_ref = sparse_mm(A_ref, B_ref)
    (C_ref * W).sum().backward()

    s, e = part.start, part.end
    part.values.requires_grad_()
    B_mine = B[s:e].clone().requires_grad_()
    inputs = [t.detach().clone() for t in (part.values, B_mine, part.crow_indices, part.col_indices)]
    C = dist_sparse_mm(part, B_mine)
    (C * W[s:e]).sum().backward()
    assert all(torch.equal(a, b) for a, b in zip(inputs, (part.values, B_mine, part.crow_indices, part.col_indices)))
    torch.testing.assert_close(C, C_ref[s:e].detach())
    torch.testing.assert_close(B_mine.grad, B_ref.grad[s:e])
    rep = partition_report(A, part.bounds)[dist.get_rank()]                 # the plan, simulated in one process
    assert (part.halo.numel(), sum(part.recv_counts), sum(part.send_counts)) == (rep["halo"], rep["halo"], rep["sends"])
    row, col = part.entries()
    torch.testing.assert_close(part.values.detach(), A.to_dense()[row, col])
    torch.testing.assert_close(part.values.grad, A_ref.grad.to_dense()[row, col])


def _scattered(A: torch.Tensor, rank: int, bounds=None):
    from torchsparsegradutils.distributed import DistSparseCSR

    return DistSparseCSR.from_global(A if rank == 0 else None, bounds=bounds, timeout=_CASE_TIMEOUT)


def _case_random(rank, world):
    A = _random_csr(37, 200, seed=1)
    _compare(A, _scattered(A, rank))


def _case_powerlaw(rank, world):
    A = _random_csr(120, 900, seed=2, powerlaw=True)
    _compare(A, _scattered(A, rank))


def _case_same_bits_for_any_thread_count(rank, world):
    from torchsparsegradutils.distributed import dist_sparse_mm

    A = _random_csr(300, 6000, seed=14, powerlaw=True)
    part = _scattered(A, rank)
    part.values.requires_grad_()
    B = torch.randn(part.end - part.start, P, generator=torch.Generator().manual_seed(rank), dtype=torch.float64)
    runs = []
    for threads in (1, 2, 5):
        with num_threads(threads):
            Bt = B.clone().requires_grad_()
            part.values.grad = None
            C = dist_sparse_mm(part, Bt)
            C.square().sum().backward()
            runs.append((C, Bt.grad, part.values.grad))
    for run in runs[1:]:
        assert all(torch.equal(a, b) for a, b in zip(runs[0], run))


class _TwoLayers(torch.nn.Module):
    """A two-layer GCN-like model: matmul(A, relu(matmul(A, x W1)) W2)."""

    def __init__(self, matmul):
        super().__init__()
        torch.manual_seed(0)
        self.l1, self.l2 = torch.nn.Linear(F, 4).double(), torch.nn.Linear(4, 3).double()
        self.matmul = matmul

    def forward(self, A, x):
        return self.matmul(A, self.l2(torch.relu(self.matmul(A, self.l1(x)))))


def _case_under_ddp(rank, world):
    """dist_sparse_mm inside a model under DistributedDataParallel, on the same process
    group (DDP's all-reduces interleave with the exchanges in backward): after 3 steps
    the parameters of one process training on the whole graph."""
    from torchsparsegradutils import sparse_mm
    from torchsparsegradutils.distributed import dist_sparse_mm

    n = 50
    A = _random_csr(n, 300, seed=15)
    gen = torch.Generator().manual_seed(16)
    x, y = torch.randn(n, F, generator=gen, dtype=torch.float64), torch.randint(0, 3, (n,), generator=gen)
    part = _scattered(A, rank)
    s, e = part.start, part.end

    def train(model, A, x, y, scale):
        opt = torch.optim.SGD(model.parameters(), lr=0.3)
        for _ in range(3):
            opt.zero_grad()
            (torch.nn.functional.cross_entropy(model(A, x), y, reduction="sum") * scale).backward()
            opt.step()

    ddp = torch.nn.parallel.DistributedDataParallel(_TwoLayers(dist_sparse_mm))
    train(ddp, part, x[s:e], y[s:e], world / n)        # DDP averages: each rank's share of the sum, times P
    one = _TwoLayers(sparse_mm)
    train(one, A, x, y, 1 / n)
    for a, b in zip(ddp.module.parameters(), one.parameters()):
        torch.testing.assert_close(a, b)
    del ddp                                            # before the group goes (see _ddp_worker)


def _case_from_local_edges(rank, world):
    """Each rank hands its own edge list (repeated entries, in any order, summed) for
    uneven row ranges."""
    from torchsparsegradutils.distributed import DistSparseCSR

    n = 23
    gen = torch.Generator().manual_seed(4)
    rows, cols = torch.randint(0, n, (2, 160), generator=gen)
    rows, cols = torch.cat([rows, rows[:20]]), torch.cat([cols, cols[:20]])      # 20 repeated entries
    values = torch.randn(rows.numel(), generator=gen, dtype=torch.float64)
    A = torch.sparse_coo_tensor(torch.stack([rows, cols]), values, (n, n)).coalesce().to_sparse_csr()
    bounds = [0, 2, 17, 18, 23] if world == 4 else [0, 5, 23]
    s, e = bounds[rank], bounds[rank + 1]
    mine = torch.nonzero((rows >= s) & (rows < e)).flatten().flip(0)               # in reverse order
    part = DistSparseCSR.from_local(rows[mine], cols[mine], values[mine], (s, e), n, timeout=_CASE_TIMEOUT)
    _compare(A, part)


def _case_empty_partition(rank, world):
    """Rank 1 owns no rows."""
    A = _random_csr(30, 150, seed=5)
    bounds = torch.tensor([0, 12, 12, 20, 30] if world == 4 else [0, 0, 30])
    part = _scattered(A, rank, bounds)
    assert part.end - part.start == int(bounds[rank + 1] - bounds[rank])
    _compare(A, part)


def _case_no_halo(rank, world):
    """Rank 0's rows reference only its own rows (no halo), while the other ranks
    reference rank 0's rows."""
    n = 24
    A = _random_csr(n, 180, seed=6).to_dense()
    A[:n // world, n // world:] = 0
    A = A.to_sparse_csr()
    part = _scattered(A, rank, torch.arange(world + 1) * (n // world))
    assert (part.halo.numel() == 0) == (rank == 0)
    _compare(A, part)


def _case_no_columns(rank, world):
    """B with p = 0 columns: C and grad_B are empty, the values' gradient zero, on
    ranks that receive halo rows (of no columns) and ranks that do not."""
    A = _random_csr(22, 120, seed=11)
    part = _scattered(A, rank)
    assert part.halo.numel() > 0
    _compare(A, part, p=0)


def _case_more_ranks_than_rows(rank, world):
    A = _random_csr(world - 1, 4, seed=7)
    _compare(A, _scattered(A, rank))


def _case_no_entries(rank, world):
    A = _random_csr(9, 0, seed=8)
    _compare(A, _scattered(A, rank))


def _case_malformed_part(rank, world):
    """Rank 1 hands a column id out of range: every rank raises, naming rank 1."""
    from torchsparsegradutils.distributed import DistSparseCSR

    n = 10 * world
    row = torch.arange(10 * rank, 10 * rank + 10)
    col = row.clone()
    if rank == 1:
        col[3] = n
    with pytest.raises(ValueError, match="rank 1's part is malformed: a column id lies outside"):
        DistSparseCSR.from_local(row, col, torch.ones(10), (10 * rank, 10 * rank + 10), n, timeout=_CASE_TIMEOUT)


def _case_inconsistent_ranges(rank, world):
    """The ranks' row ranges overlap: every rank raises."""
    from torchsparsegradutils.distributed import DistSparseCSR

    n = 10 * world
    s = max(0, 10 * rank - (rank == world - 1))
    with pytest.raises(ValueError, match="row ranges must tile"):
        DistSparseCSR.from_local(torch.empty(0, dtype=torch.int64), torch.empty(0, dtype=torch.int64),
                                 torch.empty(0), (s, 10 * rank + 10), n, timeout=_CASE_TIMEOUT)


def _case_refused_matrix(rank, world):
    """Rank 0 holds a matrix that is not square: it raises its own error, the others
    that rank 0's matrix was refused."""
    A = torch.ones(3, 4).to_sparse_csr() if rank == 0 else None
    with pytest.raises(ValueError, match="must be square" if rank == 0 else "rank 0's matrix was refused"):
        _scattered(A, rank)


def _case_edited_values(rank, world):
    """An in-place edit of the values between forward and backward raises on every rank
    (before the backward's exchange)."""
    from torchsparsegradutils.distributed import dist_sparse_mm

    A = _random_csr(16, 60, seed=9)
    part = _scattered(A, rank)
    part.values.requires_grad_()
    C = dist_sparse_mm(part, torch.ones(part.end - part.start, P, dtype=torch.float64, requires_grad=True))
    with torch.no_grad():
        part.values.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        C.sum().backward()


_CASE_TIMEOUT = datetime.timedelta(seconds=20)
_CASES = {name[len("_case_"):]: fn for name, fn in list(globals().items()) if name.startswith("_case_")}


def _cases_worker(rank, workdir, world):
    import json
    import traceback

    results = {}
    for name, case in _CASES.items():
        try:
            case(rank, world)
            results[name] = "ok"
        except Exception:                                   # reported per case and rank by the test
            results[name] = traceback.format_exc()
    with open(os.path.join(workdir, f"results{rank}.json"), "w") as f:
        json.dump(results, f)


@pytest.fixture(scope="module")
def case_results(tmp_path_factory):
    """{world: [each rank's {case: "ok" or its traceback}]}, each group spawned once."""
    import json

    runs = {}

    def results(world):
        if world not in runs:
            workdir = tmp_path_factory.mktemp(f"dist{world}")
            _spawn(_cases_worker, world, workdir, CASES_TIMEOUT_S, world)
            runs[world] = [json.loads((workdir / f"results{r}.json").read_text()) for r in range(world)]
        return runs[world]
    return results


@needs_gloo
@pytest.mark.xdist_group("distributed_cases")   # one worker: each group spawned once, not once a worker
@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("case", list(_CASES))
def test_dist_sparse_mm(case_results, world, case):
    failures = [f"rank {r}:\n{res[case]}" for r, res in enumerate(case_results(world)) if res[case] != "ok"]
    assert not failures, "\n".join(failures)


# ------------------------------------------------------------ the partitioning helpers
@pytest.mark.parametrize("parts", [1, 3, 8, 50])
def test_partition_rows_balances_work(parts):
    from torchsparsegradutils.distributed import partition_rows

    A = _random_csr(40, 300, seed=10, powerlaw=True)
    bounds = partition_rows(A, parts)
    work = A.crow_indices() + torch.arange(41)                        # entries + rows before each row
    assert bounds[0] == 0 and bounds[-1] == 40 and bool((bounds.diff() >= 0).all()) and bounds.numel() == parts + 1
    per_part = work[bounds[1:]] - work[bounds[:-1]]
    heaviest_row = int((A.crow_indices().diff() + 1).max())
    assert int(per_part.max()) <= int(work[-1]) / parts + heaviest_row     # off the even split by < one row


def test_partition_report_counts_halo_sends_and_cut():
    from torchsparsegradutils.distributed import partition_report

    A = _random_csr(30, 200, seed=11)
    bounds = torch.tensor([0, 7, 7, 30])
    D = A.to_dense() != 0
    for r, rep in enumerate(partition_report(A, bounds)):
        s, e = int(bounds[r]), int(bounds[r + 1])
        outside = torch.ones(30, dtype=torch.bool)
        outside[s:e] = False
        block = D[s:e]
        halo = block.any(0) & outside
        sends = sum(int((D[int(bounds[q]):int(bounds[q + 1])].any(0)[s:e]).sum()) for q in range(3) if q != r)
        assert rep == {"rows": e - s, "nnz": int(block.sum()), "halo": int(halo.sum()),
                       "cut": int(block[:, outside].sum()), "sends": sends}


@pytest.mark.parametrize("method", ["rcm", "bfs"])
def test_reorder_permutes_and_cuts_the_halo(method):
    """A banded matrix with shuffled numbering: reordering recovers a narrow band (a
    smaller total halo), and the result is P A P^T."""
    from torchsparsegradutils.distributed import partition_report, partition_rows, reorder

    n = 200
    i = torch.arange(n)
    rows, cols = torch.cat([i, i[1:], i[:-1], i[2:]]), torch.cat([i, i[:-1], i[1:], i[:-2]])
    shuffle = torch.randperm(n, generator=torch.Generator().manual_seed(12))
    A = torch.sparse_coo_tensor(torch.stack([shuffle[rows], shuffle[cols]]), torch.randn(rows.numel()),
                                (n, n)).coalesce().to_sparse_csr()
    Ap, perm = reorder(A, method)
    assert torch.equal(perm.sort().values, torch.arange(n))
    torch.testing.assert_close(Ap.to_dense(), A.to_dense()[perm][:, perm])
    halos = lambda M: [rep["halo"] for rep in partition_report(M, partition_rows(M, 4))]  # noqa: E731
    assert max(halos(Ap)) <= 4 < min(halos(A))              # the band of A + A^T: 2 rows on each side


def test_reorder_puts_isolated_rows_last():
    from torchsparsegradutils.distributed import reorder

    A = torch.tensor([[0.0, 0, 0, 0], [0, 1, 2, 0], [0, 3, 0, 0], [0, 0, 0, 0]]).to_sparse_csr()
    for method in ("rcm", "bfs"):
        _, perm = reorder(A, method)
        assert sorted(perm[2:].tolist()) == [0, 3] and sorted(perm[:2].tolist()) == [1, 2]


def test_partition_errors():
    from torchsparsegradutils.distributed import partition_report, partition_rows, reorder

    A = _random_csr(5, 10, seed=13)
    with pytest.raises(ValueError, match="must be square"):
        partition_rows(torch.ones(2, 3).to_sparse_csr(), 2)
    with pytest.raises(ValueError, match="positive int"):
        partition_rows(A, 0)
    with pytest.raises(ValueError, match="must rise from 0 to n = 5"):
        partition_report(A, torch.tensor([0, 3, 2, 5]))
    with pytest.raises(ValueError, match="unknown reordering"):
        reorder(A, "metis")


def _missing_rank_worker(rank, workdir):
    """Rank 0 never joins the build; rank 1's first collective gives up after 2 s."""
    from torchsparsegradutils.distributed import DistSparseCSR

    if rank == 1:
        t0 = time.monotonic()
        try:
            DistSparseCSR.from_local(torch.tensor([1]), torch.tensor([0]), torch.ones(1), (1, 2), 2,
                                     timeout=datetime.timedelta(seconds=2))
            outcome = "no error"
        except Exception as e:                              # gloo's timeout error, or ours
            outcome = f"{type(e).__name__} after {time.monotonic() - t0:.1f} s: {e}"
        with open(os.path.join(workdir, "outcome.txt"), "w") as f:
            f.write(outcome)
    else:
        time.sleep(5)                                       # alive, but not calling


@needs_gloo
def test_a_rank_that_never_joins_is_a_timeout_error_not_a_hang(tmp_path):
    _spawn(_missing_rank_worker, 2, tmp_path, 60)
    outcome = (tmp_path / "outcome.txt").read_text()
    assert outcome != "no error" and float(outcome.split(" after ")[1].split(" s")[0]) < 6, outcome
