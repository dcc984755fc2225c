"""A plugin module that registers its classes through a hook instead of the decorators."""

from length_zscore import LengthZScoreScorer

from dataflex_core import hookimpl


@hookimpl
def dataflex_register_scorers(register):
    register(LengthZScoreScorer, "length_zscore")  # the name users write in the config
    register(LengthZScoreScorer, "response_length_zscore")  # an alias, for an old config
