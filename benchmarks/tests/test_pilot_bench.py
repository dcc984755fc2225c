"""Case ``pilot`` in quick mode: the staged step and the reweight step both measured, the ratio reported."""

from __future__ import annotations

import math

from dataflex_bench import cli
from dataflex_bench.pilot import TARGET, run_pilot


def test_quick_pilot_case_reports_the_seam_ratio_on_a_full_batch():
    (row,) = run_pilot(quick=True, reps=1, unjudged="smoke", progress=lambda _: None)
    assert row.status == "smoke" and row.target == TARGET == 1.05
    assert row.median_s > 0 and row.baseline_s > 0 and math.isfinite(row.ratio)
    assert row.ratio == row.median_s / row.baseline_s
    assert row.extra["trained_rows"] == 16 * 4  # the staged step filled its batch: 16 groups of rollout.n
    assert all(row.extra[f"{phase}_ms"] > 0 for phase in ("stages", "assembly", "run"))  # each phase timed
    assert "pilot" in cli.CASES
