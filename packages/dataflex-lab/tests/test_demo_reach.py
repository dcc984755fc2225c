"""The demos' reach table: steps and rollouts to 3/4 of the baseline's improvement, per arm and seed."""

from __future__ import annotations

from dataflex_lab import demo_report


def run(arm, seed, curve):
    return {"arm": arm, "seed": seed, "steps": [{"step": s, "metrics": {"val": v}} for s, v in curve]}


def test_reach_table_by_hand():
    document = demo_report.demo_document(
        "test",
        [0, 1],
        [
            run("base", 0, [(0, 0.2), (2, 0.4), (4, 0.6)]),  # start 0.2, final 0.6
            run("base", 1, [(0, 0.2), (2, 0.3), (4, 0.4)]),  # start 0.2, final 0.4: level 0.2 + 0.75 * 0.3
            run("new", 0, [(0, 0.2), (2, 0.5), (4, 0.5)]),
            run("new", 1, [(0, 0.2), (2, 0.3), (4, 0.4)]),
        ],
        {},
    )
    table = demo_report.reach_table(document, "val", "base", rollouts_per_step=10)
    assert "val >= 0.425 (75% of the way from the base arm's first value 0.200 to its last 0.500" in table
    assert "| base | 4, > 4 | >= 4.0 | >= 40 |" in table
    assert "| new | 2, > 4 | >= 3.0 | >= 30 |" in table
    assert demo_report.first_step_reaching(document["runs"][2]["steps"], "val", 0.5) == 2
    assert demo_report.first_step_reaching(document["runs"][3]["steps"], "val", 0.5) is None


def test_reach_table_without_the_metric_says_so():
    document = demo_report.demo_document("test", [0], [run("base", 0, [])], {})
    assert demo_report.reach_table(document, "val", "base", 10) == "no val logged by the base arm: no level to reach"
