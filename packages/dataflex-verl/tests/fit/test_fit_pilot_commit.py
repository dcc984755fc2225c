"""``pilot: {preset: pilot-commit}`` in verl's own legacy fit loop (``RayPPOTrainer``), groups of 16, pilots of 4.

The toy task's mixed variant: echo prompts (rewards spread in [0, 1]), solved prompts (every rollout 1) and
unsolvable ones (every rollout 0). The admission scorer (fit_components.py) is the group's mean reward, the paper's
mean pilot accuracy, recording every generation call's rows; the band is the paper's [0.125, 0.75]. Counted from
the recorded calls, not read from the mechanism: each round is one generation call (verl generates prompts with
different counts in one call); every committed group was explored with its pilot mean in the band, in the step
(topped up under its uid) or on an earlier step, before a step's end evicted it by age (``step - explored >
max_off_steps``, the paper's flush; a fresh group); a prompt solved on every pilot is not explored again, not even
through fit's own pull; every rollout generated is counted; a run resumed
from its step-2 checkpoint repeats step 3's calls.
"""

from __future__ import annotations

import json
import shutil

import pytest
from fit_helpers import dataflex_spec

pytestmark = [pytest.mark.fit, pytest.mark.full]

PROMPTS, GROUP, PILOTS, STEPS, ROWS, MAX_OFF_STEPS = 4, 16, 4, 3, 48, 1
BAND = {"low": 0.125, "high": 0.75, "low_inclusive": True, "high_inclusive": True}
BLOCK = {
    "mechanism": "pilot",
    "scorer": {"name": "fittest_recorded_solve_rate", "params": {}},
    "actuator": {"name": "threshold_band", "params": BAND},
    "pilot": {"preset": "pilot-commit", "carry": {"max_off_steps": MAX_OFF_STEPS, "order": "std"}},
}


def _spec(**changes):
    settings = {"steps": STEPS, "prompts_per_step": PROMPTS, "samples_per_prompt": GROUP, "save_freq": 1, **changes}
    return dataflex_spec("legacy", BLOCK, **settings)


def _calls(run) -> dict[int, list[dict[int, tuple[int, int, list[float]]]]]:
    """Per step, its generation calls: per uid, ``(prompt id, rows, valid rows' rewards)`` in the call."""
    lines = (run.folder / "components" / "recorded_solve_rate.jsonl").read_text().splitlines()
    steps: dict[int, list] = {}
    for record in map(json.loads, lines):
        groups: dict[int, list] = {}
        for index, uid, reward, valid in zip(record["index"], record["uid"], record["rewards"], record["valid"]):
            group = groups.setdefault(uid, [index, 0, []])
            assert group[0] == index  # a uid is one prompt
            group[1] += 1
            group[2] += [reward] if valid else []
        steps.setdefault(record["step"], []).append({uid: tuple(group) for uid, group in groups.items()})
    return steps


@pytest.fixture(scope="module")
def runs(fits, tmp_path_factory):
    workspace = fits.task_workspace("mixed", ROWS)
    run = fits.run("pilot_commit_legacy", _spec(), workspace=workspace)
    checkpoints = tmp_path_factory.mktemp("pilot_commit") / "checkpoints"
    shutil.copytree(run.checkpoints, checkpoints)
    shutil.rmtree(checkpoints / f"global_step_{STEPS}")
    (checkpoints / "latest_checkpointed_iteration.txt").write_text(str(STEPS - 1))
    resumed = fits.run(
        "pilot_commit_legacy_resumed", _spec(resume_mode="auto", checkpoint_dir=checkpoints), workspace=workspace
    )
    return run, resumed


def test_pilot_commit_runs_one_call_a_round_admits_in_the_band_and_counts_every_rollout(runs):
    run, _ = runs
    assert [r["step"] for r in run.steps] == list(range(1, STEPS + 1))
    calls = _calls(run)
    #: prompt -> [(step, pilot mean, solved on every pilot)]
    explored: dict[int, list[tuple[int, float, bool]]] = {}
    carried = one_call_steps = 0
    for step in range(1, STEPS + 1):
        metrics = run.steps[step - 1]["metrics"]
        assert metrics["dataflex/pilot/stages"] == metrics["dataflex/pilot/rounds"] == len(calls[step])  # one a round
        one_call_steps += step > 1 and len(calls[step]) == 1
        committed = []
        for call in calls[step]:
            for uid, (prompt, rows, rewards) in call.items():
                if rows == PILOTS:  # an exploration (fit's pull first, less the evicted prompts it holds)
                    mean = sum(rewards) / max(len(rewards), 1)
                    explored.setdefault(prompt, []).append((step, mean, min(rewards, default=0.0) >= 1.0))
                else:
                    committed.append((uid, prompt, rows))
        assert len(committed) == PROMPTS and metrics["dataflex/compute/rollouts_trained"] == PROMPTS * GROUP
        for _, prompt, count in committed:
            if count == GROUP - PILOTS:  # explored in this step: topped up
                at, mean, _ = explored[prompt][-1]
                assert at == step
            else:  # carried: a whole fresh group, explored before the flush at a step's end would evict it
                assert count == GROUP
                at, mean, _ = [e for e in explored[prompt] if e[0] < step][-1]
                assert step - at <= MAX_OFF_STEPS + 1
                carried += 1
            assert BAND["low"] <= mean <= BAND["high"], (step, prompt, mean)
        generated = sum(rows for call in calls[step] for _, rows, _ in call.values())
        assert metrics["dataflex/compute/rollouts_generated"] == generated  # every rollout, once
        assert metrics["dataflex/pilot/pilot_rollouts"] + metrics["dataflex/pilot/commit_rollouts"] == generated
    assert carried > 0 and one_call_steps > 0  # the buffer fed later steps; a step made one call
    solved = {
        prompt: next(e[0] for e in visits if e[2]) for prompt, visits in explored.items() if any(e[2] for e in visits)
    }
    assert solved  # the mixed task's solved prompts were met
    for prompt, at in solved.items():  # never explored again, by the pilot's sampler nor from fit's own pull
        assert not [e for e in explored[prompt] if e[0] > at], (prompt, explored[prompt])


def test_a_resumed_run_repeats_the_third_steps_calls(runs):
    run, resumed = runs
    assert [r["step"] for r in resumed.steps] == [STEPS]
    assert _calls(resumed)[STEPS] == _calls(run)[STEPS]
    for name in ("rollouts_generated", "rollouts_generated_total", "generation_rounds_total"):
        assert (
            resumed.steps[0]["metrics"][f"dataflex/compute/{name}"]
            == run.steps[-1]["metrics"][f"dataflex/compute/{name}"]
        ), name
