"""Case ``fit``'s paired measure on verl's logged step records (no verl run here: the case runs verl for minutes)."""

from __future__ import annotations

import statistics

import pytest
from dataflex_bench.fit import FIT_TARGET, balanced_ratio, paired_ratios

ON = "dataflex_bench/dataflex_on"


def alternating_run(
    *, on_parity: int, speed: float, cost: float, steps: int = 9, odd_slower: float = 1.0
) -> list[dict]:
    """verl's records of one alternating run: every step 1.0 s of verl's work times ``speed`` (a run's machine
    speed; odd steps ``odd_slower`` times that), plus ``cost`` s on the steps DataFlex ran on; step 1 is verl's
    warm-up (slow, left out)."""
    records = []
    for step in range(1, steps + 1):
        on = step % 2 == on_parity
        parity = odd_slower if step % 2 else 1.0
        seconds = speed * parity * (1.0 + (cost if on else 0.0)) + (5.0 if step == 1 else 0.0)
        records.append({"step": step, "metrics": {"timing_s/step": seconds, ON: float(on)}})
    return records


def test_neighbouring_steps_pair_one_with_dataflex_and_one_without_warm_up_left_out():
    pairs = paired_ratios(alternating_run(on_parity=1, speed=1.0, cost=0.02), ON)
    assert pairs == [(1.02, 1.0)] * 4  # steps 2-3, 4-5, 6-7, 8-9 (the first of each pair is even: without)
    assert paired_ratios(alternating_run(on_parity=0, speed=1.0, cost=0.02, steps=8), ON) == [(1.02, 1.0)] * 3


def test_a_slow_run_does_not_read_as_dataflex_cost_and_a_real_cost_does():
    """What the pairing is for: two runs of identical work, one 30 % slower (as measured on this machine), give
    the same ratio; whole-run medians would read the slow run as DataFlex's."""
    fast, slow = alternating_run(on_parity=1, speed=1.0, cost=0.0), alternating_run(on_parity=0, speed=1.3, cost=0.0)
    ratios = [a / b for a, b in paired_ratios(fast, ON) + paired_ratios(slow, ON)]
    assert statistics.median(ratios) == pytest.approx(1.0)
    costly = alternating_run(on_parity=1, speed=1.0, cost=0.08)
    ratios = [a / b for a, b in paired_ratios(costly, ON)]
    assert statistics.median(ratios) == pytest.approx(1.08) and statistics.median(ratios) > FIT_TARGET


def test_a_run_that_did_not_alternate_is_an_error_naming_the_steps():
    records = alternating_run(on_parity=1, speed=1.0, cost=0.0)
    for record in records:
        record["metrics"][ON] = 1.0  # DataFlex on every step: the harness's switch never reached the task runner
    with pytest.raises(RuntimeError, match="steps 2 and 3 logged dataflex_bench/dataflex_on=1.0 and 1.0"):
        paired_ratios(records, ON)
    for record in records:
        del record["metrics"][ON]
    with pytest.raises(RuntimeError, match="did not alternate"):
        paired_ratios(records, ON)


def test_odd_steps_slower_than_even_ones_cancel_between_the_two_runs_and_a_real_cost_does_not():
    """The two runs put DataFlex on opposite parities: a step-parity effect reads as cost x p in one and cost / p in
    the other, so the geometric mean of the runs' medians is the cost alone."""
    odd = paired_ratios(alternating_run(on_parity=1, speed=1.0, cost=0.0, odd_slower=1.06), ON)
    even = paired_ratios(alternating_run(on_parity=0, speed=1.3, cost=0.0, odd_slower=1.06), ON)
    assert statistics.median(a / b for a, b in odd) == pytest.approx(1.06)  # one run alone reads the parity
    assert balanced_ratio([odd, even]) == pytest.approx(1.0)
    odd = paired_ratios(alternating_run(on_parity=1, speed=1.0, cost=0.08, odd_slower=1.06), ON)
    even = paired_ratios(alternating_run(on_parity=0, speed=1.3, cost=0.08, odd_slower=1.06), ON)
    assert balanced_ratio([odd, even]) == pytest.approx(1.08) and balanced_ratio([odd, even]) > FIT_TARGET
    with pytest.raises(ValueError, match="at least one run"):
        balanced_ratio([[], []])
