"""``dataflex-trl demo``: both arms train with TRL's real loop; the table, the JSON document and the plot."""

from __future__ import annotations

import io
import json

import pytest
from dataflex_trl.cli import main

from dataflex_lab.demo_report import JSON_FORMAT, TOY_RUN_NOTE
from dataflex_lab.trl.training_demo import DemoSettings, run_training_demo


def test_the_demo_trains_both_arms_and_writes_the_shared_format(tmp_path, capsys):
    out = io.StringIO()
    settings = DemoSettings(
        steps=2, workdir=tmp_path, json_path=tmp_path / "demo.json", plot_path=tmp_path / "demo.png"
    )
    document = run_training_demo(settings, out=out)
    text = out.getvalue()
    # one progress line per step, not also transformers' dict of every log
    assert "'loss'" not in capsys.readouterr().out
    assert text.count("[baseline      seed 0] step") == 2 and text.count("[dataflex      seed 0] step") == 2
    assert "| dataflex |" in text and "hook share of step" in text and TOY_RUN_NOTE in text
    written = json.loads((tmp_path / "demo.json").read_text())
    assert written["format"] == JSON_FORMAT and written["host"] == "trl" and written["seeds"] == [0]
    assert set(written["arms"]) == {"baseline", "dataflex"}
    assert [run["arm"] for run in written["runs"]] == ["baseline", "dataflex"]
    dataflex_steps = written["arms"]["dataflex"]
    assert [r["step"] for r in dataflex_steps] == [1, 2]
    assert dataflex_steps[0]["metrics"]["dataflex/weight/mean"] == pytest.approx(1.0)
    assert "dataflex/weight/mean" not in written["arms"]["baseline"][0]["metrics"]
    # the same seed gives both arms the same first generation batch
    assert written["arms"]["baseline"][0]["metrics"]["reward"] == dataflex_steps[0]["metrics"]["reward"]
    assert written["settings"]["dataflex"]["scorer"]["name"] == "advantage_magnitude"
    assert document["summary"]["dataflex"]["weight_mean"] == pytest.approx(1.0)
    pytest.importorskip("matplotlib")
    assert (tmp_path / "demo.png").stat().st_size > 10_000


def test_bad_options_are_one_line_errors(capsys):
    assert main(["demo", "--params", "{not json"]) == 2
    assert "--params is not valid JSON" in capsys.readouterr().err
    assert main(["demo", "--scorer", "advantage_magnitud", "--steps", "1"]) == 2
    assert "did you mean 'advantage_magnitude'" in capsys.readouterr().err


def test_a_task_family_trains_every_kind_and_evaluates_on_its_held_out_split(tmp_path):
    """``--task repeat``: TRL's real loop on the family's prompts, its binary rule, the held-out evaluation, and
    the compute counters ``dataflex compare --x rollouts`` reads, logged for the plain arm too."""
    settings = DemoSettings(
        mechanism="curriculum", task="repeat", task_params={"difficulty": [1, 2]}, steps=2, val_every=1,
        workdir=tmp_path, json_path=tmp_path / "demo.json", plot_path=tmp_path / "demo.png",
    )  # fmt: skip
    document = run_training_demo(settings, out=io.StringIO())
    assert document["settings"]["task"] == "repeat" and document["settings"]["task_params"] == {"difficulty": [1, 2]}
    for run in document["runs"]:
        by_step = {r["step"]: r["metrics"] for r in run["steps"]}
        assert set(by_step) == {0, 1, 2}  # TRL evaluates before the first step, then every step
        assert all(0.0 <= m["eval_reward"] <= 1.0 for m in by_step.values())
        rewards = [by_step[s]["reward"] for s in (1, 2)]
        assert all(r * 64 == int(r * 64) for r in rewards)  # binary rewards over 8 prompts x 8 completions
        assert [by_step[s]["dataflex/compute/rollouts_generated_total"] for s in (1, 2)] == [64.0, 128.0]
        assert by_step[2]["dataflex/compute/tokens_generated_total"] > 0


def test_the_demos_config_keeps_trls_checkpointing_without_a_warning_per_run(tmp_path):
    """transformers 5 warns on TRL's ``gradient_checkpointing`` for every config: once per arm and seed."""
    import dataclasses
    import warnings

    from trl import GRPOConfig

    from dataflex_lab.trl.training_demo import grpo_config

    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        args = grpo_config(DemoSettings(steps=1, workdir=tmp_path), "dataflex", 0)
    trl_default = next(f.default for f in dataclasses.fields(GRPOConfig) if f.name == "gradient_checkpointing")
    assert args.gradient_checkpointing is trl_default
    assert getattr(args, "activation_checkpointing", trl_default) is trl_default


def test_the_demo_runs_pilot_commit_as_published_with_the_preset(tmp_path):
    """``--mechanism pilot --preset pilot-commit``: the arm runs the paper's rounds in TRL's real loop (its buffer,
    its rounds, eviction of solved prompts), and the JSON records the block it ran."""
    path = tmp_path / "demo.json"
    argv = ["demo", "--mechanism", "pilot", "--preset", "pilot-commit", "--task", "band", "--steps", "2",
            "--workdir", str(tmp_path), "--json", str(path), "--plot", str(tmp_path / "demo.png")]  # fmt: skip
    assert main(argv) == 0
    document = json.loads(path.read_text())
    block = document["settings"]["dataflex"]
    assert block["pilot"] == {"preset": "pilot-commit", "on_short": "backfill"}
    assert block["actuator"]["params"]["low"] == 0.125 and block["actuator"]["params"]["high"] == 0.75
    trained = [record["metrics"] for record in document["arms"]["dataflex"] if record["step"] > 0]
    assert len(trained) == 2
    for metrics in trained:
        assert metrics["dataflex/pilot/rounds"] >= 1 and "dataflex/pilot/buffer_prompts" in metrics
        assert "dataflex/pilot/solved_evicted_prompts" in metrics
        # TRL rolls every prompt of a call out alike: a round is one call per rollout count, at most two
        assert metrics["dataflex/pilot/stages"] <= 2 * metrics["dataflex/pilot/rounds"] + 1
