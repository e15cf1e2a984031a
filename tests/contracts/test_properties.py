"""Property tests: every public op and surface (registry.OPS) against the same computation in dense
PyTorch autograd, on inputs drawn by hypothesis: every COO/CSR layout and index
memory arrangement (duplicates, one entry, sliced/strided/expanded index arrays),
strided/expanded/sliced/negative-bit dense operands and upstream gradients, empty rows, nnz = 0, batched,
int32/int64 indices, float32/float64.  Example counts are bounded and the search is
derandomized, so each run tries the same cases."""
import pytest
import torch
from support.cases import Case, Spec
from support.operands import B_MODES
from support.registry import OPS, OPS_BY_NAME, run_case
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

PROPERTY_SETTINGS = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                             suppress_health_check=[HealthCheck.too_slow])


@st.composite
def specs(draw, op):
    layout = draw(st.sampled_from(op.layouts))
    csr_like = layout.startswith("csr") or layout == "dense"
    n, m = draw(st.integers(1, 9)), draw(st.integers(1, 9))
    return Spec(
        layout=layout,
        batched=op.batched and draw(st.booleans()),
        itype=draw(st.sampled_from(op.itypes)) if csr_like else torch.int64,   # COO indices are int64
        dtype=draw(st.sampled_from(op.dtypes)),
        n=n, m=m, p=draw(st.integers(0, 5)),
        nnz=draw(st.one_of(st.sampled_from([0, 1]), st.integers(0, n * m))),
        bmode=draw(st.sampled_from(B_MODES)),
        empty_rows=draw(st.booleans()),
        variant=draw(st.integers(0, op.variants - 1)),
        ours=draw(st.booleans()),
        seed=draw(st.integers(0, 2**16)),
    )


def _close(got, want, tol, what):
    if want is None:        # the reference does not depend on this input: its gradient is zero
        want = torch.zeros_like(got)
    assert got is not None, f"no gradient for {what}"
    torch.testing.assert_close(got, want, **tol, equal_nan=True, msg=lambda m: f"{what}: {m}")


@pytest.mark.parametrize("name", [op.name for op in OPS])
@PROPERTY_SETTINGS
@given(data=st.data())
def test_matches_dense_autograd(name, data):
    op = OPS_BY_NAME[name]
    op.fn()
    spec = data.draw(specs(op), label="spec")
    case = op.make(spec)
    gmode = data.draw(st.sampled_from(B_MODES), label="upstream gradient arrangement")
    out, grads = run_case(case, gmode=gmode)
    ref_out, ref_grads = run_case(Case(case.leaves, case.structure, case.ref, case.ref), gmode=gmode)
    tol = op.tol[spec.dtype]
    assert len(out) == len(ref_out)
    for k, (x, y) in enumerate(zip(out, ref_out)):
        assert x.shape == y.shape, f"output {k}: shape {tuple(x.shape)} != {tuple(y.shape)}"
        _close(x, y, tol, f"output {k}")
    for name in case.leaves:
        _close(grads[name], ref_grads[name], tol, f"gradient of {name}")
