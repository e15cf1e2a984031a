"""PyTorch's warnings about sparse tensors reach users for their own calls, never for
the library's: "Sparse invariant checks are implicitly disabled" and "Sparse CSR tensor
support is in beta state".  PyTorch gives each once a process, so each case runs in a
fresh interpreter (with every warning shown) where the library's constructions come
first; a warning from them would be the one the process shows."""
import ast
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from support.children import PACKAGE_ROOT, child_env

INVARIANTS = "Sparse invariant checks are implicitly disabled"
CSR_BETA = "Sparse CSR tensor support is in beta state"
USER = "--- the user's own calls ---"

# library calls that build torch sparse tensors from dense or COO operands (none is
# given a torch CSR tensor: the user's construction of one would spend the CSR warning)
OURS = {
    "gcn_norm_to_torch": """
        A = tsgu.nn.gcn_adjacency(torch.tensor([[0, 1, 2], [1, 2, 0]]), 3)
        w = A.values.clone().requires_grad_()
        sparse_mm(A._replace(values=w).to_torch(), torch.randn(3, 2)).sum().backward()
        """,
    "sparse_csr_tensor": """
        w = torch.rand(3, requires_grad=True)
        A = sparse_csr_tensor(torch.tensor([0, 2, 3]), torch.tensor([0, 1, 1]), w, (2, 2))
        sparse_mm(A, torch.ones(2, 1)).sum().backward()
        sparse_csr_tensor(torch.tensor([0, 1, 2]), torch.tensor([0, 1]), torch.ones(2))
        """,
    "sparse_coo_tensor_and_solves": """
        w = torch.rand(3, requires_grad=True)
        A = sparse_coo_tensor(torch.tensor([[0, 1, 1], [0, 0, 1]]), w + 2, (2, 2))
        sparse_mm(A, torch.ones(2, 1)).sum().backward()
        sparse_coo_tensor(torch.tensor([[0, 1], [0, 1]]), torch.ones(2))
        A = sparse_coo_tensor(torch.tensor([[0, 1, 1], [0, 0, 1]]), w + 2, (2, 2))
        B = torch.randn(2, 1, requires_grad=True)
        sparse_triangular_solve(A, B, upper=False, transpose=True).sum().backward(retain_graph=True)
        sparse_generic_solve(A, B).sum().backward()          # its backward solves with A^T
        """,
    "utils": """
        from torchsparsegradutils.utils import rand_sparse, convert_coo_to_csr, sparse_block_diag, stack_csr
        C = convert_coo_to_csr(torch.eye(3).to_sparse())
        rand_sparse((4, 4), 5, layout=torch.sparse_csr)
        sparse_block_diag(C, C), stack_csr([C, C])
        """,
    "reordering": """
        from torchsparsegradutils.utils import reverse_cuthill_mckee, sparse_permute
        A = sparse_coo_tensor(torch.tensor([[0, 1, 2], [1, 2, 0]]), torch.rand(3, requires_grad=True), (3, 3))
        sparse_mm(sparse_permute(A, reverse_cuthill_mckee(A)), torch.ones(3, 1)).sum().backward()
        """,
}


def _run(code: str) -> str:
    """stderr of `code` in a fresh interpreter showing every warning."""
    proc = subprocess.run([sys.executable, "-W", "always", "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=300, env=child_env())
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


@pytest.mark.parametrize("name", OURS)
def test_library_constructions_do_not_warn(name):
    err = _run("import sys, torch\nimport torchsparsegradutils as tsgu\nimport torchsparsegradutils.nn\n"
               "from torchsparsegradutils import *\n" + textwrap.dedent(OURS[name]) +
               f"print({USER!r}, file=sys.stderr)\n"
               "torch.sparse_coo_tensor(torch.tensor([[0], [1]]), torch.ones(1), (2, 2))\n")
    ours, user = err.split(USER)
    assert INVARIANTS not in ours and CSR_BETA not in ours, ours
    assert INVARIANTS in user            # nothing filtered globally, PyTorch's once not spent by us


def test_user_csr_construction_still_warns():
    err = _run(f"""
        import sys, torch
        from torchsparsegradutils import sparse_mm
        sparse_mm(torch.eye(3).to_sparse(), torch.ones(3, 1))
        print({USER!r}, file=sys.stderr)
        torch.sparse_csr_tensor(torch.tensor([0, 1]), torch.tensor([0]), torch.ones(1), (1, 1))
        """)
    ours, user = err.split(USER)
    assert CSR_BETA not in ours and CSR_BETA in user


def test_gcn_example_prints_no_sparse_warning():
    proc = subprocess.run([sys.executable, "-W", "always", os.path.join(PACKAGE_ROOT, "examples", "gcn.py"),
                           "--epochs", "2", "--compare-steps", "1"],
                          capture_output=True, text=True, timeout=300, env=child_env())
    assert proc.returncode == 0, proc.stderr
    assert INVARIANTS not in proc.stderr and CSR_BETA not in proc.stderr, proc.stderr


def test_constructors_go_through_the_quiet_ones():
    """Every torch sparse constructor call in the package is made in _core/torch_sparse.py,
    which declines the invariant checks explicitly and filters the first CSR warning."""
    package = pathlib.Path(PACKAGE_ROOT) / "torchsparsegradutils"
    constructors = {"sparse_coo_tensor", "sparse_csr_tensor", "sparse_csc_tensor", "sparse_bsr_tensor",
                    "sparse_bsc_tensor", "sparse_compressed_tensor"}
    found = []
    for path in package.rglob("*.py"):
        if path.relative_to(package).as_posix() == "_core/torch_sparse.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr in constructors and isinstance(node.func.value, ast.Name) and \
                    node.func.value.id == "torch":
                found.append(f"{path.relative_to(package)}:{node.lineno}")
    assert not found, found
