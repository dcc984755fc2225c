"""``dataflex-trl evidence --quick``: every recipe trains in TRL's real loop and the campaign ends in the
comparison at equal rollouts and the compute table, written for every family."""

from __future__ import annotations

import io
import json

import pytest

from dataflex_lab.compare import runs_from_demo
from dataflex_lab.compare.axis import axis_values
from dataflex_lab.compute import total
from dataflex_lab.trl.evidence import QUICK, TARGETS, UNIFORM, Campaign, report_campaign, run_campaign

GENERATED, TRAINED, ROUNDS = (total(n) for n in ("rollouts_generated", "rollouts_trained", "generation_rounds"))


def test_the_quick_campaign_trains_every_recipe_and_compares_at_equal_rollouts(tmp_path):
    out = io.StringIO()
    summary = run_campaign(Campaign(**QUICK, workdir=tmp_path), out=out)
    text = out.getvalue()
    assert "At equal compute, on the axis **rollouts generated**" in text
    assert f"### Rollouts generated to reach `eval_reward` >= {TARGETS['repeat']:g}" in text
    document = json.loads((tmp_path / "repeat.runs.json").read_text())
    assert document["baseline"] == UNIFORM and document["settings"]["task"]["family"] == "repeat"
    assert sorted((r["arm"], r["seed"]) for r in document["runs"]) == sorted(
        (recipe, seed) for recipe in QUICK["recipes"] for seed in range(QUICK["seeds"])
    )
    compared = summary["families"]["repeat"]
    assert compared["x"] == "rollouts" and set(compared["target"]["arms"]) == set(QUICK["recipes"])
    assert (tmp_path / "repeat.compare.md").read_text().startswith("# dataflex compare")

    # the filter's x is every rollout it generated, evicted groups included: 64 per generation round
    rows = 8 * 8
    runs = runs_from_demo(document)
    filtered = [run for run in runs if run.arm == "filter"]
    for run in filtered:
        steps = sorted(run.steps)
        last = run.curve(GENERATED)[-1][1]
        assert last == rows * run.curve(ROUNDS)[-1][1] and run.curve(TRAINED)[-1][1] == rows * QUICK["steps"]
        assert axis_values(run, "rollouts", steps)[-1] == last
    assert any(run.curve(ROUNDS)[-1][1] > QUICK["steps"] for run in filtered), "no step refilled: nothing checked"
    # every run is cut at the budget all reached: uniform's, as the filter generates more per step
    assert compared["budget"] == min(run.curve(GENERATED)[-1][1] for run in runs) == QUICK["steps"] * rows

    costs = compared["compute"]["arms"]
    assert costs[UNIFORM]["generated_per_group"]["mean"] == 8.0 and costs[UNIFORM]["rounds_per_step"]["mean"] == 1.0
    assert costs["filter"]["generated_per_group"]["mean"] == pytest.approx(
        8 * costs["filter"]["rounds_per_step"]["mean"]
    )
    assert costs["filter"]["generated_per_group"]["mean"] > 8.0
    assert (tmp_path / "repeat.compute.md").read_text() in text

    # --report-only: the same tables from the runs file, nothing trained
    written = {name: (tmp_path / name).read_text() for name in ("repeat.compare.md", "repeat.compute.md")}
    again = report_campaign(Campaign(families=["repeat"], workdir=tmp_path), out=io.StringIO())
    assert again["families"]["repeat"]["compute"] == compared["compute"]
    assert {name: (tmp_path / name).read_text() for name in written} == written
    with pytest.raises(ValueError, match="count.runs.json, which does not exist"):
        report_campaign(Campaign(families=["count"], workdir=tmp_path), out=io.StringIO())


def test_each_family_is_timed_to_its_own_level_unless_one_is_given():
    assert Campaign().target_for("count") == TARGETS["count"] and Campaign().target_for("repeat") == TARGETS["repeat"]
    assert Campaign(target=0.2).target_for("count") == 0.2


def test_a_campaign_refuses_what_it_cannot_compare():
    with pytest.raises(ValueError, match="unknown recipe\\(s\\) \\['allocate'\\]"):
        Campaign(recipes=[UNIFORM, "allocate"]).check()
    with pytest.raises(ValueError, match="must include 'uniform'"):
        Campaign(recipes=["curriculum", "select"]).check()
    with pytest.raises(ValueError, match="at least 2"):
        Campaign(seeds=1).check()
    with pytest.raises(ValueError, match="unknown task family 'sort'"):
        Campaign(families=["sort"]).check()
    with pytest.raises(ValueError, match="--target 1.5 is outside"):
        Campaign(target=1.5).check()
