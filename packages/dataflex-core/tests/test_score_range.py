"""``score_range``: an optional declaration checked when the class is defined."""

import pytest

from dataflex_core import DeclarationError, Reweighter, Scorer


def test_score_range_defaults_to_none_and_accepts_a_pair():
    class Rate(Scorer):
        score_range = (0.0, 1.0)

    assert Scorer.score_range is None
    assert Rate.score_range == (0.0, 1.0)


@pytest.mark.parametrize("bad", [(1.0, 0.0), [0.0, 1.0], (0.0,), ("0", "1"), (True, 1.0)])
def test_malformed_score_range_is_rejected_naming_the_fix(bad):
    with pytest.raises(DeclarationError, match=r"score_range must be None or a \(low, high\) tuple"):

        class Bad(Reweighter):
            score_range = bad
