"""Tests of segment_mm against a looped PyTorch reference with autograd, and gradcheck
(reference and shared checks from support/grouped.py)."""
import pytest
import torch
from support.grouped import (DTYPES, HAS_CUDA, SHAPES, check_against_reference, check_inplace_detected,
                             check_thread_bits, random_operands)

from torchsparsegradutils import segment_mm


def random_lengths(N, R, gen, itype=torch.int64):
    """R non-negative lengths summing to N, some of them zero."""
    cuts = torch.sort(torch.randint(0, N + 1, (max(R - 1, 0),), generator=gen)).values
    edges = torch.cat([torch.tensor([0]), cuts, torch.tensor([N])]) if R else torch.tensor([0])
    return torch.diff(edges).to(itype)


def relation_of_rows(lengths):
    return torch.repeat_interleave(torch.arange(lengths.numel()), lengths.long())


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("itype", [torch.int32, torch.int64], ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_matches_looped_reference(path, dtype, itype, shape):
    N, R, D1, D2 = shape
    a, b, gen = random_operands(N, R, D1, D2, dtype)
    lengths = random_lengths(N, R, gen, itype)
    check_against_reference(segment_mm, a, b, lengths, relation_of_rows(lengths), dtype)


def test_empty_segments_everywhere(path):
    a, b, _ = random_operands(10, 5, 4, 18, torch.float64)
    lengths = torch.tensor([0, 10, 0, 0, 0])
    check_against_reference(segment_mm, a, b, lengths, relation_of_rows(lengths), torch.float64)


def test_no_rows_and_no_segments(path):
    a, b, _ = random_operands(0, 3, 4, 5, torch.float64)
    check_against_reference(segment_mm, a, b, torch.zeros(3, dtype=torch.int64), [], torch.float64)
    a, b, _ = random_operands(0, 0, 4, 5, torch.float64)
    check_against_reference(segment_mm, a, b, torch.zeros(0, dtype=torch.int64), [], torch.float64)


def test_gradcheck(path):
    a, b, gen = random_operands(23, 4, 7, 9, torch.float64, seed=2)
    lengths = random_lengths(23, 4, gen)
    assert torch.autograd.gradcheck(lambda x, y: segment_mm(x, y, lengths),
                                    (a.requires_grad_(), b.requires_grad_()))


def test_same_bits_for_any_thread_count():
    a, b, gen = random_operands(3000, 5, 40, 36, torch.float32, seed=4)
    check_thread_bits(segment_mm, a, b, random_lengths(3000, 5, gen))


def test_inplace_edit_detected(path):
    a, b, _ = random_operands(20, 3, 4, 5, torch.float64)
    check_inplace_detected(segment_mm, a, b, torch.tensor([5, 0, 15]))


def test_errors():
    a, b = torch.randn(4, 3), torch.randn(2, 3, 5)
    lengths = torch.tensor([1, 3])
    with pytest.raises(ValueError, match="instances of torch.Tensor"):
        segment_mm(a, b, [1, 3])
    with pytest.raises(ValueError, match="unexpected dimensions"):
        segment_mm(a[0], b, lengths)
    with pytest.raises(ValueError, match="Incompatible size"):
        segment_mm(a, b, torch.tensor([1, 2, 1]))
    with pytest.raises(ValueError, match="Incompatible size"):
        segment_mm(a, torch.randn(2, 4, 5), lengths)
    with pytest.raises(ValueError, match="non-negative"):
        segment_mm(a, b, torch.tensor([-1, 5]))
    with pytest.raises(ValueError, match=r"must sum to the number of rows of a \(4\), got 5"):
        segment_mm(a, b, torch.tensor([2, 3]))
    with pytest.raises(ValueError, match="must sum"):
        segment_mm(a, b, torch.tensor([1, 2]))
    with pytest.raises(TypeError, match="integers"):
        segment_mm(a, b, lengths.float())
    with pytest.raises(TypeError, match="float32 and float64"):
        segment_mm(a.int(), b.int(), lengths)
    with pytest.raises(TypeError, match="same dtype"):
        segment_mm(a.double(), b, lengths)


def test_inputs_unchanged():
    a, b, gen = random_operands(50, 4, 6, 7, torch.float32)
    lengths = random_lengths(50, 4, gen)
    copies = [t.clone() for t in (a, b, lengths)]
    segment_mm(a, b, lengths)
    for t, c in zip((a, b, lengths), copies):
        assert torch.equal(t, c)


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_cuda_matches_cpu():
    a, b, gen = random_operands(300, 6, 12, 24, torch.float64, seed=5)
    lengths = random_lengths(300, 6, gen)
    check_against_reference(lambda x, y, s: segment_mm(x.cuda(), y.cuda(), s).cpu(), a, b, lengths,
                            relation_of_rows(lengths), torch.float64)
