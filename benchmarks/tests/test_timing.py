"""The statistics every judged row rests on: interleaved rounds, paired ratios, trimmed means, balanced runs."""

from __future__ import annotations

import statistics

import pytest
from dataflex_bench.timing import Fresh, Timings, balanced_ratio, measure_interleaved, run_medians


def test_rounds_alternate_in_order_after_the_warm_up_and_fresh_inputs_are_built_untimed():
    calls, built = [], []

    def setup():
        built.append(len(calls))
        return len(built)

    timings = measure_interleaved(
        {"base": lambda: calls.append("base"), "case": Fresh(lambda n: calls.append(("case", n)), setup)},
        reps=3,
        warmup=1,
    )
    assert calls == ["base", ("case", 1), "base", ("case", 2), "base", ("case", 3), "base", ("case", 4)]
    assert built == [1, 3, 5, 7]  # each call's input built right before it, a new one every round
    assert {name: len(s) for name, s in timings.samples.items()} == {"base": 3, "case": 3}
    with pytest.raises(ValueError, match="reps must be >= 1"):
        measure_interleaved({"base": lambda: None}, reps=0)


def test_a_paired_ratio_keeps_a_burst_of_several_rounds_out_where_a_ratio_of_medians_does_not():
    # a 5 % cost; a burst of load (everything 1.5x slower) slows the case in 4 of 7 rounds, the base in 3
    timings = Timings(
        {"base": [1.0, 1.0, 1.5, 1.5, 1.5, 1.0, 1.0], "case": [1.05, 1.575, 1.575, 1.575, 1.575, 1.05, 1.05]}
    )
    assert timings.median("case") / timings.median("base") == pytest.approx(1.575)  # medians of different rounds
    assert timings.paired_ratio("case", "base") == pytest.approx(1.05)  # the cost the case adds


def test_trimmed_means_weigh_a_bimodal_call_by_how_often_it_lands_in_each_cluster():
    # the host case's shape: calls fast (0.7 s) or slow (1.1 s); DataFlex adds 5 % and lands slow in 13 of 21
    # calls, the plain call in 7 of 21, one plain call pre-empted (5 s)
    plain = [0.7] * 13 + [1.1] * 7 + [5.0]
    case = [0.735] * 8 + [1.155] * 13
    timings = Timings({"base": plain, "case": case})
    assert timings.median("case") / timings.median("base") == pytest.approx(1.155 / 0.7)  # 1.65
    expected = statistics.fmean(sorted(case)[2:19]) / statistics.fmean(sorted(plain)[2:19])
    assert timings.trimmed_ratio("case", "base") == pytest.approx(expected)  # 2 of 21 off each end
    assert 1.1 < expected < 1.2
    assert timings.trimmed_mean("base", trim=0.0) == pytest.approx(statistics.fmean(plain))


def alternating(*, cost: float, odd_slower: float, on_odd: bool, speed: float = 1.0) -> list[tuple[float, float]]:
    """The ``(with, without)`` pairs of one run whose odd steps are ``odd_slower`` times its even ones."""
    pairs = []
    for _ in range(5):
        odd, even = speed * odd_slower, speed
        pairs.append((odd * (1 + cost), even) if on_odd else (even * (1 + cost), odd))
    return pairs


def test_two_runs_on_opposite_parities_cancel_a_parity_effect_and_keep_a_real_cost():
    odd = alternating(cost=0.0, odd_slower=1.06, on_odd=True)
    even = alternating(cost=0.0, odd_slower=1.06, on_odd=False, speed=1.3)  # a whole run 30 % slower
    assert run_medians([odd]) == [pytest.approx(1.06)]  # one run alone reads the parity as a cost
    assert balanced_ratio([odd, even]) == pytest.approx(1.0)
    odd = alternating(cost=0.08, odd_slower=1.06, on_odd=True)
    even = alternating(cost=0.08, odd_slower=1.06, on_odd=False)
    assert balanced_ratio([odd, even]) == pytest.approx(1.08)
    with pytest.raises(ValueError, match="at least one run"):
        balanced_ratio([[], []])
