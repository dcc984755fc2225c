"""The training demos' common options: the DataFlex arm's block, and --params read strictly."""

from __future__ import annotations

import argparse
import sys

import pytest

from dataflex_lab import demo_report
from dataflex_lab.demo_report import DEFAULT_PAIRS, DemoOptions


def test_each_mechanism_defaults_to_its_pair_with_its_params():
    for mechanism, (scorer, scorer_params, actuator, actuator_params) in DEFAULT_PAIRS.items():
        block = DemoOptions(mechanism=mechanism).block()
        assert block["scorer"] == {"name": scorer, "params": scorer_params}
        assert block["actuator"] == {"name": actuator, "params": actuator_params}
    assert set(DemoOptions(mechanism="mix").block()) >= {"domains", "domain_key"}
    assert DemoOptions(mechanism="curriculum").block()["prompt_key"] == "index"


def test_pilot_screens_on_the_mixed_task_and_runs_on_verls_legacy_line_only():
    from dataflex_lab.verl.training_demo import DemoSettings, check_trainer_line

    options = DemoOptions(mechanism="pilot")
    assert options.block()["pilot"] == demo_report.PILOT_DEMO and options.toy_task == "mixed"
    # pilot_params replaces the demo's keys, as filter_params does (the evidence campaign's pilot-size settings)
    assert DemoOptions(mechanism="pilot", pilot_params={"rollouts": 4}).block()["pilot"] == {"rollouts": 4}
    assert "pilot" not in DemoOptions(mechanism="filter", pilot_params={"rollouts": 4}).block()
    check_trainer_line(DemoSettings(mechanism="pilot", trainer="legacy"))
    for line in ("v1", "one-step-off"):
        with pytest.raises(ValueError, match=f"--mechanism pilot does not run on verl's {line} .* --trainer legacy"):
            check_trainer_line(DemoSettings(mechanism="pilot", trainer=line))


def test_the_pilot_commit_preset_gives_the_papers_arm_and_what_the_user_names_replaces_its_parts():
    from dataflex_core.mechanisms.pilot.settings import PILOT_COMMIT_BAND, pilot_settings

    block = DemoOptions(mechanism="pilot", preset="pilot-commit").block()
    assert block["scorer"] == {"name": "group_solve_rate", "params": {}}
    assert block["actuator"] == {"name": "threshold_band", "params": PILOT_COMMIT_BAND}
    assert block["pilot"] == {"preset": "pilot-commit", "on_short": "backfill"}
    settings = pilot_settings(block)  # core resolves the preset: the buffer, rounds, eviction, 25 % pilots
    assert settings.carry is not None and settings.carry.max_off_steps == 4 and settings.evict_solved
    assert settings.prompts == 3 and settings.rollouts_share == 0.25 and settings.on_short == "backfill"
    named = DemoOptions(mechanism="pilot", preset="pilot-commit", actuator="threshold_band",
                        actuator_params={"low": 0.2}, pilot_params={"carry": None}).block()  # fmt: skip
    assert named["actuator"]["params"] == {"low": 0.2} and named["scorer"]["name"] == "group_solve_rate"
    assert named["pilot"] == {"preset": "pilot-commit", "on_short": "backfill", "carry": None}
    assert DemoOptions(mechanism="pilot", preset="pilot-commit", scorer="group_reward_variance").block()["scorer"] == {
        "name": "group_reward_variance",
        "params": {},
    }
    with pytest.raises(
        ValueError, match="--preset pilot-commit is mechanism pilot's, not filter's: add --mechanism pilot"
    ):
        DemoOptions(mechanism="filter", preset="pilot-commit")
    parser = argparse.ArgumentParser()
    demo_report.add_demo_arguments(parser, workdir="demo_out")
    args = parser.parse_args(["--mechanism", "pilot", "--preset", "pilot-commit"])
    assert DemoOptions(**demo_report.demo_options(args)).block() == block


def test_naming_another_component_drops_the_defaults_params():
    block = DemoOptions(actuator="per_advantage").block()  # softmax's temperature is not per_advantage's
    assert block["actuator"] == {"name": "per_advantage", "params": {}}
    assert block["scorer"]["name"] == "advantage_magnitude"
    block = DemoOptions(actuator="softmax", actuator_params={"temperature": 0.5}).block()
    assert block["actuator"]["params"] == {"temperature": 0.5}


def test_an_unknown_mechanism_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="reweight, select, mix, curriculum"):
        DemoOptions(mechanism="resample").block()


def test_the_command_line_gives_the_options_and_refuses_loose_params(tmp_path):
    parser = argparse.ArgumentParser()
    demo_report.add_demo_arguments(parser, workdir="demo_out")
    args = parser.parse_args(["--scorer", "group_solve_rate", "--params", '{"scorer": {"success_threshold": 0.5}}',
                              "--seeds", "3", "--json", str(tmp_path / "out.json")])  # fmt: skip
    options = DemoOptions(**demo_report.demo_options(args))
    assert options.seed_list() == [0, 1, 2]
    assert options.block()["scorer"] == {"name": "group_solve_rate", "params": {"success_threshold": 0.5}}
    assert str(options.workdir) == "demo_out" and options.json_path == tmp_path / "out.json"
    for bad in ('{"temperature": 0.5}', "{not json", '{"actuator": 3}'):
        with pytest.raises(ValueError, match="--params"):
            demo_report.demo_options(parser.parse_args(["--params", bad]))


def test_an_unknown_component_under_nox_says_how_to_add_a_plugin_package(monkeypatch, capsys):
    """The demo sessions rebuild their virtualenv each run, so "pip install it" alone would not stick."""
    from dataflex_verl.cli import main

    monkeypatch.delenv("NOX_CURRENT_SESSION", raising=False)
    assert main(["demo", "--scorer", "my_length_zscore", "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert "scorer 'my_length_zscore' is not installed" in err and f"({sys.prefix})" in err and "--with" not in err
    monkeypatch.setenv("NOX_CURRENT_SESSION", "demo")
    assert main(["demo", "--scorer", "my_length_zscore", "--steps", "1"]) == 2
    assert "add your plugin package with `nox -s demo -- --with PATH`" in capsys.readouterr().err


def short_document(steps: int) -> dict:
    """A demo's document as both hosts write it: TRL's metric names, two arms, one seed."""
    runs = []
    for arm in ("baseline", "dataflex"):
        rows = []
        for step in range(1, steps + 1):
            metrics = {"reward": 0.1 * step, "step_time": 1.0 + (0.5 if arm == "dataflex" and step == 2 else 0.0)}
            if arm == "dataflex":
                metrics.update({"dataflex/weight/mean": 1.0, "dataflex/weight/std": 0.3, "dataflex/ess_fraction": 0.8,
                                "dataflex/hook_time_s": 0.001})  # fmt: skip
            rows.append({"step": step, "metrics": metrics})
        runs.append({"arm": arm, "seed": 0, "steps": rows})
    return {"runs": runs, "seeds": [0]}


@pytest.mark.parametrize("steps", [1, 3, 10])
def test_a_short_runs_table_says_its_figures_are_too_few_to_compare(steps, tmp_path):
    said = []
    names = demo_report.HostMetrics(reward="reward", step_time="step_time")
    demo_report.finish(short_document(steps), names=names, baseline="baseline", title="t", json_path=None,
                       plot_path=tmp_path / "demo.png", say=said.append)  # fmt: skip
    text = "\n".join(said)
    assert "first 1 steps" not in text
    assert ("| reward, step 1 |" in text) == (steps < 6)  # the labels say the steps each figure covers
    short = "too few to compare the arms' rewards or step times" in text
    assert short == (steps < demo_report.SHORT_RUN_STEPS), text
    if short:
        assert f"{steps} step{'s' if steps > 1 else ''} per arm" in text and "The hook share is the cost" in text


def test_the_plot_has_whole_step_ticks_and_names_a_metric_once():
    pytest.importorskip("matplotlib")
    names = demo_report.HostMetrics(reward="reward", step_time="step_time")
    fig = demo_report.figure(short_document(3), names, baseline="baseline", title="t")
    reward, weights = fig.axes
    assert reward.get_ylabel() == "reward"
    ticks = [t for t in weights.get_xticks() if 1 <= t <= 3]
    assert ticks and all(float(t).is_integer() for t in ticks), ticks
    verl = demo_report.HostMetrics(reward="critic/score/mean", step_time="timing_s/step")
    doc = short_document(3)
    for run in doc["runs"]:
        for row in run["steps"]:
            row["metrics"]["critic/score/mean"] = row["metrics"]["reward"]
    assert (
        demo_report.figure(doc, verl, baseline="baseline", title="t").axes[0].get_ylabel()
        == "reward (critic/score/mean)"
    )


def test_the_filter_demo_is_dapos_dynamic_sampling_on_the_mixed_task():
    options = DemoOptions(mechanism="filter")
    block = options.block()
    assert block["scorer"]["name"] == "group_reward_variance" and block["actuator"]["name"] == "threshold_band"
    assert block["actuator"]["params"]["low"] == 0.0 and block["filter"]["on_short"] == "backfill"
    assert options.toy_task == "mixed"  # the echo task rarely has a group without reward variance
    assert block["filter"] == {"max_rounds": 8, "on_short": "backfill"}
    # filter_params replaces the demo's keys (core's defaults for those left out), as the evidence recipes use it
    assert DemoOptions(mechanism="filter", filter_params={"on_short": "backfill"}).block()["filter"] == {
        "on_short": "backfill"
    }


def test_the_allocate_demo_is_knapsack_rl_on_the_mixed_task_keyed_by_the_prompt_index():
    options = DemoOptions(mechanism="allocate")
    block = options.block()
    assert block["scorer"]["name"] == "solve_rate_posterior" and block["actuator"]["name"] == "knapsack"
    assert block["prompt_key"] == "index"  # the ledger's key: verl copies extra_info.index into every rollout
    assert options.toy_task == "mixed"  # its solved and unsolvable prompts are what allocation moves rollouts from
