import numpy as np
import pytest
import torch

from dataflex_core import (
    group_index,
    masked_seq_max,
    masked_seq_mean,
    masked_seq_sum,
    segment_count,
    segment_max,
    segment_mean,
    segment_min,
    segment_sum,
    segment_var,
)


def test_group_index_maps_equal_uids_to_equal_dense_ids():
    uid = np.array(["b", "a", "b", "c", "a"], dtype=object)
    index, n = group_index(uid)
    assert n == 3
    assert index.dtype == torch.long
    assert index[0] == index[2] and index[1] == index[4]
    assert len({index[0].item(), index[1].item(), index[3].item()}) == 3


def test_object_ids_are_grouped_by_their_text_numeric_ids_by_value():
    """The documented rule: an id's text is its identity in an object array (as after a JSON round trip)."""
    index, n = group_index(np.array([1, "1", 2, 1.0], dtype=object))
    assert n == 3 and index[0] == index[1] and index[0] != index[3]
    index, n = group_index(np.array([1, 2, 1], dtype=np.int64))
    assert n == 2 and index.tolist() == [0, 1, 0]


def test_group_index_accepts_tensors():
    index, n = group_index(torch.tensor([7, 3, 7]))
    assert n == 2 and index.tolist() == [1, 0, 1]


def _reference(values, index, mask, fn):
    out = []
    for g in range(int(index.max()) + 1):
        member = (index == g) & mask
        out.append(fn(values[member]) if member.any() else None)
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_segment_reductions_match_a_per_group_loop(seed):
    gen = torch.Generator().manual_seed(seed)
    values = torch.randn(50, generator=gen, dtype=torch.float64)
    index = torch.randint(0, 7, (50,), generator=gen)
    mask = torch.rand(50, generator=gen) > 0.3
    n = int(index.max()) + 1
    checks = [
        (segment_sum, lambda v: v.sum(), 0.0),
        (segment_mean, lambda v: v.mean(), 0.0),
        (segment_max, lambda v: v.max(), float("-inf")),
        (segment_min, lambda v: v.min(), float("inf")),
        (segment_var, lambda v: v.var(unbiased=False), 0.0),
    ]
    for op, ref, empty in checks:
        got = op(values, index, n, mask)
        for g, want in enumerate(_reference(values, index, mask, ref)):
            expected = empty if want is None else want.item()
            assert got[g].item() == pytest.approx(expected, rel=1e-9, abs=1e-12), (op.__name__, g)
    counts = segment_count(index, n, mask)
    assert counts.tolist() == [float(((index == g) & mask).sum()) for g in range(n)]


def test_masked_sequence_reductions_ignore_masked_tokens_and_empty_rows_give_zero():
    x = torch.tensor([[1.0, -5.0, 3.0], [2.0, 2.0, 100.0], [9.0, 9.0, 9.0]])
    mask = torch.tensor([[1, 0, 1], [1, 1, 0], [0, 0, 0]])
    assert masked_seq_sum(x, mask).tolist() == [4.0, 4.0, 0.0]
    assert masked_seq_mean(x, mask).tolist() == [2.0, 2.0, 0.0]
    assert masked_seq_max(x, mask).tolist() == [3.0, 2.0, 0.0]
