"""``mechanism: filter`` in verl's own legacy fit loop (``RayPPOTrainer``): generation rounds until the batch is full.

One run of three steps carries the checks. Its scorer (fit_components.py) admits at step 1 every group (an
admit-all filter: the run must train verl's own batch, checked against verl without DataFlex), and from step 2
only the vowel prompts whose group's rewards vary, so about half of each round is evicted and the rounds refill
from the seeded refill sampler. A second run resumes the first from its step-2 checkpoint and must repeat step 3
exactly: the same rounds, prompts and rewards, the same ledger. ``trainer.balance_batch=false`` keeps verl's
dump of each trained batch in fit's order (each prompt's rollouts consecutive), so its groups can be read off.
"""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
import torch
from fit_helpers import SGD_STEPS, dataflex_spec, plain_run

from dataflex_core.mechanisms.filter import RefillSampler
from dataflex_core.step.state import CHECKPOINT_STATE

pytestmark = pytest.mark.fit

PROMPTS, SAMPLES, STEPS, MAX_ROUNDS = 8, 4, 3, 4
BLOCK = {
    "mechanism": "filter",
    "prompt_key": "index",
    "scorer": {"name": "fittest_vowel_variance", "params": {"uniform_until": 1}},
    "actuator": {"name": "threshold_band", "params": {"low": 0.0, "high": 1.0e9}},
    "filter": {"max_rounds": MAX_ROUNDS},
}
COUNTERS = ("rollouts_generated", "rollouts_trained", "rollouts_filtered", "generation_rounds", "refills")


def _spec(dump, **changes):
    spec = dataflex_spec("legacy", BLOCK, **{**SGD_STEPS, "steps": STEPS, **changes})
    spec.extra = [f"trainer.rollout_data_dir={dump}", "trainer.balance_batch=false"]
    return spec


def _rounds(run, step):
    """Per generation round of ``step``: ``[(prompt id, rewards, score)]`` per group, in generation order."""
    out = []
    for record in run.records("vowel_variance"):
        if record["step"] == step:
            rows = range(0, len(record["index"]), SAMPLES)
            out.append([(record["index"][i], record["rewards"][i : i + SAMPLES], record["scores"][i]) for i in rows])
    return out


def _trained(dump, step):
    """verl's dump of the batch it trained at ``step``: ``[(ground-truth letter, rewards)]`` per group."""
    rows = [json.loads(line) for line in (dump / f"{step}.jsonl").read_text().splitlines()]
    groups = [rows[i : i + SAMPLES] for i in range(0, len(rows), SAMPLES)]
    assert all(len({row["gts"] for row in group}) == 1 for group in groups), "a group's rows are not consecutive"
    return [(group[0]["gts"], [row["score"] for row in group]) for group in groups]


def _ledger(checkpoints, step):
    state = torch.load(checkpoints / f"global_step_{step}" / CHECKPOINT_STATE, weights_only=True)
    return state["components"]["ledger"]["state"]


def test_filter_refills_every_batch_with_groups_that_vary_from_the_refill_sampler_and_survives_a_resume(fits, tmp_path):
    dump = fits.root / "filter_rollouts"
    run = fits.run("filter_legacy", _spec(dump))
    assert [r["step"] for r in run.steps] == [1, 2, 3]
    letters = [row["ground_truth"] for row in pd.read_parquet(fits.workspace.train_files)["reward_model"]]
    replay = RefillSampler(len(letters), PROMPTS, seed=0)
    for step in (1, 2, 3):
        metrics = run.steps[step - 1]["metrics"]
        rounds = _rounds(run, step)
        # the rounds the step logged, within the cap; every one but the first a refill
        assert len(rounds) == metrics["dataflex/compute/generation_rounds"] <= MAX_ROUNDS
        assert metrics["dataflex/compute/refills"] == len(rounds) - 1
        # refill prompts are the seeded refill sampler's blocks, in order
        for refill in rounds[1:]:
            assert [prompt for prompt, _, _ in refill] == replay.next_block()
        # the trained batch: the first PROMPTS admitted groups in generation order, all of them there
        admitted = [(prompt, rewards) for groups in rounds for prompt, rewards, score in groups if score > 0]
        expected = admitted[:PROMPTS]
        trained = _trained(dump, step)
        assert len(trained) == PROMPTS
        assert [letter for letter, _ in trained] == [letters[prompt] for prompt, _ in expected]
        for (_, rewards), (_, seen) in zip(expected, trained):
            assert seen == pytest.approx(rewards, abs=1e-6)
        calls = run.loss_calls_by_rank(step)[0]
        assert sum(len(call["response_mask"]) for call in calls) == PROMPTS * SAMPLES  # what reached ppo_loss
        generated = len(rounds) * PROMPTS * SAMPLES
        assert metrics["dataflex/compute/rollouts_generated"] == generated
        assert metrics["dataflex/compute/rollouts_trained"] == PROMPTS * SAMPLES
        assert metrics["dataflex/compute/rollouts_filtered"] == generated - PROMPTS * SAMPLES
        assert metrics["dataflex/filter/trained_groups"] == PROMPTS
        if step > 1:  # filtering: vowel groups whose rewards vary, and the rounds had to refill
            assert all(letter in "aeiou" and torch.tensor(scores).var() > 0 for letter, scores in trained)
            assert len(rounds) > 1
    # step 1 admitted every group in one round: verl's own batch and update, as without DataFlex
    plain = plain_run(fits, "legacy")
    assert _rounds(run, 1) and len(_rounds(run, 1)) == 1
    for name in ("critic/score/mean", "response_length/mean"):
        assert run.metric(name) == plain.metric(name)
    assert run.metric("actor/pg_loss") == pytest.approx(plain.metric("actor/pg_loss"), rel=1e-6, abs=1e-9)
    assert run.metric("actor/grad_norm") == pytest.approx(plain.metric("actor/grad_norm"), rel=1e-6)
    ours, verls = run.actor_weights(1), plain.actor_weights(1)
    assert max(float((ours[k] - verls[k]).abs().max()) for k in ours) < 1e-6
    # the ledger counts every round's rollouts, evicted ones included, as the counters do
    totals = run.steps[-1]["metrics"]
    ledger = _ledger(run.checkpoints, STEPS)
    for name in ("rollouts", "rollouts_trained", "rollouts_filtered"):
        counter = "rollouts_generated" if name == "rollouts" else name
        assert int(torch.as_tensor(ledger[name]).sum()) == totals[f"dataflex/compute/{counter}_total"], name

    # resumed from the step-2 checkpoint: step 3 again, the same rounds, batch and ledger
    checkpoints = tmp_path / "checkpoints"
    shutil.copytree(run.checkpoints, checkpoints)
    shutil.rmtree(checkpoints / f"global_step_{STEPS}")
    (checkpoints / "latest_checkpointed_iteration.txt").write_text(str(STEPS - 1))
    again_dump = fits.root / "filter_resumed_rollouts"
    resumed = fits.run("filter_legacy_resumed", _spec(again_dump, resume_mode="auto", checkpoint_dir=checkpoints))
    assert [r["step"] for r in resumed.steps] == [STEPS]
    assert _rounds(resumed, STEPS) == _rounds(run, STEPS)
    assert _trained(again_dump, STEPS) == _trained(dump, STEPS)
    before, after = run.steps[-1]["metrics"], resumed.steps[0]["metrics"]
    for name in COUNTERS:
        assert after[f"dataflex/compute/{name}"] == before[f"dataflex/compute/{name}"], name
        assert after[f"dataflex/compute/{name}_total"] == before[f"dataflex/compute/{name}_total"], name
    again = _ledger(checkpoints, STEPS)
    columns = [k for k, v in ledger.items() if isinstance(v, torch.Tensor)]
    assert columns and all(torch.equal(again[k], ledger[k]) for k in columns)
    assert again["last_step"] == ledger["last_step"]
