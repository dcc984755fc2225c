"""``mechanism: pilot`` in verl's own legacy fit loop (``RayPPOTrainer``): screen with pilot rollouts, commit the rest.

One run of three steps carries most checks. Its scorer (fit_components.py) admits at step 1 every screened prompt
(an admit-all pilot: the commit tops the pulled prompts up to ``rollout.n`` with the samples fit itself would have
drawn, so the run trains verl's own batch, checked against verl without DataFlex), and from step 2 only the
vowel prompts whose pilot rewards vary; a step short of them is backfilled. A second run resumes the first from
its step-2 checkpoint and must repeat step 3 exactly. Both keep the per-prompt ledger (``prompt_key: index``),
checked prompt by prompt against the rows the steps generated and trained. ``trainer.balance_batch=false`` keeps
verl's dump of each trained batch in fit's order (each prompt's rollouts consecutive), so its groups can be read off.

A third run draws the screened prompts through GRESO (``pilot.draw``, replacing verl's dataloader order) on the toy
task's mixed variant, whose solved and unsolvable prompts give every rollout one reward: a prompt the pilots found
without signal must not be screened again.
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

PROMPTS, SAMPLES, PILOTS, STEPS, MAX_STAGES, SCREEN = 8, 4, 2, 3, 3, 2
BLOCK = {
    "mechanism": "pilot",
    "prompt_key": "index",
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


def _chosen(screened):
    """The screened prompts (uids) the commit trains: the first PROMPTS admitted in screening order, else backfilled
    ones, in uid order (fit's group order)."""
    admitted = [i for i, (_, _, score) in enumerate(screened) if score > 1.0e-6]
    evicted = [i for i, (_, _, score) in enumerate(screened) if score <= 1.0e-6]
    return sorted(admitted[:PROMPTS] + evicted[: max(PROMPTS - len(admitted), 0)])


def _step_rows(run, dump, step):
    """``(screened, chosen, trained)`` of ``step``: every screened prompt, the uids committed, verl's trained groups."""
    screened = [prompt for stage in _screened(run, step) for prompt in stage]
    return screened, _chosen(screened), _trained(dump, step)


def _ledger_from_rows(steps):
    """Per prompt id: ``(rollouts, trained, filtered, uniform-reward streak)`` after ``steps`` (``_step_rows`` each),
    counted from the rows: a screened prompt's pilots, a committed one's top-up (its group's rollouts after the
    pilots, all trained), one ledger step per step, the streak over every reward of the prompt in the step."""
    want: dict[int, list[int]] = {}
    for screened, chosen, trained in steps:
        rewards: dict[int, list[float]] = {}
        kept: dict[int, int] = {}
        commit = dict(zip(chosen, trained))
        for uid, (prompt, pilots, _) in enumerate(screened):
            rewards.setdefault(prompt, []).extend(pilots)
            if uid in commit:
                rewards[prompt].extend(commit[uid][1][PILOTS:])
                kept[prompt] = kept.get(prompt, 0) + SAMPLES
        for prompt, values in rewards.items():
            entry = want.setdefault(prompt, [0, 0, 0, 0])
            entry[0] += len(values)
            entry[1] += kept.get(prompt, 0)
            entry[2] += len(values) - kept.get(prompt, 0)
            entry[3] = entry[3] + 1 if max(values) - min(values) <= 1e-6 else 0
    return {prompt: tuple(entry) for prompt, entry in want.items()}


def _ledger_counts(checkpoints, step, role="ledger"):
    """The ledger checkpointed after ``step`` (component ``role``) as ``_ledger_from_rows`` counts it: per prompt
    id rolled out at least once."""
    state = torch.load(checkpoints / f"global_step_{step}" / CHECKPOINT_STATE, weights_only=True)
    ledger = state["components"][role]["state"]
    columns = [ledger[name] for name in ("rollouts", "rollouts_trained", "rollouts_filtered", "uniform_reward_streak")]
    return {
        int(prompt): tuple(int(column[i]) for column in columns)
        for i, prompt in enumerate(ledger["ids"].tolist())
        if int(ledger["rollouts"][i])
    }


def _replay_screening(replay, pulled, stages):
    """The dataset rows the pilot's sampler gives each screening stage beyond the ``pulled`` rows (whole blocks,
    less the rows the stage already screens)."""
    expected = []
    for i, stage in enumerate(stages):
        held = list(pulled) if i == 0 else []
        rows: list[int] = []
        while len(held) + len(rows) < len(stage):
            fresh = [row for row in replay.next_block() if row not in held + rows]
            rows += fresh[: len(stage) - len(held) - len(rows)]
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
        pulled = [prompt for prompt, _, _ in stages[0][:PROMPTS]]  # the index column is the dataset row
        for stage, rows in zip(stages, _replay_screening(replay, pulled, stages)):
            assert [prompt for prompt, _, _ in stage][-len(rows) :] == rows
        # the trained batch: the first PROMPTS admitted prompts in screening order, else backfilled ones
        admitted = [(prompt, rewards) for prompt, rewards, score in screened if score > 1.0e-6]
        backfill = [(prompt, rewards) for prompt, rewards, score in screened if score <= 1.0e-6]
        chosen = _chosen(screened)
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
    # the ledger, prompt by prompt: every pilot and top-up rollout, trained or filtered, and the streaks
    rows = [_step_rows(run, dump, step) for step in (1, 2, 3)]
    ledger = _ledger_counts(run.checkpoints, STEPS)
    assert ledger == _ledger_from_rows(rows)
    totals = run.steps[-1]["metrics"]
    for at, counter in enumerate(("rollouts_generated", "rollouts_trained", "rollouts_filtered")):
        assert sum(entry[at] for entry in ledger.values()) == totals[f"dataflex/compute/{counter}_total"], counter
    assert any(entry[2] for entry in ledger.values()) and any(entry[3] for entry in ledger.values())
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
    # the resumed run's ledger: the checkpoint's, then step 3 again from its own rows
    assert _ledger_counts(checkpoints, STEPS) == _ledger_from_rows([*rows[:2], _step_rows(resumed, again_dump, STEPS)])


#: GRESO drawing the screened prompts (the TRL test's block): a prompt whose latest visit gave every rollout one
#: reward keeps 1e-9 of a fresh prompt's probability, and the sampler has no uniform floor, so it is not drawn again.
GRESO = {"mechanism": "curriculum", "prompt_key": "index",
         "scorer": {"name": "greso", "params": {"exploration": 1.0e-9, "min_keep": 1.0e-9}},
         "actuator": {"name": "temperature", "params": {"temperature": 1.0, "exploration": 0.0}}}  # fmt: skip
#: The mixed task's prompts (a quarter solved, a quarter unsolvable: no signal, ever) and the draw run's steps.
DRAW_ROWS, DRAW_STEPS = 48, 3
DRAW_BLOCK = {
    **BLOCK,
    "scorer": {"name": "fittest_vowel_variance", "params": {}},
    "pilot": {**BLOCK["pilot"], "draw": GRESO},
}


@pytest.mark.full
def test_pilot_draw_screens_what_greso_draws_and_never_again_a_prompt_found_without_signal(fits):
    dump = fits.root / "pilot_draw_rollouts"
    spec = dataflex_spec("legacy", DRAW_BLOCK, steps=DRAW_STEPS, save_freq=DRAW_STEPS)
    spec.extra = [f"trainer.rollout_data_dir={dump}", "trainer.balance_batch=false"]
    workspace = fits.task_workspace("mixed", DRAW_ROWS)
    run = fits.run("pilot_draw_legacy", spec, workspace=workspace)
    assert [r["step"] for r in run.steps] == list(range(1, DRAW_STEPS + 1))
    kinds = pd.read_parquet(workspace.train_files)["kind"].tolist()
    rows = [_step_rows(run, dump, step) for step in range(1, DRAW_STEPS + 1)]
    # the curriculum's history is the ledger the stages feed, prompt by prompt
    assert _ledger_counts(run.checkpoints, DRAW_STEPS, role="draw_history") == _ledger_from_rows(rows)
    for step in range(1, DRAW_STEPS + 1):
        metrics = run.steps[step - 1]["metrics"]
        silent = {prompt for prompt, entry in _ledger_from_rows(rows[: step - 1]).items() if entry[3]}
        screened = {prompt for prompt, _, _ in rows[step - 1][0]}
        assert bool(silent) == (step > 1)  # the skip is exercised on every later step
        assert not silent & screened, f"step {step} screened prompts without signal: {sorted(silent & screened)}"
        # every screened prompt was drawn with GRESO's probabilities on the streaks counted from the rows: 1 / (the
        # prompts without a streak), by the sampler that saw every step before
        assert metrics["dataflex/curriculum/draw/history_step"] == step - 1
        fresh = DRAW_ROWS - len(silent)
        assert metrics["dataflex/curriculum/draw/max_probability"] == pytest.approx(1 / fresh, rel=1e-6)
    # a solved or unsolvable prompt gives its pilots one reward: screened in one step, never again
    constant = [prompt for step in rows for prompt in {p for p, _, _ in step[0] if kinds[p] != "echo"}]
    assert constant and len(constant) == len(set(constant))
