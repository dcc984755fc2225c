"""prepare_batch: the step's values are computed once, equal the helpers' own, and are never stale."""

import numpy as np
import pytest
import torch

import dataflex_core.precomputed as precomputed
from dataflex_core import (
    STEP_INPUTS_KEY,
    Batch,
    actuator_scores,
    group_index,
    mean_one,
    prepare_batch,
    response_token_mask,
    valid_sample_mask,
    valid_token_counts,
    valid_token_mask,
)
from dataflex_core.contracts import require_groups
from dataflex_core.precomputed import step_inputs


def _batch(padding=True, seed=0):
    gen = torch.Generator().manual_seed(seed)
    bs, length = 12, 7
    lengths = torch.randint(0, length + 1, (bs,), generator=gen)
    lengths[3] = 0  # an empty response
    mask = (torch.arange(length) < lengths.unsqueeze(1)).to(torch.int64)
    uid = np.array([f"g{i % 4}" for i in range(bs)], dtype=object)
    tensors = {"response_mask": mask, "advantages": torch.randn(bs, length, generator=gen)}
    if padding:
        is_padding = torch.zeros(bs, dtype=torch.bool)
        is_padding[-2:] = True
        tensors["is_padding"] = is_padding
        uid[-2:] = "pad"
    return Batch(tensors, {"uid": uid})


def _expected(batch):
    """The helpers' values on an unprepared copy of ``batch``."""
    plain = Batch(batch.batch, batch.non_tensor_batch)
    return {
        "tokens": valid_token_mask(plain),
        "rows": valid_sample_mask(plain),
        "counts": valid_token_counts(plain),
        "response": response_token_mask(plain),
        "groups": group_index(plain.non_tensor_batch["uid"].copy()),
    }


def _values(batch):
    return {
        "tokens": valid_token_mask(batch),
        "rows": valid_sample_mask(batch),
        "counts": valid_token_counts(batch),
        "response": response_token_mask(batch),
        "groups": group_index(batch.non_tensor_batch["uid"]),
    }


def _assert_same(got, want):
    for key in ("tokens", "rows", "counts", "response"):
        assert torch.equal(got[key], want[key]), key
    assert torch.equal(got["groups"][0], want["groups"][0]) and got["groups"][1] == want["groups"][1]


@pytest.mark.parametrize("padding", [True, False])
def test_prepared_values_equal_the_helpers_own(padding):
    batch = _batch(padding)
    want = _expected(batch)
    assert prepare_batch(batch) is batch
    _assert_same(_values(batch), want)
    assert valid_token_counts(batch).tolist() == want["tokens"].sum(-1).tolist()


def test_each_value_is_computed_once_per_step(monkeypatch):
    calls = []
    real = precomputed.dense_group_index
    monkeypatch.setattr(precomputed, "dense_group_index", lambda uid, device=None: calls.append(1) or real(uid, device))
    batch = prepare_batch(_batch())
    first = _values(batch)
    second = _values(batch)
    for key in ("tokens", "rows", "counts", "response"):
        assert second[key] is first[key], key
    # The step's grouping of the uid strings is made once, for every component that needs groups.
    calls.clear()
    index, count = require_groups(batch, "t")
    assert require_groups(batch, "t")[0] is index and len(calls) == 1
    assert torch.equal(index, first["groups"][0]) and count == first["groups"][1]
    # A new step (prepare_batch again) starts afresh.
    prepare_batch(batch)
    require_groups(batch, "t")
    assert len(calls) == 2


def test_helpers_given_a_raw_uid_array_or_mask_compute_from_it(monkeypatch):
    calls = []
    real = precomputed.dense_group_index
    monkeypatch.setattr(
        "dataflex_core.groups.dense_group_index", lambda uid, device=None: calls.append(1) or real(uid, device)
    )
    batch = prepare_batch(_batch())
    group_index(batch.non_tensor_batch["uid"])
    group_index(batch.non_tensor_batch["uid"])
    assert len(calls) == 2
    # A batch whose uid was replaced is grouped by its own uid, not by the prepared one.
    batch.non_tensor_batch["uid"] = np.array(["x"] * 12, dtype=object)
    assert require_groups(batch, "t")[1] == 1


def test_a_replaced_or_modified_field_is_never_read_stale():
    batch = prepare_batch(_batch(padding=False))
    before = valid_token_mask(batch).clone()
    # In place on the batch's field: the version counter changes, the mask is recomputed.
    batch.batch["response_mask"][0] = 0
    assert not valid_token_mask(batch)[0].any() and before[0].any()
    # A replaced field: not the tensor the values came from.
    batch.batch["response_mask"] = torch.ones_like(batch.batch["response_mask"])
    assert valid_token_mask(batch).all() and valid_token_counts(batch).eq(7).all()
    # A replaced uid array is grouped afresh.
    batch = prepare_batch(_batch())
    index, _ = group_index(batch.non_tensor_batch["uid"])
    batch.non_tensor_batch["uid"] = np.array(["x"] * 12, dtype=object)
    assert group_index(batch.non_tensor_batch["uid"])[1] == 1 and index.max() > 0


def test_padding_must_match_for_the_values_to_be_reused():
    batch = prepare_batch(_batch(padding=True))
    tokens = valid_token_mask(batch)
    # The same masks without the padding field: two rows are padding, so the valid tokens differ.
    rebuilt = Batch({"response_mask": batch.batch["response_mask"]}, batch.non_tensor_batch, batch.meta_info)
    assert valid_token_mask(rebuilt)[-2:].any() and not tokens[-2:].any()
    # Without padding rows, a batch rebuilt without the field (or with an equal one) reuses the values.
    batch = prepare_batch(_batch(padding=False))
    batch.batch["is_padding"] = torch.zeros(12, dtype=torch.bool)
    prepare_batch(batch)
    tokens = valid_token_mask(batch)
    rebuilt = Batch({"response_mask": batch.batch["response_mask"]}, batch.non_tensor_batch, batch.meta_info)
    assert valid_token_mask(rebuilt) is tokens
    again = Batch({**batch.batch, "is_padding": torch.zeros(12, dtype=torch.bool)}, {}, batch.meta_info)
    assert valid_token_mask(again) is tokens


@pytest.mark.parametrize("computed_first", [True, False])
def test_select_rows_carries_the_values_restricted_to_the_rows(computed_first):
    batch = prepare_batch(_batch(padding=True))
    if computed_first:
        _values(batch)
        require_groups(batch, "t")
    rows = torch.tensor([True, False, True, True, False, True, True, False, True, False, True, True])
    sub = batch.select_rows(rows)
    want = _expected(sub)
    _assert_same(_values(sub), want)
    # Dense ids in sorted uid order, as grouping the sub-batch's own uid gives.
    index, count = step_inputs(sub).groups if computed_first else require_groups(sub, "t")
    assert torch.equal(index, want["groups"][0]) and count == want["groups"][1]
    # The parent's values are untouched.
    _assert_same(_values(batch), _expected(batch))


def test_helpers_built_on_the_masks_give_the_same_results_prepared_or_not():
    batch = _batch(padding=True)
    scores = torch.rand(12)
    token_scores = torch.rand(12, 7)
    want = (
        actuator_scores(scores, batch, owner="t", granularity="sample")[1],
        actuator_scores(token_scores, batch, owner="t", granularity="token")[1],
        mean_one(scores, batch),
        mean_one(token_scores, batch),
    )
    prepare_batch(batch)
    got = (
        actuator_scores(scores, batch, owner="t", granularity="sample")[1],
        actuator_scores(token_scores, batch, owner="t", granularity="token")[1],
        mean_one(scores, batch),
        mean_one(token_scores, batch),
    )
    for g, w in zip(got, want):
        assert torch.equal(g, w)


def test_prepare_batch_names_what_it_needs():
    with pytest.raises(TypeError, match="meta_info dict and a response_mask tensor, got dict"):
        prepare_batch({"response_mask": torch.ones(2, 2)})
    batch = Batch({"advantages": torch.ones(2, 2)})
    with pytest.raises(TypeError, match="got Batch"):
        prepare_batch(batch)
    assert STEP_INPUTS_KEY not in batch.meta_info
