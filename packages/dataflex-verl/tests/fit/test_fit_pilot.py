"""``mechanism: pilot`` in verl's own legacy fit loop (``RayPPOTrainer``): screen with pilot rollouts, commit the rest.

One run of three steps carries the checks. Its scorer (fit_components.py) admits at step 1 every screened prompt
(an admit-all pilot: the commit tops the pulled prompts up to ``rollout.n`` with the samples fit itself would have
drawn, so the run trains verl's own batch, checked against verl without DataFlex), and from step 2 only the
vowel prompts whose pilot rewards vary; a step short of them is backfilled. A second run resumes the first from
its step-2 checkpoint and must repeat step 3 exactly. ``trainer.balance_batch=false`` keeps verl's dump of each
trained batch in fit's order (each prompt's rollouts consecutive), so its groups can be read off.
"""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
import torch
from fit_helpers import SGD_STEPS, dataflex_spec, plain_run

from dataflex_core.mechanisms.filter import RefillSampler

pytestmark = pytest.mark.fit

PROMPTS, SAMPLES, PILOTS, STEPS, MAX_STAGES, SCREEN = 8, 4, 2, 3, 3, 2
BLOCK = {
    "mechanism": "pilot",
    "scorer": {"name": "fittest_vowel_variance", "params": {"uniform_until": 1}},
    "actuator": {"name": "threshold_band", "params": {"low": 1.0e-6, "high": 1.0e9}},
    "pilot": {"prompts": SCREEN, "rollouts": PILOTS, "keep": True, "max_stages": MAX_STAGES, "on_short": "backfill"},
}
COUNTERS = ("rollouts_generated", "rollouts_trained", "rollouts_filtered", "generation_rounds")


def _spec(dump, **changes):
    spec = dataflex_spec("legacy", BLOCK, **{**SGD_STEPS, "steps": STEPS, **changes})
    spec.extra = [f"trainer.rollout_data_dir={dump}", "trainer.balance_batch=false"]
    return spec


def _screened(run, step):
    """Per screening stage of ``step``: ``[(prompt id, pilot rewards, score)]`` per prompt, in request order."""
    out = []
    for record in run.records("vowel_variance"):
        if record["step"] == step:
            rows = range(0, len(record["index"]), PILOTS)
            out.append([(record["index"][i], record["rewards"][i : i + PILOTS], record["scores"][i]) for i in rows])
    return out


def _trained(dump, step):
    """verl's dump of the batch it trained at ``step``: ``[(ground-truth letter, rewards)]`` per group."""
    rows = [json.loads(line) for line in (dump / f"{step}.jsonl").read_text().splitlines()]
    groups = [rows[i : i + SAMPLES] for i in range(0, len(rows), SAMPLES)]
    assert all(len({row["gts"] for row in group}) == 1 for group in groups), "a group's rows are not consecutive"
    return [(group[0]["gts"], [row["score"] for row in group]) for group in groups]


def _replay_screening(replay, pulled_count, stages):
    """The dataset rows the pilot's sampler gives each screening stage beyond the pulled prompts (whole blocks)."""
    expected = []
    for i, stage in enumerate(stages):
        want = len(stage) - (pulled_count if i == 0 else 0)
        rows: list[int] = []
        while len(rows) < want:
            rows += replay.next_block()[: want - len(rows)]
        expected.append(rows)
    return expected


def test_pilot_trains_whole_admitted_groups_counts_every_rollout_and_survives_a_resume(fits, tmp_path):
    dump = fits.root / "pilot_rollouts"
    run = fits.run("pilot_legacy", _spec(dump))
    assert [r["step"] for r in run.steps] == [1, 2, 3]
    letters = [row["ground_truth"] for row in pd.read_parquet(fits.workspace.train_files)["reward_model"]]
    replay = RefillSampler(len(letters), PROMPTS, seed=0)
    for step in (1, 2, 3):
        metrics = run.steps[step - 1]["metrics"]
        stages = _screened(run, step)
        # the caps: stages (the commit included) and prompts screened
        assert 1 <= len(stages) <= MAX_STAGES - 1 and metrics["dataflex/pilot/stages"] == len(stages) + 1
        screened = [prompt for stage in stages for prompt in stage]
        assert len(screened) == metrics["dataflex/pilot/screened_prompts"] <= SCREEN * PROMPTS * (MAX_STAGES - 1)
        assert len(stages[0]) == SCREEN * PROMPTS  # the pulled prompts, then the sampler's
        for stage, rows in zip(stages, _replay_screening(replay, PROMPTS, stages)):
            assert [prompt for prompt, _, _ in stage][-len(rows) :] == rows
        # the trained batch: the first PROMPTS admitted prompts in screening order, else backfilled ones
        admitted = [(prompt, rewards) for prompt, rewards, score in screened if score > 1.0e-6]
        backfill = [(prompt, rewards) for prompt, rewards, score in screened if score <= 1.0e-6]
        chosen = sorted(
            [i for i, (_, _, s) in enumerate(screened) if s > 1.0e-6][:PROMPTS]
            + [i for i, (_, _, s) in enumerate(screened) if s <= 1.0e-6][: max(PROMPTS - len(admitted), 0)]
        )
        assert metrics["dataflex/pilot/backfilled_prompts"] == min(len(backfill), max(PROMPTS - len(admitted), 0))
        trained = _trained(dump, step)
        assert len(trained) == PROMPTS and all(len(rewards) == SAMPLES for _, rewards in trained)
        assert [letter for letter, _ in trained] == [letters[screened[i][0]] for i in chosen]
        for i, (_, rewards) in zip(chosen, trained):
            # kept: the group's first rollouts are exactly its pilot rollouts, generated once
            assert rewards[:PILOTS] == pytest.approx(screened[i][1], abs=1e-6)
            if screened[i][2] > 1.0e-6 and step > 1:  # admitted on the pilot rewards' variance
                assert letters[screened[i][0]] in "aeiou" and torch.tensor(screened[i][1]).var() > 0
        calls = run.loss_calls_by_rank(step)[0]
        assert sum(len(call["response_mask"]) for call in calls) == PROMPTS * SAMPLES  # what reached ppo_loss
        # every rollout generated is counted: every pilot of every screened prompt, and the commit's
        generated = len(screened) * PILOTS + PROMPTS * (SAMPLES - PILOTS)
        assert metrics["dataflex/pilot/pilot_rollouts"] == len(screened) * PILOTS
        assert metrics["dataflex/pilot/commit_rollouts"] == PROMPTS * (SAMPLES - PILOTS)
        assert metrics["dataflex/compute/rollouts_generated"] == generated
        assert metrics["dataflex/compute/rollouts_trained"] == PROMPTS * SAMPLES
        assert metrics["dataflex/compute/rollouts_filtered"] == generated - PROMPTS * SAMPLES
        assert metrics["dataflex/compute/generation_rounds"] == len(stages) + 1
    # step 1 admitted every screened prompt and committed the pulled ones: verl's own batch and update
    plain = plain_run(fits, "legacy")
    for name in ("critic/score/mean", "response_length/mean"):
        assert run.metric(name) == plain.metric(name)
    assert run.metric("actor/pg_loss") == pytest.approx(plain.metric("actor/pg_loss"), rel=1e-6, abs=1e-9)
    ours, verls = run.actor_weights(1), plain.actor_weights(1)
    assert max(float((ours[k] - verls[k]).abs().max()) for k in ours) < 1e-6

    # resumed from the step-2 checkpoint: step 3 again, the same stages, batch and counters
    checkpoints = tmp_path / "checkpoints"
    shutil.copytree(run.checkpoints, checkpoints)
    shutil.rmtree(checkpoints / f"global_step_{STEPS}")
    (checkpoints / "latest_checkpointed_iteration.txt").write_text(str(STEPS - 1))
    again_dump = fits.root / "pilot_resumed_rollouts"
    resumed = fits.run("pilot_legacy_resumed", _spec(again_dump, resume_mode="auto", checkpoint_dir=checkpoints))
    assert [r["step"] for r in resumed.steps] == [STEPS]
    assert _screened(resumed, STEPS) == _screened(run, STEPS)
    assert _trained(again_dump, STEPS) == _trained(dump, STEPS)
    before, after = run.steps[-1]["metrics"], resumed.steps[0]["metrics"]
    for name in COUNTERS:
        assert after[f"dataflex/compute/{name}"] == before[f"dataflex/compute/{name}"], name
        assert after[f"dataflex/compute/{name}_total"] == before[f"dataflex/compute/{name}_total"], name
