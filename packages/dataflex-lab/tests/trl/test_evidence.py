"""``dataflex-trl evidence --quick``: every recipe trains in TRL's real loop and the campaign ends in the
comparison at equal rollouts, written for every family."""

from __future__ import annotations

import io
import json

import pytest

from dataflex_lab.trl.evidence import QUICK, UNIFORM, Campaign, run_campaign


def test_the_quick_campaign_trains_every_recipe_and_compares_at_equal_rollouts(tmp_path):
    out = io.StringIO()
    summary = run_campaign(Campaign(**QUICK, workdir=tmp_path), out=out)
    text = out.getvalue()
    assert "At equal compute, on the axis **rollouts generated**" in text
    assert "### Rollouts generated to reach `eval_reward` >= 0.15" in text
    runs = json.loads((tmp_path / "repeat.runs.json").read_text())
    assert runs["baseline"] == UNIFORM and runs["settings"]["task"]["family"] == "repeat"
    assert sorted((r["arm"], r["seed"]) for r in runs["runs"]) == sorted(
        (recipe, seed) for recipe in QUICK["recipes"] for seed in range(QUICK["seeds"])
    )
    compared = summary["families"]["repeat"]
    assert compared["x"] == "rollouts" and compared["budget"] == QUICK["steps"] * 64
    assert set(compared["target"]["arms"]) == set(QUICK["recipes"])
    assert (tmp_path / "repeat.compare.md").read_text().startswith("# dataflex compare")


def test_a_campaign_refuses_what_it_cannot_compare():
    with pytest.raises(ValueError, match="unknown recipe\\(s\\) \\['filter'\\]"):
        Campaign(recipes=[UNIFORM, "filter"]).check()
    with pytest.raises(ValueError, match="must include 'uniform'"):
        Campaign(recipes=["curriculum", "select"]).check()
    with pytest.raises(ValueError, match="at least 2"):
        Campaign(seeds=1).check()
    with pytest.raises(ValueError, match="unknown task family 'sort'"):
        Campaign(families=["sort"]).check()
