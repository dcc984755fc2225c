"""``dataflex-verl demo-step``: one call of verl's real ``_compute_advantage`` per pair, and verl's real loss."""

from __future__ import annotations

import io

import pytest

from dataflex_lab.verl.demo_step import PAIRS, run_demo

pytestmark = pytest.mark.verl


def test_demo_prints_weights_and_both_losses_per_pair(queue):
    out = io.StringIO()
    rows = run_demo(num_prompts=4, n=4, max_response_len=16, pairs=PAIRS[:2], out=out, start_queue=False)
    text = out.getvalue()
    assert [row["pair"] for row in rows] == [pair.label for pair in PAIRS[:2]]
    for row in rows:
        assert row["dataflex/weight/mean"] == pytest.approx(1.0, abs=1e-5)
        assert row["loss_weighted"] != pytest.approx(row["loss_unweighted"], rel=1e-4)
        assert f"without weights {row['loss_unweighted']:+.6f}" in text
        assert f"with dataflex weights {row['loss_weighted']:+.6f}" in text
