"""Case ``scale`` in quick mode: every row measured (ledger, allocation, curriculum draw), none crashed."""

from __future__ import annotations

import math

from dataflex_bench import cli
from dataflex_bench.scale import run_scale


def test_quick_scale_case_measures_every_row_unjudged():
    rows = run_scale(quick=True, reps=1, unjudged="smoke", progress=lambda _: None)
    names = {row.name for row in rows}
    assert {
        "ledger checkpoint write",
        "ledger checkpoint read",
        "ledger Parquet export",
        "ledger Parquet import",
    } <= names
    assert {"allocation", "curriculum draw, candidates: 256", "curriculum draw, every prompt vs torch's Beta"} <= names
    peaks = [row for row in rows if row.name.endswith("peak memory")]
    assert {row.name for row in peaks} == {"ledger Parquet export peak memory", "ledger Parquet import peak memory"}
    assert all("MiB of columns" in row.note and "differs" not in row.note for row in peaks)
    assert all(row.status in ("smoke", "info") and math.isfinite(row.ratio) and row.median_s > 0 for row in rows)
    assert "scale" in cli.CASES
