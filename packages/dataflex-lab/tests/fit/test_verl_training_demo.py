"""The main job, end to end: ``dataflex-verl demo`` trains both arms with verl's own entry point.

Runs the console command as a user does (each arm is a ``python -m
verl.trainer.main_ppo`` process with its own Ray), with a pair other than the
default, its params and ``--json``, on a task family, for two steps.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from dataflex_lab.verl.cpu_loop.runner import bytecode_env

pytestmark = pytest.mark.fit

DEMO = [sys.executable, "-c", "from dataflex_verl.cli import main; raise SystemExit(main())", "demo"]


@pytest.fixture
def demo_env(tmp_path):
    """The environment of the demo's processes: one compiled copy of torch and verl for all of them."""
    return {**os.environ, **bytecode_env(tmp_path / "pycache")}


def test_a_misspelled_component_stops_the_demo_before_verl_starts(tmp_path, demo_env):
    result = subprocess.run(
        [*DEMO, "--scorer", "group_solve_rat", "--workdir", str(tmp_path)],
        capture_output=True, text=True, timeout=120, env=demo_env,
    )  # fmt: skip
    assert result.returncode == 2
    assert "scorer 'group_solve_rat' is not installed; did you mean 'group_solve_rate'?" in result.stderr
    assert not (tmp_path / "logs").exists()  # no arm was started


@pytest.mark.full
def test_the_demo_trains_both_arms_on_a_task_family_with_any_pair_and_writes_its_outputs(tmp_path, demo_env):
    """``--task repeat`` with a pair other than the default: verl's own validation of the held-out split (before
    training and at the last step), the compute counters of both arms, and the JSON ``dataflex compare`` reads."""
    params = {"scorer": {"success_threshold": 0.5}, "actuator": {"low": 0.1, "high": 0.9}}
    out = tmp_path / "out.json"
    result = subprocess.run(
        [*DEMO, "--scorer", "group_solve_rate", "--actuator", "difficulty_band", "--params", json.dumps(params),
         "--task", "repeat", "--task-params", '{"difficulty": [1, 2], "held_out_prompts": 8}', "--val-every", "2",
         "--steps", "2", "--json", str(out), "--workdir", str(tmp_path / "work")],
        capture_output=True, text=True, timeout=900, env=demo_env,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    document = json.loads(out.read_text())
    assert document["format"] == "dataflex-demo/1" and document["host"] == "verl"
    assert document["settings"]["dataflex"]["scorer"] == {"name": "group_solve_rate", "params": params["scorer"]}
    assert document["settings"]["dataflex"]["actuator"] == {"name": "difficulty_band", "params": params["actuator"]}
    assert document["settings"]["task"] == "repeat" and document["settings"]["samples_per_prompt"] == 8
    assert set(document["arms"]) == {"sync", "dataflex_sync"}
    validation = "val-aux/dataflex_repeat/reward/mean@8"
    for arm, steps in document["arms"].items():
        by_step = {record["step"]: record["metrics"] for record in steps}
        assert sorted(by_step) == [0, 1, 2]  # the validation before training, then each step
        assert validation in by_step[0] and validation in by_step[2] and validation not in by_step[1]
        for step in (1, 2):
            metrics = by_step[step]
            # binary rewards over 8 prompts x 8 responses
            assert metrics["critic/score/mean"] * 64 == pytest.approx(round(metrics["critic/score/mean"] * 64))
            assert metrics["dataflex/compute/rollouts_generated_total"] == 64.0 * step
            assert 0 <= metrics["dataflex/compute/rollouts_wasted"] <= 64
        assert ("dataflex/weight/mean" in by_step[1]) == (arm == "dataflex_sync")
    # the same seed gives both arms the same first batch and the same untrained model to validate
    first = [document["arms"][arm][1]["metrics"] for arm in ("sync", "dataflex_sync")]
    assert first[0]["critic/score/mean"] == first[1]["critic/score/mean"]
    assert first[0]["dataflex/compute/rollouts_wasted"] == first[1]["dataflex/compute/rollouts_wasted"]
    assert (
        document["arms"]["sync"][0]["metrics"][validation]
        == document["arms"]["dataflex_sync"][0]["metrics"][validation]
    )
    # a line per step per arm, the tables, the plot, and what a toy run is
    assert result.stdout.count("step   2/2") == 2
    assert "| dataflex_sync |" in result.stdout and "not a benchmark result" in result.stdout
    # where its rollouts went (8 per group); one seed gives the value alone, no interval
    assert "| `sync` (baseline) | 1 | 8.0 |" in result.stdout
    # each variant its own plot (mechanism and task in the name), no spurious warning for a GRPO run's scorer
    assert (tmp_path / "work" / "demo-reweight-repeat.png").stat().st_size > 10_000
    assert "GroupsUncheckedWarning" not in result.stderr and "2 training steps" in result.stdout
