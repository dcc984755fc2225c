"""The compute table (:mod:`dataflex_lab.compare.costs`) on synthetic runs whose counters are known."""

from __future__ import annotations

import pytest

from dataflex_lab.compare import CompareError, Run
from dataflex_lab.compare.costs import compute_costs, median_step_time
from dataflex_lab.compute import total

GROUP = 8


def run(arm, seed, *, steps=10, generated, trained, wasted, rounds=1, step_time=1.0, eval_at_start=True, warmup=None):
    """A run logging every step's cumulative counters (``generated`` etc. per step) and its step time (``warmup``:
    the first step's, when it differs)."""
    log = {0: {"eval_reward": 0.1}} if eval_at_start else {}  # an evaluation before training: no counters
    for step in range(1, steps + 1):
        log[step] = {
            total("rollouts_generated"): float(generated * step),
            total("rollouts_trained"): float(trained * step),
            total("rollouts_wasted"): float(wasted * step),
            total("generation_rounds"): float(rounds * step),
            **({"step_time": warmup if step == 1 and warmup else step_time} if step_time is not None else {}),
        }
    return Run(arm, seed, log)


def test_known_counters_give_known_columns():
    """Uniform: 64 generated and trained a step, 48 wasted; a filter: 3 rounds of 64, 64 trained, 8 wasted, twice
    the step time (a seed-dependent one, to check the pairing); a selector trains half the rows."""
    runs = []
    for seed in range(4):
        runs.append(run("uniform", seed, generated=64, trained=64, wasted=48, step_time=1.0 + seed))
        runs.append(run("filter", seed, generated=192, trained=64, wasted=8, rounds=3, step_time=2.0 * (1.0 + seed)))
        runs.append(run("select", seed, generated=64, trained=32, wasted=8 + 4 * seed, step_time=1.0 + seed))
    table = compute_costs(runs, baseline="uniform", group_size=GROUP, n_boot=500)
    assert [arm.arm for arm in table.arms] == ["uniform", "filter", "select"]
    uniform, filtered, select = (arm.columns for arm in table.arms)
    assert uniform["generated_per_group"].mean == 8.0 and uniform["wasted_share"].mean == 0.75
    assert uniform["step_time_ratio"].mean == 1.0 and uniform["rounds_per_step"].mean == 1.0
    assert filtered["generated_per_group"].mean == 24.0 and filtered["generated_per_group"].ci == (24.0, 24.0)
    assert filtered["wasted_share"].mean == 0.125 and filtered["rounds_per_step"].mean == 3.0
    assert filtered["step_time_ratio"].mean == pytest.approx(2.0) and filtered["step_time_ratio"].ci == pytest.approx(
        (2.0, 2.0)
    )
    assert select["generated_per_group"].mean == 16.0
    # the wasted share differs by seed: 0.25, 0.375, 0.5, 0.625 -> mean 0.4375, an interval around it
    assert select["wasted_share"].per_seed == {0: 0.25, 1: 0.375, 2: 0.5, 3: 0.625}
    assert select["wasted_share"].mean == pytest.approx(0.4375)
    low, high = select["wasted_share"].ci
    assert 0.25 <= low < 0.4375 < high <= 0.625
    text = table.markdown()
    assert (
        "| `filter` | 4 | 24.0 [24.0, 24.0] | 12% [12%, 12%] | 3.00 [3.00, 3.00] | 5.00 s [3.00 s, 7.00 s] "
        "| 2.00x [2.00x, 2.00x] |" in text
    )
    assert "| `uniform` (baseline) | 4 |" in text
    assert table.as_dict()["arms"]["filter"]["generated_per_group"]["per_seed"]["0"] == 24.0


def test_a_run_without_step_time_leaves_its_ratio_out_rather_than_guess():
    runs = [run("uniform", s, generated=64, trained=64, wasted=0) for s in range(3)]
    runs += [
        run("filter", s, generated=128, trained=64, wasted=0, rounds=2, step_time=None if s == 1 else 1.0)
        for s in range(3)
    ]
    table = compute_costs(runs, baseline="uniform", group_size=GROUP, n_boot=200)
    filtered = table.arms[1].columns
    assert filtered["step_time_ratio"] is None and filtered["generated_per_group"].mean == 16.0
    assert filtered["step_time_s"] is None
    assert "| `filter` | 3 | 16.0 [16.0, 16.0] | 0% [0%, 0%] | 2.00 [2.00, 2.00] | — | — |" in table.markdown()


def test_the_step_time_is_the_median_step_without_the_warm_up_step():
    """A first step 30x the others (compilation) and one slow step later: the figure is the others' median."""
    runs = [run("uniform", s, generated=64, trained=64, wasted=0, step_time=1.0, warmup=30.0) for s in range(2)]
    runs += [run("filter", s, generated=128, trained=64, wasted=0, step_time=2.0, warmup=40.0) for s in range(2)]
    slow = run("uniform", 2, generated=64, trained=64, wasted=0, step_time=1.0, warmup=30.0)
    slow.steps[7]["step_time"] = 9.0
    runs += [slow, run("filter", 2, generated=128, trained=64, wasted=0, step_time=2.0, warmup=40.0)]
    table = compute_costs(runs, baseline="uniform", group_size=GROUP, n_boot=200)
    uniform, filtered = (arm.columns for arm in table.arms)
    assert uniform["step_time_s"].per_seed == {0: 1.0, 1: 1.0, 2: 1.0}
    assert filtered["step_time_ratio"].per_seed == {0: 2.0, 1: 2.0, 2: 2.0}
    only = Run("uniform", 0, {1: {**runs[0].steps[1]}})
    assert median_step_time(only) == 30.0  # a run of one step has nothing but its warm-up


def test_one_seed_gives_values_without_an_interval():
    runs = [run("uniform", 0, generated=64, trained=64, wasted=16), run("filter", 0, generated=128, trained=64,
            wasted=0, rounds=2, step_time=2.0)]  # fmt: skip
    table = compute_costs(runs, baseline="uniform", group_size=GROUP)
    filtered = table.arms[1].columns
    assert filtered["generated_per_group"].ci is None and filtered["step_time_ratio"].mean == 2.0
    assert "| `filter` | 1 | 16.0 | 0% | 2.00 | 2.00 s | 2.00x |" in table.markdown()
    assert table.as_dict()["arms"]["filter"]["wasted_share"]["ci"] is None


def test_runs_it_cannot_cost_are_named():
    good = [run("uniform", s, generated=64, trained=64, wasted=0) for s in range(2)]
    bare = Run("filter", 0, {1: {"step_time": 1.0}})
    with pytest.raises(CompareError, match="filter@0 logs no 'dataflex/compute/rollouts_generated_total'"):
        compute_costs([*good, bare], baseline="uniform", group_size=GROUP)
    idle = run("select", 0, generated=64, trained=0, wasted=0)
    with pytest.raises(CompareError, match="select@0 trained no rollout"):
        compute_costs([*good, idle], baseline="uniform", group_size=GROUP)
    with pytest.raises(CompareError, match="baseline arm 'plain' has no runs"):
        compute_costs(good, baseline="plain", group_size=GROUP)
    with pytest.raises(CompareError, match="group_size must be a positive integer"):
        compute_costs(good, baseline="uniform", group_size=0)
