"""``pilot: {preset: pilot-commit}`` on TRL's real GRPOTrainer at the paper's proportions: groups of 16, pilots of 4.

Each prompt of the toy dataset has a solve level: never solved, solved on a quarter, half or three quarters of its
completions (decided by a hash of prompt and completion), or always solved. What the test checks is counted from the
rows TRL generated in every call, not read from the mechanism: every trained group is whole and its prompt's pilot mean
lay in the paper's band [0.125, 0.75]; a carried prompt is trained before the buffer evicts it by age (the paper's
flush at a step's end, ``step - explored > max_off_steps``: at most ``max_off_steps + 1`` steps on), with a
whole fresh group; a prompt solved on every pilot is never explored again; every generated rollout is counted once; a
run resumed from a checkpoint generates and trains what the uninterrupted run did.
"""

from __future__ import annotations

import os
import zlib

import pytest
from conftest import trainer_factory
from test_pilot import Recorder, tokens

from dataflex_core.mechanisms.pilot.settings import PILOT_COMMIT_BAND

GROUP = 16
PILOTS = GROUP // 4  # the preset's 25 % of the group
PROMPTS = 2
ROWS = PROMPTS * GROUP
STEPS = 6
#: Prompts in the dataset: few enough that the sampler's later epochs come back to prompts explored before.
DATASET = 24
#: Explicit under the preset (its other parts stay the paper's): 1, so that waiting in the buffer ends within the run.
MAX_OFF_STEPS = 1
BLOCK = {
    "mechanism": "pilot",
    "scorer": {"name": "group_solve_rate"},
    "actuator": {"name": "threshold_band", "params": PILOT_COMMIT_BAND},
    "pilot": {"preset": "pilot-commit", "carry": {"max_off_steps": MAX_OFF_STEPS, "order": "std"}},
}
COMPUTE = "dataflex/compute/"


def level(index: int) -> int:
    """Quarters of a prompt's completions that succeed: 0 (never) to 4 (always)."""
    return int(index) % 5


def leveled_reward(completions, index, **_):
    return [float(zlib.crc32(f"{i}:{c}".encode()) % 4 < level(i)) for c, i in zip(completions, index)]


def train(make_trainer, steps=STEPS, resume=None, **config):
    from dataflex_lab.trl.toy import toy_dataset

    config = {"num_generations": GROUP, "per_device_train_batch_size": ROWS, "max_steps": steps, **config}
    trainer = make_trainer("dapo", BLOCK, reward=leveled_reward, train_dataset=toy_dataset(DATASET, seed=0), **config)
    record = Recorder(trainer)
    trainer.train(resume_from_checkpoint=resume)
    return trainer, record


def calls(parts):
    """The step's generation calls as ``(count, {prompt: [row positions]}, rewards, output)``: TRL generates one
    rollout count per call."""
    out = []
    for rows, output, rewards in parts:
        by_prompt: dict[int, list[int]] = {}
        for i, row in enumerate(rows):
            by_prompt.setdefault(int(row["index"]), []).append(i)
        (count,) = {len(positions) for positions in by_prompt.values()}
        out.append((count, by_prompt, rewards.sum(1), output))
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tokenizer, dataset):
    """The run (a checkpoint at step 3) and the run resumed from it, each with its recorder."""
    full, record = train(trainer_factory(tmp_path_factory.mktemp("run"), tokenizer, dataset),
                         save_strategy="steps", save_steps=3)  # fmt: skip
    checkpoint = os.path.join(full.args.output_dir, "checkpoint-3")
    resumed, again = train(trainer_factory(tmp_path_factory.mktemp("resumed"), tokenizer, dataset), resume=checkpoint)
    return full, record, resumed, again


def test_every_trained_group_was_admitted_in_the_band_and_carried_ones_before_their_age_evicts_them(runs):
    full, record, _, _ = runs
    assert full.dataflex.mechanism.settings.rollouts_share == 0.25  # the preset's pilots, 4 of 16
    explored: dict[int, list[tuple[int, list[float], list]]] = {}  # prompt -> [(step, pilot rewards, their tokens)]
    carried = 0
    for step, (parts, (inputs, output, _, _)) in enumerate(zip(record.stages, record.steps), start=1):
        assert len(inputs) == ROWS and len(output["advantages"]) == ROWS  # the batch full, never backfilled
        commits = {}
        for count, by_prompt, rewards, out in calls(parts):
            for prompt, rows in by_prompt.items():
                if count == PILOTS:
                    explored.setdefault(prompt, []).append(
                        (step, rewards[rows].tolist(), [tokens(out, r) for r in rows])
                    )
                else:
                    assert prompt not in commits, (step, prompt)  # committed once a step
                    commits[prompt] = (count, [tokens(out, r) for r in rows])
        assert len(commits) == PROMPTS  # the commits are the trained groups
        for group in range(PROMPTS):
            rows = range(group * GROUP, (group + 1) * GROUP)
            (prompt,) = {int(inputs[r]["index"]) for r in rows}  # one prompt, its rows consecutive
            count, commit_tokens = commits[prompt]
            trained = [tokens(output, r) for r in rows]
            if count == GROUP - PILOTS:  # explored in this step: its pilots are the group's first rollouts
                at, pilots, pilot_tokens = explored[prompt][-1]
                assert at == step and trained == pilot_tokens + commit_tokens, (step, prompt)
            else:  # carried from an earlier step's exploration: a whole fresh group
                at, pilots, _ = [e for e in explored[prompt] if e[0] < step][-1]
                assert count == GROUP and trained == commit_tokens, (step, prompt)
                assert step - at <= MAX_OFF_STEPS + 1, (step, prompt, at)  # evicted at a step's end once older
                carried += 1
            assert PILOT_COMMIT_BAND["low"] <= sum(pilots) / PILOTS <= PILOT_COMMIT_BAND["high"], (step, prompt)
    assert carried > 0  # the buffer was exercised
    logged = [e for e in full.state.log_history if "dataflex/pilot/rounds" in e]
    assert sum(e["dataflex/pilot/carried_prompts"] for e in logged) == carried
    assert max(e["dataflex/pilot/pilot_age_max"] for e in logged) <= MAX_OFF_STEPS + 1


def test_the_buffer_holds_the_admitted_prompts_not_yet_trained_and_evicts_them_after_max_off_steps(runs):
    """A reference of the survivor buffer from the rows: a round (its calls, one per count, in increasing counts)
    first takes the prompts it commits out of the buffer, then the prompts it explores with their pilot mean in the
    band enter it (a prompt explored again takes its new step); a step's end evicts what was explored more than
    ``max_off_steps`` steps before. Its size and evictions are what the step logs."""
    full, record, _, _ = runs
    logged = [e for e in full.state.log_history if "dataflex/pilot/rounds" in e]
    buffer: dict[int, int] = {}  # prompt -> the step it was explored at
    evicted = 0
    for step, (parts, metrics) in enumerate(zip(record.stages, logged), start=1):
        rounds: list[list] = []
        for call in calls(parts):
            if not rounds or call[0] <= rounds[-1][-1][0]:
                rounds.append([])
            rounds[-1].append(call)
        assert len(rounds) == metrics["dataflex/pilot/rounds"], step
        for calls_of_round in rounds:
            for count, by_prompt, _, _ in calls_of_round:
                for prompt in by_prompt if count != PILOTS else ():
                    del buffer[prompt]  # committed: it was waiting
            for count, by_prompt, rewards, _ in calls_of_round:
                for prompt, rows in by_prompt.items() if count == PILOTS else ():
                    if PILOT_COMMIT_BAND["low"] <= float(rewards[rows].mean()) <= PILOT_COMMIT_BAND["high"]:
                        buffer[prompt] = step
        old = [prompt for prompt, at in buffer.items() if step - at > MAX_OFF_STEPS]
        for prompt in old:
            del buffer[prompt]
        evicted += len(old)
        assert metrics["dataflex/pilot/buffer_prompts"] == len(buffer), step
        assert metrics["dataflex/pilot/buffer_evicted_prompts"] == len(old), step
    assert evicted > 0  # waiting ended in the run


def test_a_prompt_solved_on_every_pilot_is_never_explored_again(runs):
    _, record, _, _ = runs
    solved_at: dict[int, int] = {}
    evictions = 0
    for step, parts in enumerate(record.stages, start=1):
        for count, by_prompt, rewards, _ in calls(parts):
            if count != PILOTS:
                continue
            for prompt, rows in by_prompt.items():
                assert prompt not in solved_at, (step, prompt, solved_at.get(prompt))
                if bool((rewards[rows] > 0).all()):
                    solved_at[prompt] = step
                    evictions += 1
    assert all(level(p) > 0 for p in solved_at)  # a prompt never solved is never evicted as solved
    assert any(level(p) == 4 for p in solved_at)  # the always-solved prompts were met, and went


def test_every_generated_rollout_is_counted_once(runs):
    full, record, _, _ = runs
    logged = [e for e in full.state.log_history if f"{COMPUTE}rollouts_generated" in e]
    assert len(logged) == STEPS
    total = 0
    for parts, metrics in zip(record.stages, logged):
        generated = sum(len(rows) for rows, _, _ in parts)
        total += generated
        assert metrics[f"{COMPUTE}rollouts_generated"] == generated
        assert metrics["dataflex/pilot/pilot_rollouts"] + metrics["dataflex/pilot/commit_rollouts"] == generated
        assert metrics[f"{COMPUTE}rollouts_filtered"] == generated - ROWS  # every rollout not trained
        assert metrics["dataflex/pilot/stages"] == len(parts)  # one call per rollout count (TRL has no one_call)
    assert full.dataflex.compute_totals.totals["rollouts_generated"] == total


def test_a_resumed_run_makes_the_same_decisions(runs):
    full, record, resumed, again = runs
    assert len(again.steps) == STEPS - 3  # steps 4 to 6
    for step, (want, got) in enumerate(zip(record.steps[3:], again.steps), start=4):
        assert [row["index"] for row in got[0]] == [row["index"] for row in want[0]], step  # the same groups
        assert [tokens(got[1], r) for r in range(ROWS)] == [tokens(want[1], r) for r in range(ROWS)], step
    for want, got in zip(record.stages[3:], again.stages):
        assert [[int(row["index"]) for row in rows] for rows, _, _ in got] == [
            [int(row["index"]) for row in rows] for rows, _, _ in want
        ]  # every call: the same prompts explored and committed, the buffer's order included
    assert resumed.dataflex.compute_totals.totals == full.dataflex.compute_totals.totals
