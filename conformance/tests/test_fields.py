"""Synthetic batches hold plausible verl values, and custom fields have a clear way in."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dataflex_conformance import BatchFactory, Case, MissingFieldError
from dataflex_conformance.batches import group_permutation, row_permutation


def test_known_fields_have_verl_value_ranges():
    sample = BatchFactory([]).build(Case("t", bs=12, length=9, empty_rows=(3,)), "cpu")
    b = sample.batch.batch
    mask = b["response_mask"]
    assert mask.dtype == torch.int64 and mask[3].sum() == 0 and mask[0].sum() == 9
    assert (b["old_log_probs"] <= 0).all() and (b["ref_log_prob"] <= 0).all() and (b["rollout_log_probs"] <= 0).all()
    assert (b["entropy"] >= 0).all()
    assert torch.equal(b["advantages"] * (1 - mask), torch.zeros_like(b["advantages"]))
    # rm_scores: the outcome reward sits on the last response token only.
    lengths = mask.sum(-1)
    nonzero_cols = [row.nonzero().flatten().tolist() for row in b["rm_scores"]]
    for row, cols in enumerate(nonzero_cols):
        assert cols in ([], [int(lengths[row]) - 1])
    # GRPO advantages are normalised within each uid group of valid rows.
    uid = sample.batch.non_tensor_batch["uid"]
    per_row = b["advantages"][:, 0]
    for group in set(uid.tolist()):
        rows = [i for i in range(12) if uid[i] == group and i != 3]
        assert abs(float(per_row[rows].mean())) < 1e-5
    assert b["responses"].shape == (12, 9) and b["input_ids"].shape == (12, 13)


def test_batches_are_real_rows_with_an_empty_response_row_inside_a_group():
    """What hosts hand components: no padding rows, and an empty-response row among its group."""
    sample = BatchFactory([]).build(Case("d"), "cpu")
    b, uid = sample.batch.batch, sample.batch.non_tensor_batch["uid"]
    assert "is_padding" not in b
    assert sample.nonempty.tolist() == [True] * 5 + [False] + [True] * 2
    assert list(uid[4:8]) == [uid[4]] * 4  # the empty row 5 shares its uid group with three answered rows
    # junk on the empty row: a component that lets it into a statistic visibly changes the others
    assert b["entropy"][5].abs().max() > 2.0 >= b["entropy"][~sample.nonempty.bool()].new_tensor(0.0)
    tiny = BatchFactory([]).build(Case("one", bs=1), "cpu")
    assert tiny.nonempty.tolist() == [True]  # too small to hold an empty row besides a real one


def test_builds_are_fresh_and_seeded_and_cast_floats_to_the_case_dtype():
    factory = BatchFactory([])
    a, b = factory.build(Case("x"), "cpu"), factory.build(Case("x"), "cpu")
    assert a.batch.batch["advantages"] is not b.batch.batch["advantages"]
    assert torch.equal(a.batch.batch["advantages"], b.batch.batch["advantages"])
    half = factory.build(Case("h", dtype=torch.bfloat16), "cpu").batch.batch
    assert half["advantages"].dtype == torch.bfloat16 and half["response_mask"].dtype == torch.int64


def test_a_required_unknown_field_names_itself_and_both_ways_to_supply_it():
    with pytest.raises(MissingFieldError) as info:
        BatchFactory(["reward_model_logits"], who="scorer 'mine'")
    text = str(info.value)
    assert "scorer 'mine' requires field 'reward_model_logits'" in text
    assert "fields={'reward_model_logits': make_reward_model_logits}" in text
    assert "--fields MODULE:MAPPING" in text
    assert isinstance(info.value, NotImplementedError)


def test_custom_synthesiser_supplies_the_field_and_sees_the_layout():
    seen = {}

    def make(ctx):
        seen["shape"] = (ctx.bs, ctx.length)
        return ctx.randn(ctx.bs, ctx.length).abs()

    sample = BatchFactory(["novelty"], {"novelty": make, "tags": lambda ctx: np.array(["t"] * ctx.bs)}).build(
        Case("c", bs=5, length=4), "cpu"
    )
    assert seen["shape"] == (5, 4)
    assert sample.batch.batch["novelty"].shape == (5, 4)
    assert list(sample.batch.non_tensor_batch["tags"]) == ["t"] * 5


def test_permutations_move_every_row_or_whole_groups():
    perm = row_permutation(12, 0)
    assert sorted(perm.tolist()) == list(range(12)) and (perm != torch.arange(12)).all()
    uid = np.array([f"g{i // 4}" for i in range(12)], dtype=object)
    groups = group_permutation(uid, 1)
    blocks = [tuple(uid[groups[i : i + 4]].tolist()) for i in range(0, 12, 4)]
    assert all(len(set(block)) == 1 for block in blocks)
