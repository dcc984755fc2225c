"""The compute counters: what each step generated, trained, filtered and wasted, and totals that survive a resume."""

from __future__ import annotations

import pytest
import torch

from dataflex_core.compute import COMPUTE_PREFIX, COUNTERS, ComputeTotals, compute_counters
from dataflex_core.step.state import encode_component_state, read_component_state, write_component_state
from dataflex_lab.testing import grpo_batch, rows_batch


def counts(metrics: dict[str, float]) -> dict[str, float]:
    return {name: metrics[f"{COMPUTE_PREFIX}{name}"] for name in COUNTERS}


def test_a_plain_batch_counts_real_rows_tokens_and_zero_advantage_rows():
    # two groups of two: the first has rewards 1, 0 (advantages +-1), the second zero variance (advantages 0);
    # an empty response and a verl padding row
    batch = rows_batch(
        [3, 2, 4, 1, 0, 0], width=4, advantages=[1.0, -1.0, 0.0, 0.0, 0.0, 0.0],
        padding=[False, False, False, False, False, True],
    )  # fmt: skip
    out = compute_counters(
        batch.batch["response_mask"], batch.batch["advantages"], is_padding=batch.batch["is_padding"]
    )
    assert counts(out) == {
        "rollouts_generated": 5.0,  # the padding row is not a rollout; the empty response is
        "rollouts_trained": 4.0,  # the empty response trains nothing
        "rollouts_filtered": 0.0,
        "rollouts_wasted": 2.0,  # the zero-variance group
        "tokens_generated": 10.0,
        "tokens_trained": 10.0,
        "generation_rounds": 1.0,
        "refills": 0.0,
    }
    assert not any(name.endswith("_total") for name in out)  # no totals without a ComputeTotals


def test_kept_rows_and_evicted_groups_are_filtered_and_per_row_advantages_count():
    mask = rows_batch([2, 2, 3, 3], width=3).batch["response_mask"]
    out = compute_counters(
        mask, torch.tensor([0.5, -0.5, 0.0, 0.0]), kept=torch.tensor([True, True, False, False]),
        evicted_rollouts=4, evicted_tokens=9, generation_rounds=2, refills=1,
    )  # fmt: skip
    got = counts(out)
    assert got["rollouts_generated"] == 8 and got["tokens_generated"] == 19
    assert got["rollouts_trained"] == 2 and got["tokens_trained"] == 4
    assert got["rollouts_filtered"] == 6 and got["rollouts_wasted"] == 0  # dropped zero rows are not wasted
    assert got["generation_rounds"] == 2 and got["refills"] == 1


def test_a_nonzero_advantage_outside_the_mask_does_not_make_a_row_move():
    mask = torch.tensor([[1, 1, 0]])
    assert counts(compute_counters(mask, torch.tensor([[0.0, 0.0, 5.0]])))["rollouts_wasted"] == 1


def test_totals_accumulate_and_come_back_from_a_checkpoint(tmp_path):
    totals = ComputeTotals()
    batch = grpo_batch(8, 4, seed=3)
    first = compute_counters(batch.batch["response_mask"], batch.batch["advantages"], totals=totals)
    second = compute_counters(batch.batch["response_mask"], batch.batch["advantages"], totals=totals)
    for name in COUNTERS:
        assert second[f"{COMPUTE_PREFIX}{name}_total"] == 2 * first[f"{COMPUTE_PREFIX}{name}"]
    write_component_state(tmp_path, encode_component_state({"compute": totals}, 2))
    resumed = ComputeTotals()
    resumed.load_state_dict(read_component_state(tmp_path).components["compute"]["state"])
    third = compute_counters(batch.batch["response_mask"], batch.batch["advantages"], totals=resumed)
    assert third[f"{COMPUTE_PREFIX}rollouts_generated_total"] == 3 * first[f"{COMPUTE_PREFIX}rollouts_generated"]


def test_a_state_with_an_unknown_counter_is_refused():
    with pytest.raises(ValueError, match=r"state\['rollouts_imagined'\] is 3: an unknown counter"):
        ComputeTotals().load_state_dict({"rollouts_imagined": 3})
