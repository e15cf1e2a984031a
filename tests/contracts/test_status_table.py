"""The C status table, exported by _C.status_messages(): every kernel status that is a
ValueError raises exactly the exported message (followed, for an index out of range, by
where it is), so Python can read the messages instead of typing them again."""
import re

import pytest
import torch

from torchsparsegradutils import _C

I64 = dict(dtype=torch.int64)


def _spmm(ptr, col, n, m):
    """_C.spmm of an n x m CSR structure (values ones) with a ones B."""
    _C.spmm(torch.tensor(ptr, **I64), torch.tensor(col, **I64), torch.ones(len(col)), 1, n, m,
            torch.ones(m, 2), torch.empty(n, 2), 1)


def _trisolve(ptr, col, val, upper, unit):
    """_C.trisolve of a 2 x 2 CSR A on a ones right-hand side."""
    _C.trisolve(torch.tensor(ptr, **I64), torch.tensor(col, **I64), torch.tensor(val), 1, 2,
                torch.ones(2, 1), upper, unit, False, 1)


# one malformed input per status, each reaching its check in C
CASES = {
    "EPTR_ENDS": lambda: _spmm([1, 1], [], 1, 2),                      # does not start at 0
    "EPTR_ORDER": lambda: _spmm([0, 2, 1, 2], [0, 1], 3, 2),           # 2 then 1
    "ECOL_RANGE": lambda: _spmm([0, 1], [5], 1, 2),                    # column 5 of 2
    "ECOL_ORDER": lambda: _spmm([0, 2], [1, 0], 1, 2),                 # 1 then 0 in a row
    "EIDX_RANGE": lambda: _C.coo_row_ptr(torch.tensor([[0], [5]], **I64), (2, 2), None, 1),
    "EIDX_ORDER": lambda: _C.coo_row_ptr(torch.tensor([[1, 0], [0, 0]], **I64), (2, 2),
                                         torch.empty(3, **I64), 1),    # rows 1 then 0
    "ETRI_SIDE": lambda: _trisolve([0, 1, 3], [0, 0, 1], [1.0, 2.0, 1.0], True, False),
    "EDIAG_ZERO": lambda: _trisolve([0, 1, 2], [0, 0], [1.0, 2.0], False, False),
    "EDIAG_UNIT": lambda: _trisolve([0, 1, 1], [0], [1.0], False, True),
    "EGROUP": lambda: _C.group_rows(torch.tensor([0, 3], **I64), 2, torch.empty(3, **I64),
                                    torch.empty(2, **I64)),            # relation 3 of 2
    "EARG": lambda: _C.sddmm_arg(torch.tensor([0, 1], **I64), torch.tensor([0], **I64), 1, 1, 1,
                                 torch.tensor([[1]], dtype=torch.int32), torch.ones(1, 1),
                                 torch.ones(1, 1), torch.empty(1), 1),  # offset 1 in a row of 1
}
# what a status raises after its message, where the kernel says where: the index out of range
DETAIL = {"EIDX_RANGE": ": column index 5 at entry 0 is out of range for dimension 1 of size 2"}
# EROW_LONG needs a row of 2^31 stored entries (16 GiB of column indices): its message is
# exported with the others, but no test builds such a row
UNBUILT = {"EROW_LONG"}


def test_status_messages_names_every_value_error_status():
    msgs = _C.status_messages()
    assert set(msgs) == set(CASES) | UNBUILT
    assert all(isinstance(m, str) and m for m in msgs.values())
    assert len(set(msgs.values())) == len(msgs)                        # one message per status
    assert _C.status_messages() is not msgs                            # a fresh dict: callers cannot edit the table


@pytest.mark.parametrize("name", sorted(CASES))
def test_kernel_status_raises_the_exported_message(name):
    with pytest.raises(ValueError, match=f"^{re.escape(_C.status_messages()[name] + DETAIL.get(name, ''))}$"):
        CASES[name]()
