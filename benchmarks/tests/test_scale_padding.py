"""Case ``scale``, the padded step, in quick mode: every pair's four rows measured, none crashed (issue 36)."""

from __future__ import annotations

import importlib.util
import math

import torch
from dataflex_bench.scale_padding import PADDING_ROWS, padded_copy, run_padded_step
from dataflex_bench.synthetic import SyntheticGRPO


def test_padding_rows_are_verls_scattered_empty_rows_with_one_pad_uid():
    plain = SyntheticGRPO(4, 4, 8, seed=0).batch(["rm_scores", "advantages"])
    padded = padded_copy(plain, 3, seed=1)
    pad = padded.batch["is_padding"]
    assert int(pad.sum()) == 3 and len(padded) == len(plain) + 3
    assert not padded.batch["response_mask"][pad].any() and not padded.batch["rm_scores"][pad].any()
    assert len(set(padded.non_tensor_batch["uid"][pad.numpy()])) == 1
    assert torch.equal(padded.batch["advantages"][~pad], plain.batch["advantages"])  # real rows kept, in order


def test_quick_padded_step_measures_every_pair_unjudged_at_each_thread_count():
    only = ["softmax", "high_entropy"]
    rows = run_padded_step(quick=True, reps=3, only=only, threads=(1, 2), unjudged="smoke", progress=lambda _: None)
    names = {row.name for row in rows}
    assert "padding rows time advantage_magnitude+softmax" in names
    assert "V1 host step peak token_entropy+high_entropy_tokens" in names
    measured_rows = [row for row in rows if row.status != "skip"]
    assert measured_rows and all(row.status == "smoke" and math.isfinite(row.ratio) for row in measured_rows)
    assert all(f"+{PADDING_ROWS} padding" in row.shape for row in rows if "admission / clone" not in row.name)
    # Every row at one thread, and again at two (said in the shape), as the targets are judged.
    one = [row for row in measured_rows if not row.shape.endswith("@ 2 threads")]
    two = [row for row in measured_rows if row.shape.endswith("@ 2 threads")]
    assert one and sorted(r.name for r in one) == sorted(r.name for r in two)
    # the judged time rows: three passes of one round each (the second in reverse order), their ratios kept
    times = [row for row in measured_rows if " time " in row.name and row.name.startswith(("padding", "V1 host"))]
    assert times and all(len(row.extra["pass_ratios"]) == 3 for row in times)
    steps = [row for row in two if row.name.startswith("V1 host step time")]
    assert steps and all(row.extra["threads"] == 2 and row.extra["cpu_ratio"] > 0 for row in steps)
    # the informational rows: every pair against verl's GRPO advantage, and the filter admission, at each count
    grpo = {row.name.removeprefix("V1 host step / verl's GRPO "): row for row in rows if "verl's GRPO" in row.name}
    assert "advantage_magnitude+softmax" in grpo  # measured where verl is installed, a skip naming it elsewhere
    assert grpo["advantage_magnitude+softmax"].status == ("smoke" if importlib.util.find_spec("verl") else "skip")
    admission = [row for row in measured_rows if row.name.startswith("filter admission")]
    assert len(admission) == 4 and all(row.median_s > 0 and row.baseline_s > 0 for row in admission)
