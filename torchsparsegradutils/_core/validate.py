"""The public ops' argument contracts, declared: each public module holds its op's spec,
and one function here per kind of spec checks the arguments against it, in a fixed order:
    SparseSpec   one sparse operand (softmax, log-sum-exp, sampled_addmm, graph attention): check_sparse
    ProductSpec  a sparse A with a dense B (sparse_mm, the triangular solve): check_product;
                 sparse_mm's dense A or sparse B: check_dense_a, check_sparse_operands
    SystemSpec   a 2D sparse A with a 1D or 2D B (generic solve, least squares): check_system
    GroupedSpec  dense a (N, D1) and b (R, D1, D2), a's rows grouped (gather_mm, segment_mm): check_grouped
What is the op's alone (a dim argument, shapes relating several operands) is checked by
a named function of its _ops family, after the spec.  Besides the specs: the dtypes
taken, the errors and their notes, the checks of the call's context (autograd,
torch.func, torch.compile).

Where the published torchsparsegradutils release fixes an error's message, ``str(e)``
is that message exactly (users and its tests compare it); what we know beyond it
(the sizes, layouts or dtypes found) is attached as an exception note, which
tracebacks print.
"""
import functools
import sys
from typing import NamedTuple, Optional, Tuple

import torch
import torch.autograd.forward_ad as forward_ad

from .sparse_csr import SparseCSR
from .view import check_arrays

SUPPORTED_DTYPES = (torch.float32, torch.float64)
# sparse_mm's kernels also take 16-bit values (summed in float32, rounded once)
HALF_DTYPES = (torch.float16, torch.bfloat16)
MM_DTYPES = HALF_DTYPES + SUPPORTED_DTYPES


def dtype_names(dtypes) -> str:
    """'float16, bfloat16, float32 and float64' for those dtypes."""
    names = [str(d).split(".")[-1] for d in dtypes]
    return ", ".join(names[:-1]) + " and " + names[-1]


def error(cls, message: str, detail: str = "") -> Exception:
    """cls(message), with `detail` as a note where Python supports notes (3.11+)."""
    e = cls(message)
    if detail and hasattr(e, "add_note"):
        e.add_note(detail)
    return e


def eager_only(fn):
    """fn, run eagerly under torch.compile: Dynamo cannot trace torch sparse tensors
    (pytorch#169119), so it breaks the graph at the call, and traces nothing inside
    it, instead of failing there.  (After a graph break Dynamo would otherwise compile
    fn's inner frames one by one, and fail in some.)  Outside any compiled region
    (no frame-evaluation callback installed, and not tracing) fn is called directly:
    the check costs 0.4 us a call.  The disabled fn is made here where Dynamo is loaded
    already, else at the first call under compilation: making it loads Dynamo (seconds),
    which a program that never compiles does not need, so importing the package does not."""
    if _eval_frame_callback is None:
        return torch.compiler.disable(fn)
    disabled = torch.compiler.disable(fn) if "torch._dynamo" in sys.modules else None

    @functools.wraps(fn)
    def run(*args, **kwargs):
        nonlocal disabled
        if not _is_compiling() and _eval_frame_callback() is None:
            return fn(*args, **kwargs)
        if disabled is None:        # Dynamo was loaded after fn's module (this call graph-breaks too)
            disabled = torch.compiler.disable(fn)
        return disabled(*args, **kwargs)

    return run


def constant_dim(d, ndim: int, error=IndexError) -> int:
    """d as a Python int in [-ndim, ndim), found by comparison: under torch.compile an
    int argument that changed between calls is traced as a symbolic int, which Python
    code cannot sort, test with `in` or format; each comparison specialises it.  Out of
    range: `error` with torch's message."""
    for k in range(-ndim, ndim):
        if d == k:
            return k
    raise error(f"Dimension out of range (expected to be in range of [{-ndim}, {ndim - 1}], but got {d})")


_is_compiling = torch.compiler.is_compiling
# Dynamo's frame-evaluation callback (None in plain eager code); not in every build
_eval_frame_callback = getattr(getattr(getattr(torch._C, "_dynamo", None), "eval_frame", None),
                               "get_eval_frame_callback", None)


def refuse_create_graph(op: str, sparse_csr_twice: bool = True) -> None:
    """In the backward of an op on a torch sparse tensor, differentiable once: a
    RuntimeError when a graph of the backward is asked for (create_graph=True), naming
    the way to second derivatives where there is one (the op on a SparseCSR, with
    sparse_csr_twice), rather than a gradient that silently records no graph."""
    if torch.is_grad_enabled():
        way = "for second derivatives (create_graph=True) pass a SparseCSR" if sparse_csr_twice else \
            "it has no second derivative (create_graph=True)"
        raise RuntimeError(f"{op} of a torch sparse tensor: differentiable once; {way}")


def records_graph(*tensors) -> bool:
    """Does an op on these tensors need its autograd.Function: grad mode on and one
    of them requiring grad, or a forward-mode AD level open (any tensor may carry a
    tangent then, and the Function is what refuses or propagates it)?"""
    if forward_ad._current_level >= 0:
        return True
    if not torch.is_grad_enabled():
        return False
    for t in tensors:
        if t.requires_grad:
            return True
    return False


_functorch_stack = torch._C._functorch.peek_interpreter_stack


def check_no_functorch(name: str) -> None:
    """torch.func transforms (grad, vjp, jvp, vmap) cannot carry sparse tensors: say so
    instead of failing inside PyTorch with a message about strides."""
    if _functorch_stack() is not None:
        raise RuntimeError(
            f"{name} does not support torch.func transforms (grad, vjp, jvp, vmap): PyTorch's sparse "
            "tensors cannot pass through them. Use torch.autograd.grad or .backward() instead")


def layout_hint(name: str, layout) -> str:
    """The note of a sparse operand of a layout other than COO or CSR: what it got, and
    the conversion to each of the two."""
    return (f"got {name} of layout {layout}: convert it with {name}.to_sparse() (COO) or "
            f"{name}.to_sparse_csr() (CSR)")


# sparse_mm's reduce= (torch.sparse.mm's): how each row's products are combined, and the
# names torch.sparse.mm also takes for two of them
REDUCTIONS = ("sum", "mean", "amax", "amin")
REDUCE_ALIASES = {"max": "amax", "min": "amin"}


def check_reduce(reduce, B) -> str:
    """sparse_mm's reduce: one of REDUCTIONS or an alias of one (returned as its name in
    REDUCTIONS), and with a sparse B "sum" alone (the product of two sparse matrices has
    no reduce); a ValueError naming what is allowed."""
    if isinstance(reduce, str):
        reduce = REDUCE_ALIASES.get(reduce, reduce)
    if not isinstance(reduce, str) or reduce not in REDUCTIONS:
        raise ValueError(f"reduce must be one of 'sum', 'mean', 'amax' (or 'max') or 'amin' (or 'min'), "
                         f"got {reduce!r}")
    if reduce != "sum" and isinstance(B, torch.Tensor) and B.layout is not torch.strided:
        raise error(ValueError, f"reduce={reduce!r} needs a dense B: with a sparse B, sparse_mm takes "
                                "reduce='sum' only", f"got B of layout {B.layout}")
    return reduce


# ---------------------------------------------------------------- the specs
Failure = Tuple[type, str]   # (exception class, message), the message formatted by _raise


class SparseSpec(NamedTuple):
    """An op's sparse operand: a torch sparse tensor of one of `layouts` or a SparseCSR, of
    one of `ranks`, without dense dimensions, of one of `dtypes`.  check_sparse checks, in
    this order (the rank before the layout with rank_first): the kind (not_sparse), the
    layout (bad_layout), the rank (bad_rank), dense dimensions (hybrid), a SparseCSR's
    arrays against its size (its values too where `values`, (nnz, H) ones where `heads`),
    the dtype (bad_dtype; no check where `dtypes` is empty: the op checks it with its
    other operands).  A message may name {name} (the op), {got} (what was found),
    {shape} (the operand's, for a bad rank or dense dims), {dtypes} (the dtypes taken)
    and {hint} (dense_hint, for a dense operand of the wrong layout)."""
    name: str
    layouts: tuple
    ranks: tuple
    not_sparse: Failure
    bad_layout: Failure
    bad_rank: Failure
    hybrid: Failure
    dtypes: tuple = ()
    bad_dtype: Optional[Failure] = None
    values: bool = True
    heads: bool = False
    rank_first: bool = False
    dense_hint: str = ""


def check_sparse(spec: SparseSpec, A) -> None:
    """A against spec (see SparseSpec)."""
    if not isinstance(A, (torch.Tensor, SparseCSR)):
        _raise(spec, spec.not_sparse, type(A).__name__)
    if spec.rank_first:
        _check_rank(spec, A)
    layout = A.layout
    if layout not in spec.layouts:
        _raise(spec, spec.bad_layout, layout, hint=spec.dense_hint if layout == torch.strided else "")
    if not spec.rank_first:
        _check_rank(spec, A)
    if A.dense_dim() != 0:
        _raise(spec, spec.hybrid, A.dense_dim(), tuple(A.shape))
    if isinstance(A, SparseCSR):
        check_arrays(A.crow_indices, A.col_indices, A.values if spec.values else None, A.size, heads=spec.heads)
    if spec.dtypes and A.dtype not in spec.dtypes:
        _raise(spec, spec.bad_dtype, A.dtype)


def _check_rank(spec: SparseSpec, A) -> None:
    if A.dim() not in spec.ranks:
        _raise(spec, spec.bad_rank, A.dim(), tuple(A.shape))


def _raise(spec: SparseSpec, failure: Failure, got, shape=(), hint: str = ""):
    cls, message = failure
    raise cls(message.format(name=spec.name, got=got, shape=shape, hint=hint, dtypes=dtype_names(spec.dtypes)
                             if spec.dtypes else ""))


class ProductSpec(NamedTuple):
    """An op on a sparse A (COO/CSR (n, m) or (b, n, m) without dense dims, or a SparseCSR)
    and a dense B of A's rank, batch size and device, both of one of `dtypes`; A square on
    its last two dimensions where `square`; B's rows matching A's dimension `rows` (-1:
    the product A @ B; -2: the solve A X = B)."""
    name: str
    dtypes: tuple
    rows: int = -1
    square: bool = False


def check_operands(spec: ProductSpec, A, B):
    """The first of check_product's checks: what the operands are (A a SparseCSR, or a
    torch COO or CSR tensor outside torch.func; B a tensor) and their ranks (2 or 3,
    alike), which choosing a route and shaping the output need.  The rest (dense
    dimensions, sizes, device, dtypes) the C glue checks in the arrays it is given, so
    the no-graph CPU route runs check_product only after a failure, for the published
    message (the contract argument of _backends.spmm_tensor and spmm_arrays).  Every
    property is read once (each read costs 0.2 to 0.5 us: this runs on every call).
    Returns (A's shape, A's layout, the tensor holding A's values)."""
    if isinstance(A, SparseCSR):
        a_shape, layout, values = A.size, torch.sparse_csr, A.values
    else:
        if _functorch_stack() is not None:    # check_no_functorch, called only to raise
            check_no_functorch(spec.name)
        if not isinstance(A, torch.Tensor):
            raise ValueError("Both A and B should be instances of torch.Tensor")
        a_shape, layout, values = A.shape, A.layout, A
    if not isinstance(B, torch.Tensor):
        raise ValueError("Both A and B should be instances of torch.Tensor")
    a_dim, b_dim = len(a_shape), B.dim()
    if a_dim < 2 or b_dim < 2:
        raise ValueError("Both A and B should be at least 2-dimensional tensors")
    if a_dim != b_dim or a_dim > 3:
        raise error(ValueError, "A and B must both be 2D or both be 3D tensors", f"got {a_dim}D and {b_dim}D")
    if layout is not torch.sparse_coo and layout is not torch.sparse_csr:
        raise error(ValueError, "A should be in either COO or CSR sparse format", layout_hint("A", layout))
    return a_shape, layout, values


def check_product(spec: ProductSpec, A, B, operands=None):
    """A and B against spec (see ProductSpec), with the published messages; returns A's
    shape.  A SparseCSR's arrays are checked against its size where they are taken in
    (view.view_of, or the C glue on the no-graph CPU path, at no cost).  operands:
    check_operands(spec, A, B), where the caller has it already."""
    a_shape, layout, values = operands or check_operands(spec, A, B)
    b_shape = B.shape
    if values is A and A.dense_dim() != 0:
        raise ValueError(f"A must not have dense dimensions (hybrid sparse tensors are not supported), "
                         f"got {A.dense_dim()}")
    if B.layout is not torch.strided:
        raise error(ValueError, "B must be a dense (strided) tensor", f"got {B.layout}")
    if len(a_shape) == 3 and a_shape[0] != b_shape[0]:
        raise error(ValueError, "If batched, A and B must have the same batch size",
                    f"got {a_shape[0]} and {b_shape[0]}")
    if not (values.is_cpu and B.is_cpu) and values.device != B.device:
        raise ValueError(f"A and B must be on the same device, got {values.device} and {B.device}")
    dtype = values.dtype
    if dtype not in spec.dtypes:
        raise TypeError(f"{spec.name} supports {dtype_names(spec.dtypes)} values, got A of dtype {dtype}")
    if B.dtype != dtype:
        raise TypeError(f"A and B must have the same dtype, got {dtype} and {B.dtype}")
    if spec.square and a_shape[-2] != a_shape[-1]:
        raise error(ValueError, "A must be square on its last two dimensions", f"got shape {tuple(a_shape)}")
    if a_shape[spec.rows] != b_shape[-2]:
        raise ValueError(f"Incompatible inner dimensions: A[..., {a_shape[spec.rows]}] vs B[..., {b_shape[-2]}]")
    return a_shape


def check_dense_a(spec: ProductSpec, A: torch.Tensor, B):
    """torch.sparse.mm's dense A: A strided (n, l) or (b, n, l); B strided, or sparse
    COO/CSR (or a SparseCSR), of A's rank and batch size with l rows; one device and one
    dtype (one of spec's).  Returns the product's shape."""
    if isinstance(B, SparseCSR):
        b_shape, values, layout = B.size, B.values, torch.sparse_csr
    elif isinstance(B, torch.Tensor):
        b_shape, values, layout = B.shape, B, B.layout
    else:
        raise ValueError("Both A and B should be instances of torch.Tensor")
    if layout not in (torch.strided, torch.sparse_coo, torch.sparse_csr):
        raise error(ValueError, "with a dense A, B must be dense or a sparse COO or CSR tensor",
                    layout_hint("B", layout))
    if layout is not torch.strided and values is B:
        check_no_functorch(spec.name)
        if B.dense_dim() != 0:
            raise ValueError(f"B must not have dense dimensions (hybrid sparse tensors are not supported), "
                             f"got {B.dense_dim()}")
    _check_pair(spec, A.shape, b_shape, A, values)
    return torch.Size([*A.shape[:-1], b_shape[-1]])


def check_sparse_operands(spec: ProductSpec, A, B):
    """Sparse @ sparse: A and B each a sparse COO/CSR tensor (n, m) or (b, n, m) without
    dense dims, or a SparseCSR; both 2D or both 3D with one batch size, A's columns B's
    rows, one device and one dtype (one of spec's).  Returns (A's shape, B's shape)."""
    shapes, values = [], []
    for X, which in ((A, "A"), (B, "B")):
        if isinstance(X, SparseCSR):
            shapes.append(X.shape)
            values.append(X.values)
            continue
        check_no_functorch(spec.name)
        if not isinstance(X, torch.Tensor):
            raise ValueError("Both A and B should be instances of torch.Tensor")
        if X.layout is not torch.sparse_coo and X.layout is not torch.sparse_csr:
            raise error(ValueError, f"{which} should be in either COO or CSR sparse format",
                        layout_hint(which, X.layout))
        if X.dense_dim() != 0:
            raise ValueError(f"{which} must not have dense dimensions (hybrid sparse tensors are not supported), "
                             f"got {X.dense_dim()}")
        shapes.append(X.shape)
        values.append(X)
    (a_shape, b_shape), (a, b) = shapes, values
    _check_pair(spec, a_shape, b_shape, a, b)
    return a_shape, b_shape


def _check_pair(spec: ProductSpec, a_shape, b_shape, a: torch.Tensor, b: torch.Tensor) -> None:
    """The contract of a product A @ B whose operands' kinds are checked, with the
    published messages: ranks 2 or 3 alike, one batch size, A's columns B's rows, one
    device, and one dtype of spec's (a and b: tensors holding the operands' values)."""
    if len(a_shape) < 2 or len(b_shape) < 2:
        raise ValueError("Both A and B should be at least 2-dimensional tensors")
    if len(a_shape) != len(b_shape) or len(a_shape) > 3:
        raise error(ValueError, "A and B must both be 2D or both be 3D tensors",
                    f"got {len(a_shape)}D and {len(b_shape)}D")
    if len(a_shape) == 3 and a_shape[0] != b_shape[0]:
        raise error(ValueError, "If batched, A and B must have the same batch size",
                    f"got {a_shape[0]} and {b_shape[0]}")
    if a_shape[-1] != b_shape[-2]:
        raise ValueError(f"Incompatible inner dimensions: A[..., {a_shape[-1]}] vs B[..., {b_shape[-2]}]")
    if a.device != b.device:
        raise ValueError(f"A and B must be on the same device, got {a.device} and {b.device}")
    if a.dtype not in spec.dtypes:
        raise TypeError(f"{spec.name} supports {dtype_names(spec.dtypes)} values, got A of dtype {a.dtype}")
    if b.dtype != a.dtype:
        raise TypeError(f"A and B must have the same dtype, got {a.dtype} and {b.dtype}")


class SystemSpec(NamedTuple):
    """An op on a 2D sparse COO/CSR A, square (or, `tall`, with at least as many rows as
    columns), of float32/float64 values, and a dense 1D or 2D B with A's rows and device
    (dtype agreement is the op's to decide)."""
    name: str
    tall: bool = False


def check_system(spec: SystemSpec, A, B) -> None:
    """A and B against spec (see SystemSpec), with the published messages."""
    check_no_functorch(spec.name)
    if not isinstance(A, torch.Tensor) or not isinstance(B, torch.Tensor):
        raise ValueError("Both A and B should be instances of torch.Tensor")
    if A.layout not in (torch.sparse_coo, torch.sparse_csr):
        raise TypeError(f"Unsupported sparse layout: {A.layout}. Only COO and CSR are supported.")
    if A.dim() != 2:
        raise error(ValueError, "A must be a 2D tensor", f"got {A.dim()}D")
    rows, cols = A.shape
    if rows < cols if spec.tall else rows != cols:
        rule = "A should be a tall full-rank matrix (rows >= columns)" if spec.tall else "A must be square"
        raise error(ValueError, rule, f"got shape {tuple(A.shape)}")
    if B.layout != torch.strided:
        raise error(TypeError, "B must be a dense (strided) tensor", f"got {B.layout}")
    if B.dim() not in (1, 2):
        raise error(ValueError, "B must be a 1D or 2D tensor", f"got {B.dim()}D")
    if B.shape[0] != rows:
        raise ValueError(f"Incompatible dimensions: A has shape {tuple(A.shape)}, B has shape {tuple(B.shape)}")
    if A.device != B.device:
        raise ValueError(f"A and B must be on the same device, got {A.device} and {B.device}")
    if A.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{spec.name} supports {dtype_names(SUPPORTED_DTYPES)} values, got {A.dtype}")


class GroupedSpec(NamedTuple):
    """An op on dense a (N, D1) and b (R, D1, D2) of one device and one float32/float64
    dtype, and a 1D `index` tensor grouping a's rows, of `index_size` entries ("N": one a
    row, "R": one b matrix)."""
    name: str
    index: str
    index_size: str


def check_grouped(spec: GroupedSpec, a, b, index) -> None:
    """a, b and the grouping's kind and rank against spec (see GroupedSpec), with the
    published messages; its size, dtype and values are the op's."""
    if not all(isinstance(t, torch.Tensor) for t in (a, b, index)):
        raise ValueError("Inputs should be instances of torch.Tensor")
    if a.dim() != 2 or b.dim() != 3 or index.dim() != 1:
        raise ValueError(
            "Input tensors have unexpected dimensions: a must be 2D (N, D1), b 3D (R, D1, D2) and "
            f"{spec.index} 1D ({spec.index_size},), got {a.dim()}D, {b.dim()}D and {index.dim()}D"
        )
    if a.layout != torch.strided or b.layout != torch.strided:
        raise ValueError(f"{spec.name} takes dense (strided) tensors, got {a.layout} and {b.layout}")
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"Incompatible size for inputs: a is {tuple(a.shape)} and b is {tuple(b.shape)} "
                         "(a's columns must match b's rows)")
    if a.device != b.device:
        raise ValueError(f"a and b must be on the same device, got {a.device} and {b.device}")
    if a.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{spec.name} supports float32 and float64 values, got a of dtype {a.dtype}")
    if b.dtype != a.dtype:
        raise TypeError(f"a and b must have the same dtype, got {a.dtype} and {b.dtype}")
