"""Case ``fit-pilot``'s arithmetic on verl's logged metrics, and the legacy host's stage metrics it reads, on a run of
the host's own staged generation (no verl run here: the case itself runs verl's fit loop for minutes)."""

from __future__ import annotations

import time

import pytest
from dataflex_bench import cli
from dataflex_bench.fit import FIT_TARGET
from dataflex_bench.fit_pilot import BLOCK, summarize, without_generation
from dataflex_bench.pilot import SELECT, FitController, Replicas, Rows, _session

from dataflex_core.session import StagedGeneration
from dataflex_lab.verl.cpu_loop.alternate import ON_METRIC
from dataflex_verl.legacy_stages import GENERATION_TIME, SEAM_TIME, STAGES_TIME

STAGES = "dataflex/pilot/stages"


def pilot_step(*, rest: float, stages_generation: float, seam: float, fit_gen_block: float) -> dict[str, float]:
    """A pilot step's metrics as verl's legacy fit logs them: the stages ran before fit's timers and were handed to
    its ``gen`` and ``step``, and fit's own generate block (prepared rows back, replicas asleep) is in ``gen`` too."""
    stages = stages_generation + seam
    gen = stages + fit_gen_block
    return {
        "timing_s/step": gen + rest,
        "timing_s/gen": gen,
        STAGES_TIME: stages,
        GENERATION_TIME: stages_generation,
        SEAM_TIME: seam,
        STAGES: 2.0,
    }


def plain_step(*, rest: float, gen: float) -> dict[str, float]:
    return {"timing_s/step": gen + rest, "timing_s/gen": gen}


def test_the_step_without_generation_keeps_the_seam_and_drops_only_generation():
    # the seam's 0.02 s stays in; the stages' generation and fit's own generate block (in the baseline's gen too) go
    step = pilot_step(rest=0.40, stages_generation=1.30, seam=0.02, fit_gen_block=0.005)
    assert without_generation(step, staged=True) == pytest.approx(0.42)
    assert without_generation(plain_step(rest=0.40, gen=1.0), staged=False) == pytest.approx(0.40)
    # a slower generation moves neither figure; a slower seam moves the pilot's alone
    slower = pilot_step(rest=0.40, stages_generation=9.0, seam=0.02, fit_gen_block=0.005)
    assert without_generation(slower, staged=True) == pytest.approx(0.42)
    costly = pilot_step(rest=0.40, stages_generation=1.30, seam=0.10, fit_gen_block=0.005)
    assert without_generation(costly, staged=True) == pytest.approx(0.50)


def alternating_run(*, on_parity: int, speed: float, seam: float, steps: int = 9) -> list[dict]:
    """verl's records of one run with the pilot on the steps of ``on_parity``: ``speed`` is the run's machine speed
    (0.40 s of work without generation at 1.0), the pilot's steps add ``seam`` s; step 1 is verl's warm-up."""
    records = []
    for step in range(1, steps + 1):
        rest = speed * 0.40 + (5.0 if step == 1 else 0.0)
        if step % 2 == on_parity:
            metrics = pilot_step(rest=rest, stages_generation=1.3, seam=seam, fit_gen_block=0.004)
        else:
            metrics = plain_step(rest=rest, gen=1.0)
        records.append({"step": step, "metrics": {**metrics, ON_METRIC: float(step % 2 == on_parity)}})
    return records


def test_the_ratio_is_of_neighbouring_steps_so_a_slow_run_is_not_read_as_the_seams_cost():
    # one run 30 % slower than the other, as whole runs of identical work are on this machine
    runs = {
        "odd": alternating_run(on_parity=1, speed=1.0, seam=0.02),
        "even": alternating_run(on_parity=0, speed=1.3, seam=0.02 * 1.3),
    }
    figures = summarize(runs)
    assert figures["ratio"] == pytest.approx(0.42 / 0.40) and figures["reps"] == 8  # steps 2-3, ..., 8-9 of each
    # medians over both runs mix their speeds: the pooled ratio is what whole runs would have read
    assert figures["pooled_ratio"] == pytest.approx(figures["median_s"] / figures["baseline_s"])
    assert figures["seam_ms"] == pytest.approx(0.5 * (20.0 + 26.0)) and figures["stages_generation_ms"] == 1300.0
    assert figures["fit_gen_block_ms"] == pytest.approx(4.0) and figures["stages_per_step"] == 2.0
    assert figures["gen_without_ms"] == pytest.approx(1000.0)
    assert figures["within_step_ratio"] == pytest.approx(0.42 / 0.40)
    costly = summarize({"odd": alternating_run(on_parity=1, speed=1.0, seam=0.04)})
    assert costly["ratio"] == pytest.approx(1.10) and costly["ratio"] > FIT_TARGET


def test_a_pilot_run_without_the_seam_metric_is_an_error_naming_it():
    step = pilot_step(rest=0.4, stages_generation=1.0, seam=0.01, fit_gen_block=0.0)
    del step[SEAM_TIME]
    with pytest.raises(RuntimeError, match="seam_time_s.*install this checkout"):
        without_generation(step, staged=True)
    with pytest.raises(RuntimeError, match="at least 3 steps per run"):
        summarize({"odd": alternating_run(on_parity=1, speed=1.0, seam=0.01, steps=2)})
    assert "fit-pilot" in cli.CASES and BLOCK["mechanism"] == "pilot"


class SlowReplicas(Replicas):
    """Pre-built rows that take ``seconds`` per generate call, as replicas generating would."""

    def __init__(self, rows: Rows, seconds: float) -> None:
        super().__init__(rows)
        self.seconds, self.calls = seconds, 0

    def generate_sequences(self, requests):
        self.calls += 1
        time.sleep(self.seconds)
        return super().generate_sequences(requests)


def test_the_hosts_seam_time_is_its_stages_time_less_their_generation_and_verls_gen_holds_the_stages():
    prompts, n, delay = 8, 4, 0.1
    session = _session({**SELECT, "mechanism": "pilot", "pilot": BLOCK["pilot"]})
    session.seam(StagedGeneration).prepare(prompts * 64, batch_size=prompts, seed=0)
    fit = FitController(session, Rows(prompts * n * 4, 16), prompts, n, staged=True)
    fit()  # a warm-up step: verl's modules imported on first use
    replicas = fit.rollout.manager = SlowReplicas(fit.rollout.manager.rows, delay)
    fit.trainer.global_steps = 2
    fit.rounds.step(fit.pulled)  # the loader's pull: the stages, run before fit's timers
    metrics = fit.trainer.dataflex_metrics
    assert replicas.calls >= 2  # a screening stage and the commit
    assert metrics[SEAM_TIME] == metrics[STAGES_TIME] - metrics[GENERATION_TIME]
    assert replicas.calls * delay <= metrics[GENERATION_TIME] < metrics[STAGES_TIME]
    assert 0 < metrics[SEAM_TIME] < replicas.calls * delay  # the replicas' sleeps are generation, not the seam
    # what fit's generate call hands verl: the stages' whole time for its gen and step timers (fit_pilot subtracts
    # verl's gen, then puts the seam's share back)
    timing = fit.rollout.prepared.rollouts.meta_info["timing"]
    assert timing["gen"] == timing["step"] == metrics[STAGES_TIME]
