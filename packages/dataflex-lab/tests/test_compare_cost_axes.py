"""The three cost axes (rollouts, optimizer steps, modeled seconds) to a target, on recorded runs whose counters are
known: the cost model's figures equal a hand computation, and ``dataflex compare --cost-axes`` and the evidence
campaign's rows read them through one function and give the same figures."""

from __future__ import annotations

import json
import math

import pytest

from dataflex_lab.cli import add_compare
from dataflex_lab.compare import CompareError, Run, compare_runs
from dataflex_lab.compare import cost_axes as cost_axes_module
from dataflex_lab.compare.axis import axis_values
from dataflex_lab.compare.cost_model import CostModel, from_options
from dataflex_lab.compute import total

METRIC = "held_out/reward"
TARGET = 0.5
#: 0.01 s a rollout generated, 2 s a generation call, 0.005 s a rollout trained.
MODEL = CostModel(per_rollout_s=0.01, per_call_s=2.0, per_trained_rollout_s=0.005)
#: arm -> (rollouts generated a step, generation calls a step, rollouts trained a step, steps run, step reaching
#: the target per seed): uniform as a plain GRPO step; pilot screens in 3 sequential calls, 96 rollouts for 64 trained.
ARMS = {"uniform": (64, 1, 64, 20, {0: 6, 1: 8}), "pilot": (96, 3, 64, 10, {0: 3, 1: 5})}


def recorded(arm: str, seed: int) -> dict:
    """A run as the campaign records it: the held-out score at step 0 and every step (0 until the step it reaches
    the target, then the target), and every step's cumulative counters."""
    generated, calls, trained, steps, reach = ARMS[arm]
    records = [{"step": 0, "metrics": {METRIC: 0.0}}]
    for step in range(1, steps + 1):
        records.append({"step": step, "metrics": {
            METRIC: TARGET if step >= reach[seed] else 0.0,
            total("rollouts_generated"): float(generated * step),
            total("generation_rounds"): float(calls * step),
            total("rollouts_trained"): float(trained * step),
            total("rollouts_wasted"): 0.0,
        }})  # fmt: skip
    return {"arm": arm, "seed": seed, "steps": records}


def document() -> dict:
    runs = [recorded(arm, seed) for arm in ARMS for seed in (0, 1)]
    return {"format": "dataflex-demo/1", "host": "trl", "baseline": "uniform", "metric": METRIC, "runs": runs}


def test_the_modeled_seconds_of_a_recorded_run_are_the_hand_computed_ones():
    run = Run.from_record(recorded("pilot", 0))
    # a pilot step: 96 * 0.01 + 3 * 2 + 64 * 0.005 = 0.96 + 6 + 0.32 = 7.28 s; nothing before the first step
    assert axis_values(run, "modeled", [0, 1, 2, 10], MODEL) == pytest.approx((0.0, 7.28, 14.56, 72.8))
    assert axis_values(run, "optimizer_steps", [0, 1, 2, 10]) == (0.0, 1.0, 2.0, 10.0)


def test_the_time_to_target_on_each_axis_is_the_hand_computed_ratio():
    results = cost_axes_module.reach_on_axes(document(), metric=METRIC, target=TARGET, cost_model=MODEL, n_boot=500)
    # uniform step: 0.64 + 2 + 0.32 = 2.96 s; pilot step 7.28 s. Per seed baseline / arm, geometric mean over seeds.
    by_hand = {
        "rollouts": math.sqrt((6 * 64 / (3 * 96)) * (8 * 64 / (5 * 96))),
        "optimizer_steps": math.sqrt((6 / 3) * (8 / 5)),
        "modeled": math.sqrt((6 * 2.96 / (3 * 7.28)) * (8 * 2.96 / (5 * 7.28))),
    }
    for x, expected in by_hand.items():
        assert results[x].ratios["pilot"].ratio == pytest.approx(expected), x
        assert results[x].reach["pilot"].censored == []
    # the pilot needs fewer rollouts and steps but more modeled time: the verdict depends on the axis
    assert by_hand["optimizer_steps"] > by_hand["rollouts"] > 1 > by_hand["modeled"]
    assert results["modeled"].reach["uniform"].per_seed == pytest.approx({0: 6 * 2.96, 1: 8 * 2.96})


def test_without_a_cost_model_the_modeled_axis_is_left_out_and_cannot_be_asked_for():
    assert set(cost_axes_module.reach_on_axes(document(), metric=METRIC, target=TARGET, n_boot=500)) == {
        "rollouts",
        "optimizer_steps",
    }
    with pytest.raises(CompareError, match="--x modeled needs a cost model"):
        compare_runs(document(), x="modeled")


def test_a_cost_model_needs_all_three_finite_constants():
    assert from_options(None, None, None) is None
    with pytest.raises(CompareError, match="needs all three"):
        from_options(0.01, None, 0.005)
    with pytest.raises(CompareError, match="per_call_s -1"):
        CostModel(0.01, -1, 0.005)
    with pytest.raises(CompareError, match="every constant is 0"):
        CostModel(0, 0, 0)


def test_a_run_without_the_counters_is_named():
    bare = Run("uniform", 0, {0: {METRIC: 0.0}, 1: {METRIC: 0.5, total("rollouts_generated"): 64.0}})
    with pytest.raises(CompareError, match="generation_rounds_total"):
        axis_values(bare, "modeled", [0, 1], MODEL)


def _compare_cli(path, capsys) -> dict:
    import argparse

    parser = argparse.ArgumentParser()
    add_compare(parser.add_subparsers())
    args = parser.parse_args(["compare", str(path), "--x", "rollouts", "--target", str(TARGET), "--cost-axes",
                              "--seconds-per-rollout", "0.01", "--seconds-per-call", "2",
                              "--seconds-per-trained-rollout", "0.005", "--json", "-"])  # fmt: skip
    assert args.func(args) == 0
    return json.loads(capsys.readouterr().out)


def test_compare_and_the_campaign_read_the_axes_through_one_function(tmp_path, capsys, monkeypatch):
    from dataflex_lab.trl import evidence

    path = tmp_path / "band.runs.json"
    path.write_text(json.dumps(document()))
    calls = []
    shared = cost_axes_module.reach_on_axes

    def spy(*args, **kwargs):
        calls.append(kwargs["cost_model"])
        return shared(*args, **kwargs)

    monkeypatch.setattr(cost_axes_module, "reach_on_axes", spy)
    from_cli = _compare_cli(path, capsys)["cost_axes"][METRIC]["pilot"]
    from_campaign = evidence.row(document(), "pilot", TARGET, MODEL)
    assert calls == [MODEL, MODEL]  # one call each
    for x in ("optimizer_steps", "modeled"):
        assert from_campaign["axes"][x]["value"] == pytest.approx(from_cli[x]["value"])
        assert from_campaign["axes"][x]["ci"] == pytest.approx(from_cli[x]["ci"])
    assert from_campaign["ratio"]["value"] == pytest.approx(from_cli["rollouts"]["value"])
    assert from_campaign["axes"]["modeled"]["value"] == pytest.approx(
        math.sqrt((6 * 2.96 / (3 * 7.28)) * (8 * 2.96 / (5 * 7.28)))
    )


def test_the_cost_axes_table_names_each_verdict_s_axis(tmp_path, capsys):
    import argparse

    path = tmp_path / "band.runs.json"
    path.write_text(json.dumps(document()))
    parser = argparse.ArgumentParser()
    add_compare(parser.add_subparsers())
    args = parser.parse_args(["compare", str(path), "--target", str(TARGET), "--cost-axes", "--x", "rollouts",
                              "--bootstrap", "500"])  # fmt: skip
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "rollouts to target" in out and "optimizer steps to target" in out
    assert "modeled seconds to target" not in out  # no cost model given
    assert "no cost model given" in out


def test_cost_axes_without_a_target_is_refused(tmp_path, capsys):
    import argparse

    path = tmp_path / "band.runs.json"
    path.write_text(json.dumps(document()))
    parser = argparse.ArgumentParser()
    add_compare(parser.add_subparsers())
    args = parser.parse_args(["compare", str(path), "--cost-axes"])
    assert args.func(args) == 2
    assert "give --target" in capsys.readouterr().err
