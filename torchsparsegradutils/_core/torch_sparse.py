"""The torch sparse tensors the library builds, without PyTorch's warnings to users.

PyTorch warns, once a process, on the first sparse tensor whose constructor is not
told whether to check its invariants ("Sparse invariant checks are implicitly
disabled"), and on the first CSR tensor made at all ("Sparse CSR tensor support is in
beta state", or CSC).  A user who never called those constructors should not see either from
ours.  The components given here are checked already or built by index arithmetic, so
the checks are declined explicitly (``check=False``): nothing warns, and a user's own
first unchecked construction still does.  The public constructors pass the user's
choice (``torch.sparse.check_sparse_tensor_invariants``) on.  The CSR warning has no
opt-out: the first CSR tensor built here is built with it filtered (later ones cannot
raise it: PyTorch's once is spent, so a user's own first CSR construction after ours
is silent too); that costs one ``warnings.catch_warnings`` a process.  Nothing is
filtered globally.
"""
import warnings

import torch

_CSR_BETA = "Sparse (CSR|CSC) tensor support is in beta state"   # one warning, named by the layout
_csr_warning_due = True                    # no CSR tensor built here yet


def coo_tensor(indices, values, size=None, is_coalesced=None, check=False):
    """torch.sparse_coo_tensor(indices, values[, size], is_coalesced=...), its invariants
    checked only if ``check``."""
    if size is None:
        return torch.sparse_coo_tensor(indices, values, is_coalesced=is_coalesced, check_invariants=check)
    return torch.sparse_coo_tensor(indices, values, size, is_coalesced=is_coalesced, check_invariants=check)


def csr_tensor(crow_indices, col_indices, values, size=None, check=False):
    """torch.sparse_csr_tensor(crow_indices, col_indices, values[, size]), its invariants
    checked only if ``check``."""
    args = (crow_indices, col_indices, values) if size is None else (crow_indices, col_indices, values, size)
    if _csr_warning_due:
        return _first_compressed(torch.sparse_csr_tensor, args, check)
    return torch.sparse_csr_tensor(*args, check_invariants=check)


def csc_tensor(ccol_indices, row_indices, values, size, check=False):
    """torch.sparse_csc_tensor(ccol_indices, row_indices, values, size), its invariants
    checked only if ``check`` (the first compressed tensor, CSR or CSC, warns alike)."""
    args = (ccol_indices, row_indices, values, size)
    if _csr_warning_due:
        return _first_compressed(torch.sparse_csc_tensor, args, check)
    return torch.sparse_csc_tensor(*args, check_invariants=check)


def _first_compressed(constructor, args, check):
    global _csr_warning_due
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", _CSR_BETA, UserWarning)
        A = constructor(*args, check_invariants=check)
    _csr_warning_due = False
    return A


def user_checks() -> bool:
    """Whether the user asked PyTorch to check sparse tensors' invariants (for
    components that came from them)."""
    return torch.sparse.check_sparse_tensor_invariants.is_enabled()
