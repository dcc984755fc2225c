"""Case ``pilot`` in quick mode: the staged step against the reweight step and verl's fit controller with the seam
against it without, both measured, the ratios reported as information (case ``fit-pilot`` is the judged one)."""

from __future__ import annotations

import math

import numpy as np
import torch
from dataflex_bench import cli
from dataflex_bench.pilot import SELECT, TARGET, FitController, Rows, _session, run_pilot

from dataflex_core.session import StagedGeneration


def test_quick_pilot_case_reports_both_seam_ratios_on_a_full_batch_unjudged():
    # full mode passes no unjudged status: the controller rows are still information, never pass or miss
    alone, hosted = run_pilot(quick=True, reps=1, progress=lambda _: None)
    assert (alone.name, hosted.name) == ("staged step vs reweight step", "staged host step vs host step")
    for row in (alone, hosted):
        assert row.status == "info" and row.target == TARGET == 1.05 and "not judged" in row.note
        assert row.median_s > 0 and row.baseline_s > 0 and math.isfinite(row.ratio)
        assert row.ratio == row.median_s / row.baseline_s
        assert row.extra["trained_rows"] == 16 * 4  # the staged step filled its batch: 16 groups of rollout.n
    assert all(alone.extra[f"{phase}_ms"] > 0 for phase in ("stages", "assembly", "run"))  # each phase timed
    assert hosted.extra["seam_ms"] > 0 and hosted.extra["fit_without_seam_ms"] == hosted.baseline_s * 1e3
    assert "pilot" in cli.CASES


def test_fit_controller_trains_fits_batch_with_verls_advantages_and_dataflex_weights():
    """Both sides of the host-step ratio do a step's work: GRPO advantages by group, DataFlex's step (the reweighter's
    weights written), and the staged side trains admitted groups (rewards that vary) of rollout.n rows under fit's
    uids."""
    block = {**SELECT, "mechanism": "pilot", "pilot": {"prompts": 2, "rollouts": 2, "on_short": "backfill"}}
    reweight = {"scorer": SELECT["scorer"], "actuator": {"name": "softmax"}}
    rows = Rows(8 * 4 * 4, 6)
    pilot = _session(block)
    pilot.seam(StagedGeneration).prepare(8 * 64, batch_size=8, seed=0)
    for session, staged in ((_session(reweight), False), (pilot, True)):
        fit = FitController(session, rows, 8, 4, staged=staged)
        batch = fit()
        assert len(batch) == 8 * 4
        assert batch.non_tensor_batch["uid"].tolist() == [f"fit-{i:08d}" for i in range(8) for _ in range(4)]
        reward = batch.batch["rm_scores"].sum(-1).view(8, 4)
        varies = reward.max(-1).values != reward.min(-1).values
        spread = varies.repeat_interleave(4)
        advantages = batch.batch["advantages"].abs().sum(-1)
        assert bool((advantages[spread] > 0).all()) and bool((advantages[~spread] == 0).all())  # verl's GRPO ran
        # DataFlex's step ran at compute_advantage: the reweighter wrote its weights; pilot trains its groups as they are
        assert ("rollout_is_weights" in batch.batch.keys()) == (not staged)
        if staged:  # a group without signal is one the stages backfilled (admitted ones varied in their pilots)
            assert fit.generation is not None and int((~varies).sum()) <= fit.generation.backfilled
        else:  # fit's own batch: the pulled prompts, each rollout.n times, the replicas' rows in order
            assert fit.generation is None and torch.equal(batch.batch["rm_scores"], rows.scores[: 8 * 4])
            prompts = [info["index"] for info in batch.non_tensor_batch["extra_info"]]
            assert prompts == np.repeat(np.arange(8), 4).tolist()
