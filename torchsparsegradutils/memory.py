"""Memory kept between calls on the CPU, and freeing it.

Two things are kept so that a training step's next call finds its memory paged in:

* the blocks of large outputs (sparse @ sparse's columns and values, and its values'
  gradients, each of 2 MiB or more) and of its backward's largest workspace, kept once
  their tensors are freed (or the call is done), up to 256 MiB in all: a fresh block of
  tens of MiB costs a page fault per 4 KiB page on its first write, which in a process
  that has allocated before takes as long as the product itself;
* sparse @ sparse's workspace (up to 256 MiB), where the product is computed before
  its size is known.

Such an output is a PyTorch tensor like any other, except that its storage cannot be
resized (``resize_`` raises; every out-of-place op, view and in-place update works).
"""
from . import _backends


def release_memory() -> int:
    """Free the memory kept between calls (the freed outputs' blocks and sparse @ sparse's
    workspace) and return the bytes freed.  Outputs still alive are untouched: their
    blocks are kept again once they are freed.  Nothing else changes: the next call
    allocates afresh.

    Examples
    --------
    >>> import torch
    >>> from torchsparsegradutils import release_memory, sparse_mm
    >>> n = 200_000                              # a product of 2 MiB of columns and of values
    >>> A = torch.sparse_coo_tensor(torch.stack([torch.arange(n), (7 * torch.arange(n)) % n]),
    ...                             torch.ones(n, dtype=torch.float64), (n, n))
    >>> C = sparse_mm(A, sparse_mm(A, A))
    >>> C._nnz(), C.values().sum().item()
    (200000, 200000.0)
    >>> del C                                    # its blocks are kept for the next product
    >>> release_memory() > 0
    True
    >>> release_memory()
    0
    """
    return _backends.release_kept()
