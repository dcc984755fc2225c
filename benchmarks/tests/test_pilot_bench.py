"""Case ``pilot`` in quick mode: the staged step against the reweight step and the staged host step against the host
step without stages, both measured, the ratios reported."""

from __future__ import annotations

import math

from dataflex_bench import cli
from dataflex_bench.pilot import TARGET, host_step, prompt_batch, run_pilot


def test_quick_pilot_case_reports_both_seam_ratios_on_a_full_batch():
    alone, hosted = run_pilot(quick=True, reps=1, unjudged="smoke", progress=lambda _: None)
    assert (alone.name, hosted.name) == ("staged step vs reweight step", "staged host step vs host step")
    for row in (alone, hosted):
        assert row.status == "smoke" and row.target == TARGET == 1.05
        assert row.median_s > 0 and row.baseline_s > 0 and math.isfinite(row.ratio)
        assert row.ratio == row.median_s / row.baseline_s
        assert row.extra["trained_rows"] == 16 * 4  # the staged step filled its batch: 16 groups of rollout.n
    assert all(alone.extra[f"{phase}_ms"] > 0 for phase in ("stages", "assembly", "run"))  # each phase timed
    assert all(hosted.extra[f"{phase}_ms"] > 0 for phase in ("stages", "assembly", "host_step", "host_step_base"))
    assert "pilot" in cli.CASES


def test_host_step_gives_verls_grpo_advantages_and_dataflex_weights_on_fits_batch():
    import numpy as np
    import torch

    from dataflex_bench.pilot import Rows, _session

    session = _session({"scorer": {"name": "group_reward_variance"}, "actuator": {"name": "softmax"}})
    rows = Rows(8, 6)
    rollouts, _ = rows.take(np.arange(4), torch.full((4,), 2))  # 4 prompts x 2 rollouts
    batch = host_step(session, prompt_batch(4), rollouts, 2, step=1)
    assert batch.non_tensor_batch["uid"].tolist() == [f"fit-{i:08d}" for i in range(4) for _ in range(2)]
    reward = rows.reward[:8].view(4, 2)
    spread = (reward[:, :1] != reward[:, 1:]).flatten().repeat_interleave(2)  # groups whose two rewards differ
    advantages = batch.batch["advantages"].abs().sum(-1)
    assert bool((advantages[spread] > 0).all()) and bool((advantages[~spread] == 0).all())  # verl's GRPO ran
    assert "rollout_is_weights" in batch.batch.keys()  # DataFlex's step wrote its weights, as at compute_advantage
    assert torch.equal(batch.batch["rm_scores"], rows.scores[:8]) and "data_source" in batch.non_tensor_batch
