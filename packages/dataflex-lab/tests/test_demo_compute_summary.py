"""Where a demo arm's rollouts went: the summary read from the compute counters every arm logs."""

from __future__ import annotations

import pytest

from dataflex_lab import compute, demo_report


def _steps(per_step: list[dict[str, float]], validation_first: bool = True) -> list[dict]:
    """Step records as the demos log them: an evaluation alone at step 0, then the counters and their totals."""
    records = [{"step": 0, "metrics": {"eval_reward": 0.1}}] if validation_first else []
    totals: dict[str, float] = {}
    for step, counts in enumerate(per_step, start=1):
        metrics = {}
        for name, value in counts.items():
            totals[name] = totals.get(name, 0.0) + value
            metrics[compute.PREFIX + name] = value
            metrics[compute.total(name)] = totals[name]
        records.append({"step": step, "metrics": metrics})
    return records


def test_an_arm_states_rollouts_per_trained_group_and_its_wasted_and_filtered_shares():
    uniform = _steps([{"rollouts_generated": 64, "rollouts_trained": 64, "rollouts_wasted": 48}] * 2)
    # a filter: 3 rounds of 8 prompts x 8 to fill the batch of 8 groups, 128 rows evicted, few wasted
    refill = _steps([{"rollouts_generated": 192, "rollouts_trained": 64, "rollouts_filtered": 128,
                      "rollouts_wasted": 4}] * 2)  # fmt: skip
    assert compute.run_compute(uniform, groups_per_step=8) == {
        "rollouts_generated": 128.0,
        "rollouts_per_trained_group": 8.0,
        "wasted_fraction": 0.75,
        "filtered_fraction": 0.0,
    }
    summary = compute.run_compute(refill, groups_per_step=8)
    assert summary["rollouts_per_trained_group"] == 24.0  # the evaluation-only record is not a training step
    assert summary["wasted_fraction"] == pytest.approx(4 / 64) and summary["filtered_fraction"] == pytest.approx(2 / 3)
    assert compute.run_compute([{"step": 1, "metrics": {"reward": 0.5}}], groups_per_step=8) is None


def test_the_demo_summary_averages_over_seeds_and_says_which_arm_logged_no_counters():
    runs = [
        {"arm": "sync", "seed": 0, "steps": _steps([{"rollouts_generated": 64, "rollouts_trained": 64,
                                                     "rollouts_wasted": 64}])},
        {"arm": "sync", "seed": 1, "steps": _steps([{"rollouts_generated": 64, "rollouts_trained": 64,
                                                     "rollouts_wasted": 32}])},
        {"arm": "old", "seed": 0, "steps": [{"step": 1, "metrics": {"reward": 0.5}}]},
    ]  # fmt: skip
    document = {"runs": runs}
    sync = demo_report.compute_summary(document, "sync", groups_per_step=8)
    assert sync["wasted_fraction"] == 0.75 and sync["rollouts_generated"] == 64.0
    assert demo_report.compute_summary(document, "old", groups_per_step=8) == {}
    table = demo_report.compute_table({"sync": sync, "old": {}})
    assert "| sync | 64 | 8.00 | 75% | 0% |" in table and "| old | - | - | - | - |" in table
