"""The one way every autograd Function saves a sparse operand for its backward.

`save_operand` / `load_operand` keep a view (and whatever else a Function needs)
across forward and backward so that in-place edits of A's values are caught or
cannot matter; `save_operands` / `load_operands` do the same for several sparse
operands (sparse @ sparse).
"""
import weakref
from typing import Optional

import torch

from .torch_sparse import csr_tensor
from .view import CSRView


def save_operand(ctx, A: torch.Tensor, view: CSRView, need_values: bool, *tensors) -> None:
    """Save the sparse operand A (seen as `view`) and `tensors` (None allowed) for backward.

    With need_values, the backward reads A's values, and never edited ones: the
    values arrays of a sparse tensor are aliases that do not share a version
    counter with the tensor the user built A from, so that tensor (the guard) is
    saved too and an in-place edit of it raises autograd's "modified by an
    inplace operation" error; where it cannot be found, the backward gets a
    private copy of the values.  A itself is kept for second derivatives."""
    save_operands(ctx, [(A, view, need_values)], *tensors)


def load_operand(ctx):
    """(view, A, tensors) as save_operand saved them; view.values is None unless
    the operand was saved with need_values."""
    ((view, A),), tensors = load_operands(ctx)
    return view, A, tensors


def save_operands(ctx, operands, *tensors) -> None:
    """save_operand of several sparse operands at once: `operands` holds an
    (A, view, need_values) for each; load_operands gives them back in order."""
    views, arrays = [], []
    for A, view, need_values in operands:
        if A.requires_grad and A.layout == torch.sparse_csr and A.dim() == 3:
            accumulate_batched_csr_grads(A)
        if A.requires_grad and A.layout == torch.sparse_coo and view.coo_indices is not None:
            flag_coalesced_grads(A, view.coo_indices)
        values = guard = None
        if need_values:
            values = view.values
            guard = values_guard(A)
            if guard is None and _shares_storage(values, A):
                values = values.clone()
        views.append(view._replace(ptr=None, col=None, values=None, coo_indices=None, rows=None))
        arrays += [view.ptr, view.col, values, view.coo_indices, view.rows, guard, A]
    ctx.tsgu_views = views
    ctx.save_for_backward(*arrays, *tensors)


def load_operands(ctx):
    """([(view, A), ...], tensors) as save_operands saved them."""
    saved, pairs = ctx.saved_tensors, []
    for q, view in enumerate(ctx.tsgu_views):
        ptr, col, values, coo_indices, rows, _, A = saved[7 * q:7 * q + 7]
        pairs.append((view._replace(ptr=ptr, col=col, values=values, coo_indices=coo_indices, rows=rows), A))
    return pairs, list(saved[7 * len(pairs):])


def accumulate_batched_csr_grads(A: torch.Tensor) -> None:
    """Make gradients of a batched CSR A accumulate correctly.

    PyTorch cannot add two batched CSR tensors (its sum is malformed or fails
    inside MKL), and autograd adds them when a leaf's .grad is already set or
    when A is used twice in one graph.  A hook on A (installed once) adds the
    values itself when the gradient reaches a leaf that already has one on the
    same pattern, and turns a malformed sum into a clear error."""
    if getattr(A, "_tsgu_batched_grad_hook", False):
        return
    ref, nnz = weakref.ref(A), A.col_indices().shape

    def hook(grad):
        if grad is None:          # undefined (see none_for_undefined): nothing to accumulate
            return None
        if grad.layout != torch.sparse_csr or grad.col_indices().shape != nnz or grad.values().shape != nnz:
            raise RuntimeError(
                "cannot sum the gradients of a batched CSR tensor used more than once in one graph: "
                "PyTorch's addition of batched CSR tensors is broken; use the tensor once per graph, "
                "or a COO tensor with three sparse dimensions")
        A = ref()
        old = A.grad if A is not None and A.grad_fn is None else None
        if old is None:
            return grad
        if not (old.layout == torch.sparse_csr and torch.equal(old.crow_indices(), grad.crow_indices())
                and torch.equal(old.col_indices(), grad.col_indices())):
            raise RuntimeError("cannot accumulate into A.grad: it does not hold a batched CSR tensor on A's "
                               "pattern (set A.grad = None before backward)")
        A.grad = None            # autograd then stores the sum instead of adding to it
        return csr_tensor(grad.crow_indices(), grad.col_indices(), old.values() + grad.values(), grad.shape)

    A.register_hook(hook)
    A._tsgu_batched_grad_hook = True


def flag_coalesced_grads(A: torch.Tensor, indices: torch.Tensor) -> None:
    """Keep the coalesced flag of a COO leaf A's gradient.

    Every route returns A's gradient flagged coalesced, on the index array of A's
    view, `indices`; PyTorch drops the flag as it stores the gradient into A.grad
    (pytorch#105916: AccumulateGrad rebuilds the tensor without it), so A.grad.values()
    raised.  Where the view reads A's own index array (A's entries sorted and unique,
    checked as the view was made: a coalesced A, or one not flagged whose entries are
    in order), a hook on A (installed once) flags A.grad again once stored, if it still
    holds that array (the same memory, shape and strides: O(1), no element compared;
    A keeps the array alive).  A gradient on another pattern (a sum with one, an
    uncoalesced A's) keeps what PyTorch gives it."""
    if not A.is_leaf or getattr(A, "_tsgu_coalesced_grad_hook", False) or \
            not hasattr(A, "register_post_accumulate_grad_hook"):          # PyTorch 2.0 has none
        return
    own = A._indices()
    if _identity(indices) != _identity(own):
        return

    def hook(A):
        g = A.grad
        if g is not None and g.layout == torch.sparse_coo and not g.is_coalesced() and \
                _identity(g._indices()) == _identity(own):
            g._coalesced_(True)

    A.register_post_accumulate_grad_hook(hook)
    A._tsgu_coalesced_grad_hook = True


def _identity(t: torch.Tensor) -> tuple:
    """Which memory t reads, and how (no look at the elements)."""
    return t.data_ptr(), tuple(t.shape), t.stride(), t.device


def values_guard(A: torch.Tensor) -> Optional[torch.Tensor]:
    """The tensor whose version counter moves when A's values are edited in place:
    the values given to view.csr_from_values / coo_from_values, or the leaf values
    given to torch's constructors; None when unknown."""
    values = getattr(A, "_tsgu_values", None)
    if values is not None:
        return values
    if A.grad_fn is None:
        return None
    name = type(A.grad_fn).__name__
    if name.startswith(("SparseCooTensorWithDimsAndTensorsBackward", "SparseCompressedTensorBackward")):
        for fn, _ in A.grad_fn.next_functions:
            leaf = getattr(fn, "variable", None)        # AccumulateGrad of a leaf values tensor
            if leaf is not None:
                return leaf
    return None


def _shares_storage(values: torch.Tensor, A: torch.Tensor) -> bool:
    """Does values alias A's own values array (rather than a private coalesced copy)?"""
    own = A._values() if A.layout == torch.sparse_coo else A.values()
    return values.numel() > 0 and values.untyped_storage().data_ptr() == own.untyped_storage().data_ptr()
