"""``dataflex ledger``: read a run's per-prompt ledger, summarise and plot it, filter a dataset by it, merge runs.

One idea per module: :mod:`.reading` (a ledger file or checkpoint through core's checked reader),
:mod:`.summary` (``show``), :mod:`.plot`, :mod:`.filter`, :mod:`.merge`, :mod:`.scale` (the filter's memory at
scale) and :mod:`.cli` (the commands).
"""

from __future__ import annotations

from .filter import FilterReport, KeepRule, filter_dataset
from .merge import merge_ledgers, merge_two
from .reading import LedgerError, load_ledger
from .summary import summarize

__all__ = [
    "FilterReport",
    "KeepRule",
    "LedgerError",
    "filter_dataset",
    "load_ledger",
    "merge_ledgers",
    "merge_two",
    "summarize",
]
