"""Real TRL training loops with DataFlex: mix draws prompts by the mixer's proportions, state survives a resume."""

from __future__ import annotations

import collections
import os

import pytest

from dataflex_core.lock.pinning import CHECKPOINT_PINNING, CHECKPOINT_PLUGIN_SET
from dataflex_core.step.state import CHECKPOINT_STATE
from dataflex_lab.trl.toy import echo_reward


def test_mix_draws_each_generation_batch_by_the_mixers_proportions(make_trainer):
    seen: list[list[str]] = []

    def reward(completions, answer, domain, **kwargs):
        seen.append(list(domain))
        return echo_reward(completions, answer)

    block = {
        "mechanism": "mix",
        "scorer": {"name": "reward_difficulty"},
        "actuator": {"name": "static", "params": {"proportions": {"vowel": 0.75, "consonant": 0.25}}},
        "domains": ["vowel", "consonant"],
    }
    trainer = make_trainer("dapo", block, reward=reward, max_steps=4)
    trainer.train()
    assert len(seen) == 4
    for domains in seen:  # 4 prompts x 4 completions per step: 3 vowel prompts, 1 consonant, every step
        assert collections.Counter(domains) == {"vowel": 12, "consonant": 4}
    logged = [h for h in trainer.state.log_history if "dataflex/mix/proportion/vowel" in h]
    assert [h["dataflex/mix/proportion/vowel"] for h in logged] == [pytest.approx(0.75)] * 4
    assert [h["dataflex/mix/batch_fraction/vowel"] for h in logged] == [pytest.approx(0.75)] * 4


def test_a_plain_prompt_order_is_trls_own_without_mix(make_trainer):
    from trl.trainer.utils import RepeatSampler

    trainer = make_trainer("dapo", {"scorer": {"name": "advantage_magnitude"}, "actuator": {"name": "softmax"}})
    assert type(trainer._get_train_sampler()) is RepeatSampler


def test_component_state_and_the_plugin_set_travel_with_trls_checkpoints(make_trainer, tmp_path):
    block = {"scorer": {"name": "hostkit_counter"}, "actuator": {"name": "trltest_proportional"}}
    first = make_trainer("dapo", block, max_steps=2, save_strategy="steps", save_steps=2)
    first.train()
    folder = os.path.join(first.args.output_dir, "checkpoint-2")
    for name in (CHECKPOINT_STATE, CHECKPOINT_PLUGIN_SET, CHECKPOINT_PINNING):
        assert os.path.exists(os.path.join(folder, name)), name
    rows = first.dataflex.pipeline.scorer.rows
    assert rows == 2 * 16
    logged = [entry for entry in first.state.log_history if "dataflex/compute/rollouts_generated" in entry]
    assert logged and all(entry["dataflex/compute/generation_rounds"] == 1.0 for entry in logged)
    assert first.dataflex.compute_totals.totals["rollouts_generated"] == rows

    resumed = make_trainer("dapo", block, max_steps=3, save_strategy="no")
    resumed.train(resume_from_checkpoint=True)
    assert resumed.dataflex.pipeline.scorer.rows == rows + 16  # continued from the checkpoint, one more step
    assert resumed.dataflex.compute_totals.totals["rollouts_generated"] == rows + 16  # and so did the totals
