"""The fit cases' measure on verl's logged step records, and their plumbing (no verl run here: a run takes minutes)."""

from __future__ import annotations

import pytest
from dataflex_bench import cli, fit
from dataflex_bench.fit import FIT_TARGET, GEN, ON_METRIC, SEAM, STEP, paired_steps, summarize, without_generation


def alternating_run(*, on_odd: bool, speed: float, cost: float, steps: int = 9, pilot: bool = False) -> list[dict]:
    """verl's records of one alternating run: each step ``speed`` s of verl's work (1.0 s of generation on top
    when ``pilot``), ``cost`` more on the steps DataFlex ran on (for the pilot, its seam's time inside verl's gen);
    step 1 is verl's warm-up (slow, left out)."""
    records = []
    for step in range(1, steps + 1):
        on = (step % 2 == 1) == on_odd
        extra = cost if on else 0.0
        gen = (1.0 + extra) if pilot else 0.0  # verl's gen timer holds the pilot's stages whole
        metrics = {STEP: speed + gen + (0.0 if pilot else extra) + (5.0 if step == 1 else 0.0), GEN: gen}
        metrics[ON_METRIC] = float(on)
        if pilot and on:
            metrics[SEAM] = cost
        records.append({"step": step, "metrics": metrics})
    return records


def test_neighbouring_steps_pair_one_with_dataflex_and_one_without_warm_up_left_out():
    pairs = paired_steps(alternating_run(on_odd=True, speed=1.0, cost=0.02))
    assert pairs == [(1.02, 1.0)] * 4  # steps 2-3, 4-5, 6-7, 8-9
    assert len(paired_steps(alternating_run(on_odd=False, speed=1.0, cost=0.02, steps=8))) == 3


def test_a_slow_run_is_not_read_as_dataflex_cost_and_a_real_cost_is():
    runs = [alternating_run(on_odd=True, speed=1.0, cost=0.0), alternating_run(on_odd=False, speed=1.3, cost=0.0)]
    quiet = summarize("fit", runs)  # the second run 30 % slower throughout, as whole runs differ here
    assert quiet["ratio"] == pytest.approx(1.0) and quiet["reps"] == 8
    runs = [alternating_run(on_odd=True, speed=1.0, cost=0.08), alternating_run(on_odd=False, speed=1.0, cost=0.08)]
    costly = summarize("fit", runs)
    assert costly["ratio"] == pytest.approx(1.08) and costly["ratio"] > FIT_TARGET


def test_the_pilots_step_drops_generation_and_keeps_its_seam():
    step = {STEP: 1.72, GEN: 1.32, SEAM: 0.02, ON_METRIC: 1.0}  # 0.40 s of work, the seam inside gen
    assert without_generation(step) == pytest.approx(0.42)
    assert without_generation({STEP: 1.40, GEN: 1.0, ON_METRIC: 0.0}) == pytest.approx(0.40)
    runs = [
        alternating_run(on_odd=True, speed=0.4, cost=0.02, pilot=True),
        alternating_run(on_odd=False, speed=0.4, cost=0.02, pilot=True),
    ]
    assert summarize("fit-pilot", runs)["ratio"] == pytest.approx(0.42 / 0.40)
    del runs[0][2]["metrics"][SEAM]  # a dataflex-verl older than the seam metric
    with pytest.raises(RuntimeError, match="dataflex/pilot/seam_time_s"):
        summarize("fit-pilot", runs)


def test_a_run_that_did_not_alternate_is_an_error_naming_the_steps():
    records = alternating_run(on_odd=True, speed=1.0, cost=0.0)
    for record in records:
        record["metrics"][ON_METRIC] = 1.0  # the harness's switch never reached verl's task runner
    with pytest.raises(RuntimeError, match="steps 2 and 3 logged dataflex_bench/dataflex_on=1.0 and 1.0"):
        paired_steps(records)


def test_each_fit_case_is_a_case_of_the_cli_and_skips_with_the_reason_when_verl_is_missing(monkeypatch):
    from dataflex_lab.verl.cpu_loop.alternate import ON_METRIC as HARNESS_METRIC

    assert HARNESS_METRIC == ON_METRIC  # the metric the harness logs is the one read here
    assert set(fit.CASES) <= set(cli.CASES)
    monkeypatch.setattr(fit, "fit_missing", lambda: "verl is not installed")
    for case in fit.CASES:
        (row,) = fit.run_fit(case, quick=True, progress=lambda _: None)
        assert (row.case, row.status, row.note, row.target) == (case, "skip", "verl is not installed", FIT_TARGET)
        assert "4 steps per run" in row.shape


def test_each_fit_case_runs_its_trainer_twice_on_opposite_parities_at_lr_0(monkeypatch):
    from dataflex_lab.verl.cpu_loop import runner

    specs = []

    def run_entry_point(spec, workspace, metrics_file, log_file):
        specs.append(spec)
        pilot = spec.dataflex["mechanism"] == "pilot"
        return alternating_run(on_odd=spec.dataflex_on_steps == "odd", speed=1.0, cost=0.02, pilot=pilot)

    monkeypatch.setattr(fit, "fit_missing", lambda: None)
    monkeypatch.setattr(runner, "prepare_workspace", lambda root: root)
    monkeypatch.setattr(runner, "run_entry_point", run_entry_point)
    for case, (_, trainer, block, _) in fit.CASES.items():
        specs.clear()
        (row,) = fit.run_fit(case, quick=True, progress=lambda _: None)
        assert [s.dataflex_on_steps for s in specs] == ["odd", "even"] and row.ratio == pytest.approx(1.02)
        assert all(s.dataflex == block and s.lr == 0.0 and s.steps == 4 for s in specs)
        assert all(s.use_v1 == trainer.get("use_v1", True) for s in specs) and row.status == "pass"
