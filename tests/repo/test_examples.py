"""The examples run (on small inputs, so they cannot rot) and reach their accuracy band."""
import importlib.util
import os
import pathlib
import subprocess
import sys

import pytest
import torch.distributed as dist

ROOT = pathlib.Path(__file__).resolve().parents[2]
CORA = ROOT.parent / "shared" / "data" / "cora.npz"


def _example(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gcn_runs_on_the_builtin_graph_and_compares(capsys):
    """A short run: it learns, every model it times computes ours' function at the start
    (the example checks it), and the summary table names them."""
    acc = _example("gcn").main(["--epochs", "30", "--compare-steps", "2"])
    assert acc > 0.5                      # 7 classes: chance is ~0.14
    table = capsys.readouterr().out
    assert "| ours (sparse_mm) |" in table and "| torch.sparse.mm |" in table


@pytest.mark.skipif(not CORA.exists(), reason="the Planetoid data is not beside the repository")
def test_gcn_reaches_the_papers_band_on_cora():
    assert _example("gcn").main(["--data", str(CORA), "--compare-steps", "0"]) >= 0.79


def test_bilinear_gradient_is_exact_at_the_pattern():
    assert _example("bilinear").main(["--n", "20000"]) < 1e-5


@pytest.mark.parametrize("example", ["gcn", "gcn_distributed"])
@pytest.mark.parametrize("kind,message", [
    ("missing", "no such file: "),
    ("folder", "is not a readable .npz file"),
    ("text", "is not a readable .npz file"),
    ("npy", "is a single NumPy array, not a .npz archive"),
    ("other_npz", "is not a Planetoid .npz: it lacks x_shape, "),
])
def test_examples_refuse_a_bad_data_path_in_one_line(tmp_path, capsys, example, kind, message):
    """--data naming no file, a folder, a text file, a .npy array or a .npz without the
    Planetoid arrays ends in argparse's one-line error (exit status 2), not a traceback."""
    import numpy as np

    path = tmp_path / {"missing": "cora.npz", "folder": "", "text": "cora.txt", "npy": "cora.npy",
                       "other_npz": "other.npz"}[kind]
    if kind == "text":
        path.write_text("not an archive\n")
    elif kind == "npy":
        np.save(path, np.zeros(3))
    elif kind == "other_npz":
        np.savez(path, a=np.zeros(2))
    with pytest.raises(SystemExit) as exit_:
        _example(example).main(["--data", str(path)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert ": error: argument --data: " in err and message in err, err


def test_sparse_linear_example_learns():
    assert _example("sparse_linear").main(["--epochs", "2", "--train", "3000"]) > 0.3   # chance: 0.1


@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="no gloo backend")
@pytest.mark.parametrize("procs", [2, 4])
def test_gcn_distributed_reaches_the_parameters_of_one_process(procs):
    """torchrun with 2 and 4 gloo processes: --check exits 0 when their parameters after
    the steps equal those of one process on the whole graph, and (2 processes) not when
    asked for more than float tolerance."""
    run = _torchrun_gcn_distributed(procs, "--steps", "5", "--check")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "(same)" in run.stdout
    if procs == 2:    # bit for bit they differ (float32 sums in another order), and --check says so
        run = _torchrun_gcn_distributed(procs, "--steps", "5", "--check", "--rtol", "0")
        assert run.returncode != 0 and "(DIFFERENT)" in run.stdout, run.stdout + run.stderr


def _torchrun_gcn_distributed(procs: int, *args):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                           str(procs), str(ROOT / "examples" / "gcn_distributed.py"), *args],
                          env=env, capture_output=True, text=True, timeout=240)


def test_planetoid_npz_writes_what_the_gcn_example_reads(tmp_path):
    """examples/planetoid_npz.py's arrays of a small PyG graph (no download) load in gcn.py."""
    pytest.importorskip("torch_geometric")
    import numpy as np
    import torch
    from torch_geometric.data import Data

    g = torch.Generator().manual_seed(0)
    n, f = 30, 12
    x = (torch.rand(n, f, generator=g) < 0.2).float()
    masks = {f"{s}_mask": torch.arange(n) % 3 == i for i, s in enumerate(("train", "val", "test"))}
    data = Data(x=x, edge_index=torch.randint(0, n, (2, 80), generator=g),
                y=torch.randint(0, 3, (n,), generator=g), **masks)
    path = tmp_path / "g.npz"
    np.savez(path, **_example("planetoid_npz").arrays(data))
    xs, edge_index, y, train, val, test = _example("gcn").load(str(path))
    assert torch.equal(edge_index, data.edge_index) and torch.equal(y, data.y)
    assert torch.equal(xs.to_torch().to_dense() != 0, x != 0)
    assert torch.equal(train, masks["train_mask"].nonzero().flatten())
    assert _example("gcn").main(["--data", str(path), "--epochs", "3", "--compare-steps", "0"]) >= 0
