"""A ranker kind and the ``rank_weight`` mechanism, registered through DataFlex's two hooks."""

from dataflex_core import hookimpl

from .mechanism import RankWeight
from .ranker import Ranker, check_keys
from .rankers import ScoreOrder

__all__ = ["RankWeight", "Ranker", "ScoreOrder", "check_keys"]


@hookimpl
def dataflex_register_components(register):
    register(ScoreOrder)


@hookimpl
def dataflex_register_mechanisms(register):
    register(RankWeight)
