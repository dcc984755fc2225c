"""``mechanism: curriculum`` in verl's own fit loop: the prompts verl rolls out follow the sampler's
probabilities, and the prompt history (with the scorer's state and the sampler's position) survives a resume.

The curriculum here is a test pair (fit_components.py): a pre_rollout scorer that gives vowel prompts 1 and the
others 0 and records the history it is shown, and a sampler proportional to the scores. On the harness's
dataset (128 vowel prompts of 256) every vowel prompt has probability 1/128 and the others none, so every
prompt verl rolls out must be a vowel prompt, and a batch of 8 never repeats one.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from dataflex_core.step.state import CHECKPOINT_STATE
from dataflex_lab import toy_task
from dataflex_lab.verl.cpu_loop.runner import RunSpec

pytestmark = pytest.mark.fit

BLOCK = {
    "mechanism": "curriculum",
    "prompt_key": "index",
    "scorer": {"name": "fittest_vowels_only", "params": {}},
    "actuator": {"name": "fittest_proportional", "params": {}},
}
PROMPTS, SAMPLES = 8, 2


def _spec(steps: int, dump, **changes) -> RunSpec:
    spec = RunSpec(trainer_mode="dataflex_sync", dataflex=BLOCK, steps=steps, samples_per_prompt=SAMPLES, **changes)
    spec.extra = [f"trainer.rollout_data_dir={dump}"]
    return spec


def _first_run(fits):
    """Three steps, checkpointed at step 2 (and at the last step)."""
    return fits.run("curriculum_first", _spec(3, fits.root / "curriculum_first_rollouts", save_freq=2))


def _letters(dump, step: int) -> list[str]:
    """The prompt letter of every rollout verl generated in ``step`` (verl's own dump; prompts repeated per sample)."""
    letters = []
    for line in (dump / f"{step}.jsonl").read_text().splitlines():
        letter = json.loads(line)["input"].split("user\n", 1)[1][0]
        assert letter in toy_task.LETTERS
        letters.append(letter)
    return letters


def test_the_prompts_verl_rolls_out_follow_the_samplers_probabilities(fits):
    run = _first_run(fits)
    assert [r["step"] for r in run.steps] == [1, 2, 3]
    dump = fits.root / "curriculum_first_rollouts"
    vowels = set(toy_task.DOMAINS["vowel"])
    for step in (1, 2, 3):
        letters = _letters(dump, step)
        assert len(letters) == PROMPTS * SAMPLES
        assert set(letters) <= vowels, f"step {step} rolled out prompts the sampler gave no probability: {letters}"
        metrics = run.steps[step - 1]["metrics"]
        # the draw that chose this step's prompts, with the history of every step before: every row a
        # candidate, 1/128 for each vowel prompt, so 8 distinct prompts
        assert metrics["dataflex/curriculum/draw/history_step"] == step - 1
        assert metrics["dataflex/curriculum/draw/candidates"] == 256
        assert metrics["dataflex/curriculum/draw/max_probability"] == pytest.approx(1 / 128)
        assert metrics["dataflex/curriculum/draw/effective_fraction"] == pytest.approx(0.5)
        assert metrics["dataflex/curriculum/draw/uniform"] == 0.0
        assert metrics["dataflex/curriculum/prompts"] == PROMPTS


def test_the_history_is_fed_from_each_step_and_checkpointed(fits):
    run = _first_run(fits)
    seen = run.records("vowels_only")
    assert [r["step"] for r in seen] == [1, 2, 3]
    assert [r["rollouts"] for r in seen] == [0, PROMPTS * SAMPLES, 2 * PROMPTS * SAMPLES]
    assert [r["observed"] for r in seen] == [0, 1, 2]
    assert seen[1]["seen"] == PROMPTS  # a block never repeats a prompt at these probabilities
    assert run.metric("dataflex/curriculum/prompts", step=1) == PROMPTS
    state = torch.load(run.checkpoints / "global_step_2" / CHECKPOINT_STATE, weights_only=True)["components"]
    assert state["history"]["name"] == "prompt_history"
    assert int(state["history"]["state"]["rollouts"].sum()) == 2 * PROMPTS * SAMPLES
    assert state["scorer"]["state"] == {"observed": 2}


def test_a_resumed_run_continues_the_history_and_draws_the_same_prompts(fits, tmp_path):
    first = _first_run(fits)
    checkpoints = tmp_path / "checkpoints"
    # resume from step 2 (verl also checkpointed the last step, 3)
    shutil.copytree(first.checkpoints, checkpoints, ignore=shutil.ignore_patterns("global_step_3"))
    (checkpoints / "latest_checkpointed_iteration.txt").write_text("2")
    dump = fits.root / "curriculum_resumed_rollouts"
    resumed = fits.run(
        "curriculum_resumed", _spec(3, dump, save_freq=2, resume_mode="auto", checkpoint_dir=checkpoints)
    )
    assert [r["step"] for r in resumed.steps] == [3]
    # the scorer was shown the restored history and continued its own count
    assert resumed.records("vowels_only") == [first.records("vowels_only")[2]]
    # the sampler resumed its position: the same prompts, rolled out by the same restored model
    assert sorted(_letters(dump, 3)) == sorted(_letters(fits.root / "curriculum_first_rollouts", 3))
    assert resumed.metric("critic/score/mean", step=3) == pytest.approx(first.metric("critic/score/mean", step=3))
    assert resumed.metric("dataflex/curriculum/seen_fraction", step=3) == first.metric(
        "dataflex/curriculum/seen_fraction", step=3
    )


@pytest.mark.full
def test_the_legacy_line_draws_its_prompts_through_the_curriculum_sampler(fits):
    """verl's legacy ``RayPPOTrainer`` builds its dataloader around the session's sampler (``_create_dataloader``)."""
    dump = fits.root / "curriculum_legacy_rollouts"
    spec = RunSpec(use_v1=False, dataflex=BLOCK, steps=2, samples_per_prompt=SAMPLES)
    spec.extra = [f"trainer.rollout_data_dir={dump}"]
    run = fits.run("curriculum_legacy", spec)
    vowels = set(toy_task.DOMAINS["vowel"])
    for step in (1, 2):
        letters = _letters(dump, step)
        assert len(letters) == PROMPTS * SAMPLES
        assert set(letters) <= vowels, f"step {step} rolled out prompts the sampler gave no probability: {letters}"
    assert run.metric("dataflex/curriculum/draw/history_step", step=2) == 1
    assert [r["observed"] for r in run.records("vowels_only")] == [0, 1]
