"""``mechanism: filter``: admit or evict whole groups after reward, and refill until the batch is full."""

from .mechanism import (
    DRAW_INHERITS,
    DRAW_MECHANISMS,
    FILTER_DEFAULTS,
    FILTER_PREFIX,
    LEDGER_KEYS,
    ON_SHORT,
    AdmissionRounds,
    Filter,
    FilterSettings,
    RefillSampler,
    RoundPrompts,
    draw_block,
    filter_settings,
    group_rows,
)

__all__ = [
    "DRAW_INHERITS",
    "DRAW_MECHANISMS",
    "FILTER_DEFAULTS",
    "FILTER_PREFIX",
    "LEDGER_KEYS",
    "ON_SHORT",
    "AdmissionRounds",
    "Filter",
    "FilterSettings",
    "RefillSampler",
    "RoundPrompts",
    "draw_block",
    "filter_settings",
    "group_rows",
]
