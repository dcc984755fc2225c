"""``pilot.draw`` with this plugin's curricula: prompts the pilots found without signal are screened less often.

A simulated staged host stands in for a framework: 12 of 16 prompts are always solved (their pilot rewards are
all 1), the others alternate 1, 0; each step asks the pilot's stages for their rollouts and runs the trained
batch, as a host of the staged-generation seam does. Counted with a fixed seed against the pilot's own shuffle.
"""

from __future__ import annotations

import pytest

from dataflex_core.session import DataFlexSession, StagedGeneration
from dataflex_core.step import FieldSupport, HostCapabilities, LossWeights, SeamSupport, TrainSampler
from dataflex_lab.testing import PromptDataset, run_staged_step

HOST = HostCapabilities(
    name="stagedhost",
    seams={LossWeights: SeamSupport(True), StagedGeneration: SeamSupport(True), TrainSampler: SeamSupport(True)},
    fields={n: FieldSupport(True) for n in ("response_mask", "rm_scores", "uid")},
    timings=("pre_rollout", "post_reward", "post_advantage"),
)
PILOT = {
    "mechanism": "pilot",
    "scorer": {"name": "group_reward_variance"},
    "actuator": {"name": "threshold_band", "params": {"low": 0.0, "high": 1.0e9}},
}
DRAWS = {
    "greso": {"scorer": {"name": "greso"}, "actuator": {"name": "temperature", "params": {"temperature": 1.0}}},
    "greso_adaptive": {"scorer": {"name": "greso_adaptive"},
                       "actuator": {"name": "temperature", "params": {"temperature": 1.0, "exploration": 0.0}}},
    "solve_rate_ema": {"scorer": {"name": "solve_rate_ema", "params": {"alpha": 1.0}},
                       "actuator": {"name": "learnability"}},
}  # fmt: skip
PROMPTS = 16


def solved(prompt: int) -> bool:
    return prompt < 12


def session(draw) -> DataFlexSession:
    pilot = {"prompts": 2, "rollouts": 2, "max_stages": 4, "on_short": "backfill"}
    if draw is None:
        block = {**PILOT, "prompt_key": "index", "pilot": pilot}
    else:
        block = {**PILOT, "pilot": {**pilot, "draw": {"mechanism": "curriculum", "prompt_key": "index", **draw}}}
    flex = DataFlexSession(block)
    flex.mount(HOST, loss_unit="token", adv_estimator="grpo", is_group_estimator=lambda name: True)
    flex.train_sampler(PromptDataset(range(PROMPTS)), batch_size=2, seed=0)  # ids: the rows
    flex.seam(StagedGeneration).prepare(PROMPTS, batch_size=2, seed=0)
    return flex


def step(flex, step_id):
    """One staged step on the simulated task (always-solved prompts reward 1, the others 1, 0, ...), its trained
    batch run; the dataset rows it screened."""
    reward = lambda prompt, k: 1.0 if solved(prompt) else float(k % 2)  # noqa: E731
    stages, _ = run_staged_step(flex, step_id, reward, groups=2, rollout_n=4)
    return stages.prompt.tolist()


@pytest.mark.parametrize("name", sorted(DRAWS))
def test_a_curriculum_draw_screens_fewer_always_solved_prompts_than_the_pilots_shuffle(name):
    screened = {}
    for label, draw in [("shuffle", None), (name, DRAWS[name])]:
        flex = session(draw)
        screened[label] = sum(solved(p) for step_id in range(1, 13) for p in step(flex, step_id))
        assert int(flex.ledger.rollouts.sum()) > 0  # every stage fed the ledger
    assert screened[name] < 0.8 * screened["shuffle"], screened
