"""The main job, end to end: ``dataflex-verl demo`` trains both arms with verl's own entry point.

Runs the console command as a user does (each arm is a ``python -m
verl.trainer.main_ppo`` process with its own Ray), with a pair other than the
default, its params and ``--json``, for two steps.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.fit

DEMO = [sys.executable, "-c", "from dataflex_verl.cli import main; raise SystemExit(main())", "demo"]


def test_a_misspelled_component_stops_the_demo_before_verl_starts(tmp_path):
    result = subprocess.run(
        [*DEMO, "--scorer", "group_solve_rat", "--workdir", str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2
    assert "scorer 'group_solve_rat' is not installed; did you mean 'group_solve_rate'?" in result.stderr
    assert not (tmp_path / "logs").exists()  # no arm was started


def test_the_demo_trains_both_arms_with_any_pair_and_writes_its_outputs(tmp_path):
    params = {"scorer": {"success_threshold": 0.5}, "actuator": {"low": 0.1, "high": 0.9}}
    out = tmp_path / "out.json"
    result = subprocess.run(
        [*DEMO, "--scorer", "group_solve_rate", "--actuator", "difficulty_band", "--params", json.dumps(params),
         "--steps", "2", "--json", str(out), "--workdir", str(tmp_path / "work")],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    document = json.loads(out.read_text())
    assert document["format"] == "dataflex-demo/1" and document["host"] == "verl"
    assert document["settings"]["dataflex"]["scorer"] == {"name": "group_solve_rate", "params": params["scorer"]}
    assert document["settings"]["dataflex"]["actuator"] == {"name": "difficulty_band", "params": params["actuator"]}
    assert set(document["arms"]) == {"sync", "dataflex_sync"}
    for arm, steps in document["arms"].items():
        assert [record["step"] for record in steps] == [1, 2]
        assert all("critic/score/mean" in record["metrics"] for record in steps)
        has_weights = all("dataflex/weight/mean" in record["metrics"] for record in steps)
        assert has_weights == (arm == "dataflex_sync")
    for record in document["arms"]["dataflex_sync"]:
        assert record["metrics"]["dataflex/weight/mean"] == pytest.approx(1.0, abs=1e-5)
    # a line per step per arm, the table, the plot, and what a toy run is
    assert result.stdout.count("step   2/2") == 2
    assert "| dataflex_sync |" in result.stdout and "not a benchmark result" in result.stdout
    assert (tmp_path / "work" / "demo.png").stat().st_size > 10_000
