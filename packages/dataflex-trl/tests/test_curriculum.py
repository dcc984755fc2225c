"""``mechanism: curriculum`` in TRL's real training loop: the prompts TRL generates for follow the sampler's
probabilities, each generation batch feeds the prompt history, and the history survives a resume."""

from __future__ import annotations

import os

import pytest
import torch
from trl_testkit import NUM_GENERATIONS, PROMPTS_PER_STEP

from dataflex_core import IncompatibleComponentError, register_scorer
from dataflex_core.step.state import CHECKPOINT_STATE
from dataflex_lab.testing.components import DomainPreferenceScorer
from dataflex_lab.trl.toy import echo_reward


@register_scorer("trltest_vowels_thrice")
class VowelsThrice(DomainPreferenceScorer):
    """pre_rollout: 3 for vowel prompts, 1 for the others; counts the steps it observed (state)."""

    requires = ["domain", "rollouts"]
    domain_scores, other_score = {"vowel": 3.0}, 1.0

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.rollouts_seen: list[int] = []

    def score(self, batch, step_id, **ctx):
        self.rollouts_seen.append(int(batch.batch["rollouts"].sum()))
        return super().score(batch, step_id, **ctx)


BLOCK = {
    "mechanism": "curriculum",
    "prompt_key": "index",
    "scorer": {"name": "trltest_vowels_thrice"},
    "actuator": {"name": "trltest_proportional"},
}


def test_each_generation_batch_is_drawn_by_the_samplers_probabilities(make_trainer):
    seen: list[list[str]] = []

    def reward(completions, answer, domain, **kwargs):
        seen.append(list(domain))
        return echo_reward(completions, answer)

    trainer = make_trainer("dapo", BLOCK, reward=reward, max_steps=8)
    trainer.train()
    assert len(seen) == 8
    # TRL's layout: each drawn prompt NUM_GENERATIONS times in a row
    for domains in seen:
        assert len(domains) == PROMPTS_PER_STEP * NUM_GENERATIONS
        assert all(len(set(domains[i : i + NUM_GENERATIONS])) == 1 for i in range(0, len(domains), NUM_GENERATIONS))
    share = sum(d == "vowel" for domains in seen for d in domains) / sum(len(d) for d in seen)
    assert share == pytest.approx(0.75, abs=0.12)  # 3/4 of the probability on the 32 vowel prompts of 64
    logged = [h for h in trainer.state.log_history if "dataflex/curriculum/draw/max_probability" in h]
    assert len(logged) == 8
    assert logged[0]["dataflex/curriculum/draw/max_probability"] == pytest.approx(3 / (3 * 32 + 32))


def test_the_history_is_fed_by_every_generation_batch_and_survives_a_resume(make_trainer):
    first = make_trainer("dapo", BLOCK, max_steps=2, save_strategy="steps", save_steps=2)
    first.train()
    history = first.dataflex.sampler.history
    assert int(history.rollouts.sum()) == 2 * PROMPTS_PER_STEP * NUM_GENERATIONS
    assert history.last_step == 2
    scorer = first.dataflex.pipeline.scorer
    # accelerate fetches one batch ahead: the prompts of step 2 were drawn before step 1's rewards existed
    assert scorer.rollouts_seen == [0, 0, PROMPTS_PER_STEP * NUM_GENERATIONS]
    saved = torch.load(os.path.join(first.args.output_dir, "checkpoint-2", CHECKPOINT_STATE), weights_only=True)
    assert int(saved["components"]["history"]["state"]["rollouts"].sum()) == 32

    resumed = make_trainer("dapo", BLOCK, max_steps=3, save_strategy="no")
    resumed.train(resume_from_checkpoint=True)
    assert resumed.dataflex.sampler.history.last_step == 3
    assert int(resumed.dataflex.sampler.history.rollouts.sum()) == 3 * 16  # continued, one more step
    assert resumed.dataflex.pipeline.scorer.observed == 3


def test_curriculum_reads_columns_the_dataset_has(make_trainer, dataset):
    with pytest.raises(IncompatibleComponentError, match=r"dataset column\(s\) \['problem_id'\]"):
        make_trainer("dapo", {**BLOCK, "prompt_key": "problem_id"})
