"""The components inside core's curriculum step: rollouts stop being spent on prompts that teach nothing.

A simulated task stands in for a framework: each prompt has a fixed solve
probability (a third always solved, a third never, a third half the time);
every step draws 8 prompts with the curriculum sampler, rolls each out 4
times, and feeds the rewards back through the step, as a host does.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dataflex_core import Batch
from dataflex_core.step import (
    CurriculumSampler,
    DataFlexStep,
    FieldSupport,
    HostCapabilities,
    PromptHistory,
    PromptIds,
    mount_step,
)

HOST = HostCapabilities(
    name="simulated", resampling=True, timings=("pre_rollout", "post_reward"), fields={"rm_scores": FieldSupport(True)}
)
PROMPTS = 60
#: Solve probability of each prompt: 0 (hopeless), 1 (solved) or 0.5 (learnable), by thirds.
SOLVE = torch.tensor([0.0, 1.0, 0.5]).repeat(PROMPTS // 3)
BATCH, ROLLOUTS = 8, 4


def simulate(scorer: dict, sampler: dict, steps: int, seed: int = 0) -> torch.Tensor:
    """Rows drawn per step, ``(steps, BATCH)``, under the given curriculum."""
    block = {"mechanism": "curriculum", "scorer": scorer, "actuator": sampler}
    step = DataFlexStep(mount_step(block, HOST, loss_unit="token"))
    history = PromptHistory(PromptIds(list(range(1000, 1000 + PROMPTS)), "index"))
    curriculum = CurriculumSampler(step, history, {}, BATCH, seed=seed)
    step.sampler = curriculum
    generator = torch.Generator().manual_seed(seed)
    drawn = []
    for t in range(1, steps + 1):
        rows = torch.tensor(curriculum.next_block())
        drawn.append(rows)
        per_row = rows.repeat_interleave(ROLLOUTS)
        rewards = (torch.rand(len(per_row), generator=generator) < SOLVE[per_row]).float()
        scores = torch.zeros(len(per_row), 2)
        scores[:, -1] = rewards
        batch = Batch(
            {"response_mask": torch.ones(len(per_row), 2, dtype=torch.long), "rm_scores": scores},
            {"index": np.asarray((per_row + 1000).tolist(), dtype=object)},
        )
        step.run(batch, t)
    return torch.stack(drawn)


def learnable_share(drawn: torch.Tensor) -> float:
    return float((SOLVE[drawn.flatten()] == 0.5).double().mean())


@pytest.mark.parametrize(
    "scorer",
    [{"name": "solve_rate_ema", "params": {"alpha": 0.8}}, {"name": "mopps", "params": {"seed": 1}}],
    ids=["solve_rate_ema", "mopps"],
)
def test_learnability_turns_rollouts_to_the_prompts_that_teach(scorer):
    drawn = simulate(scorer, {"name": "learnability"}, steps=40)
    uniform = simulate(scorer, {"name": "temperature", "params": {"temperature": 1e9}}, steps=40)
    # a uniform draw gives the learnable third a third of the rollouts; the curriculum, once it has seen
    # the prompts, gives them most of the batch
    assert learnable_share(uniform[20:]) == pytest.approx(1 / 3, abs=0.1)
    assert learnable_share(drawn[20:]) > 0.5


def test_no_prompt_is_starved_by_the_floor():
    drawn = simulate({"name": "solve_rate_ema", "params": {"alpha": 1.0}}, {"name": "learnability"}, steps=150)
    # the hopeless and the solved prompts keep a share of about exploration * 2/3 of the draws
    never = set(range(PROMPTS)) - set(drawn.flatten().tolist())
    assert not never, f"prompts never drawn: {sorted(never)}"
