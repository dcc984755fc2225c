"""The plugin's own tests: every conformance check, as one pytest test each."""

from dataflex_length_tutorial import LengthZScoreScorer, ZScoreTiltReweighter

from dataflex_conformance import parametrize_with_checks


@parametrize_with_checks([LengthZScoreScorer, ZScoreTiltReweighter(beta=-0.5)])
def test_conformance(dataflex_check, dataflex_fields):
    dataflex_check(fields=dataflex_fields)
