"""The examples run (on small inputs, so they cannot rot) and reach their accuracy band."""
import importlib.util
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
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


def test_sparse_linear_example_learns():
    assert _example("sparse_linear").main(["--epochs", "2", "--train", "3000"]) > 0.3   # chance: 0.1
