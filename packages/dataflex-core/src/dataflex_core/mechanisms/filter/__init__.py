"""``mechanism: filter``: admit or evict whole groups after reward, and refill until the batch is full."""

from .mechanism import Filter, FilterRounds, group_rows
from .refill import RefillSampler
from .rounds import FILTER_PREFIX, AdmissionRounds, RoundPrompts
from .settings import (
    DRAW_INHERITS,
    DRAW_MECHANISMS,
    FILTER_KEYS,
    LEDGER_KEYS,
    ON_SHORT,
    FilterSettings,
    LedgerSettings,
    draw_block,
    filter_settings,
)

__all__ = [
    "DRAW_INHERITS",
    "DRAW_MECHANISMS",
    "FILTER_KEYS",
    "FILTER_PREFIX",
    "LEDGER_KEYS",
    "ON_SHORT",
    "AdmissionRounds",
    "Filter",
    "FilterRounds",
    "FilterSettings",
    "LedgerSettings",
    "RefillSampler",
    "RoundPrompts",
    "draw_block",
    "filter_settings",
    "group_rows",
]
