"""threshold_band and topk_fraction: hand-computed cases and edge cases."""

from __future__ import annotations

import pytest
import torch
from dataflex_selectors import ThresholdBandSelector, TopKFractionSelector

from dataflex_core import InvalidOutputError, UnknownParamError, build_from_config


def test_threshold_band_default_drops_all_solved_and_all_failed_groups(batch_factory):
    # Solve rates of three groups of two: all failed, half solved, all solved.
    solve_rate = torch.tensor([0.0, 0.0, 0.5, 0.5, 1.0, 1.0])
    batch = batch_factory([3] * 6, uid=["a", "a", "b", "b", "c", "c"])
    keep = ThresholdBandSelector().act(solve_rate, batch)
    assert keep.dtype == torch.bool
    assert keep.tolist() == [False, False, True, True, False, False]


@pytest.mark.parametrize(
    ("low_inclusive", "high_inclusive", "expected"),
    [
        (False, False, [False, True, False, False]),
        (True, False, [True, True, False, False]),
        (False, True, [False, True, True, False]),
        (True, True, [True, True, True, False]),
    ],
)
def test_threshold_band_bounds_are_explicit(batch_factory, low_inclusive, high_inclusive, expected):
    scores = torch.tensor([0.2, 0.5, 0.8, 0.9])
    selector = ThresholdBandSelector(low=0.2, high=0.8, low_inclusive=low_inclusive, high_inclusive=high_inclusive)
    assert selector.act(scores, batch_factory([2] * 4)).tolist() == expected


def test_threshold_band_never_keeps_padding_or_empty_rows(batch_factory):
    scores = torch.full((4,), 0.5)
    batch = batch_factory([2, 0, 2, 2], padding=[False, False, True, False])
    assert ThresholdBandSelector().act(scores, batch).tolist() == [True, False, False, True]


def test_threshold_band_rejects_an_inverted_band():
    with pytest.raises(ValueError, match="low=0.9 must not exceed high=0.1"):
        ThresholdBandSelector(low=0.9, high=0.1)


def test_topk_fraction_keeps_the_highest_scores_of_the_valid_rows(batch_factory):
    scores = torch.tensor([0.1, 5.0, 0.7, 0.3, 9.0, 0.2])
    # Row 4 (the best score) is padding: 5 valid rows, ceil(0.4 * 5) = 2 kept.
    batch = batch_factory([2] * 6, padding=[False, False, False, False, True, False])
    keep = TopKFractionSelector(fraction=0.4).act(scores, batch)
    assert keep.tolist() == [False, True, True, False, False, False]


def test_topk_fraction_lowest_and_ties_go_to_the_lower_index(batch_factory):
    scores = torch.tensor([1.0, 0.0, 0.0, 0.0, 2.0])
    keep = TopKFractionSelector(fraction=0.4, largest=False).act(scores, batch_factory([1] * 5))
    assert keep.tolist() == [False, True, True, False, False]


@pytest.mark.parametrize(("fraction", "n", "kept"), [(0.3, 10, 3), (0.25, 10, 3), (1.0, 7, 7), (0.01, 5, 1)])
def test_topk_fraction_keep_count(fraction, n, kept):
    assert TopKFractionSelector(fraction=fraction).keep_count(n) == kept
    assert TopKFractionSelector(fraction=fraction).keep_count(0) == 0


@pytest.mark.parametrize("fraction", [0.0, 1.5, -0.1])
def test_topk_fraction_rejects_fractions_outside_unit_interval(fraction):
    with pytest.raises(ValueError, match="fraction must be in"):
        TopKFractionSelector(fraction=fraction)


def test_nonfinite_score_on_a_valid_row_is_an_error_naming_the_row(batch_factory):
    scores = torch.tensor([0.5, float("nan"), 0.5])
    with pytest.raises(InvalidOutputError, match="first at row 1"):
        ThresholdBandSelector().act(scores, batch_factory([1, 1, 1]))


def test_nonfinite_score_on_a_padding_row_is_ignored(batch_factory):
    scores = torch.tensor([0.5, float("nan"), 0.5])
    keep = TopKFractionSelector(fraction=1.0).act(scores, batch_factory([1, 1, 1], padding=[False, True, False]))
    assert keep.tolist() == [True, False, True]


def test_token_level_scores_are_rejected_with_the_expected_shape(batch_factory):
    with pytest.raises(InvalidOutputError, match=r"shape \(2,\), got \(2, 3\)"):
        TopKFractionSelector().act(torch.ones(2, 3), batch_factory([3, 3]))


def test_built_from_config_with_a_typo_lists_accepted_params():
    block = {
        "mechanism": "select",
        "scorer": {"name": "dummy_rate"},
        "actuator": {"name": "threshold_band", "params": {"lowe": 0.1}},
    }
    from dataflex_core import Registry, Scorer
    from dataflex_core.registry import LOCAL_PLUGIN

    class DummyRate(Scorer):
        name = "dummy_rate"

    registry = Registry()
    registry.add("scorer", "dummy_rate", DummyRate, LOCAL_PLUGIN)
    registry.add("selector", "threshold_band", ThresholdBandSelector, LOCAL_PLUGIN)
    with pytest.raises(UnknownParamError, match="did you mean 'low'"):
        build_from_config(block, registry=registry)
