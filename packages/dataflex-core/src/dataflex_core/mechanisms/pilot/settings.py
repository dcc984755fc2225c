"""``mechanism: pilot``'s keys of the ``dataflex:`` block (``pilot: {prompts, rollouts, keep, ...}``), declared.

The keys pilot shares with filter (the per-prompt ledger's, ``draw``) are read as the filter reads them
(:func:`~dataflex_core.mechanisms.filter.settings.admission_keys`); its settings hold them, they do not inherit them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ...keys import Key
from ..filter.settings import DRAW, LEDGER_KEYS, ON_SHORT, LedgerSettings, admission_keys

#: Keys of the ``dataflex:`` block only ``mechanism: pilot`` reads.
PILOT_KEYS = {
    **LEDGER_KEYS,
    "pilot": Key(dict, "the pilot's stages", example="pilot: {prompts: 2, rollouts: 2}", table={
        "prompts": Key(int, "prompts screened per prompt the batch still lacks", default=2, low=1),
        "rollouts": Key(int, "rollouts of each screened prompt before it is admitted", default=2, low=1),
        "keep": Key(bool, "true: pilot rollouts join the trained group; false: screening only", default=True),
        "max_stages": Key(int, "stages per step, one screening stage and the commit at least", default=3, low=2),
        "max_screened": Key(int, "prompts screened per step at most; null: prompts x groups x screening stages", low=1),
        "on_short": Key(
            str, "raise stops a step that admitted too few prompts within its caps, backfill commits screened prompts "
            "without signal to fill it", default="raise", choices=ON_SHORT,
        ),
        "draw": DRAW,
    }),
}  # fmt: skip


@dataclass(frozen=True)
class PilotSettings:
    #: Each screening stage screens this many times the prompts the batch still lacks.
    prompts: int = 2
    #: Rollouts of each screened prompt in its screening (pilot) stage.
    rollouts: int = 2
    #: The pilot rollouts of a committed prompt are part of its trained group (else screening only).
    keep: bool = True
    #: Stages per step at most, the commit stage included (>= 2: one screening stage, then the commit).
    max_stages: int = 3
    #: Prompts screened per step at most (``None``: ``prompts`` x groups x screening stages).
    max_screened: int | None = None
    on_short: str = "raise"
    #: ``pilot.draw``: the ``dataflex:`` block of the mix or curriculum that draws the prompts.
    draw: Mapping[str, Any] | None = None
    ledger: LedgerSettings = field(default_factory=LedgerSettings)


def pilot_settings(block: Mapping[str, Any]) -> PilotSettings:
    """The ``dataflex.pilot`` keys and the ledger's, checked; raises :class:`ConfigError` naming the key and the fix."""
    own, ledger = admission_keys(block, "pilot", PILOT_KEYS)
    return PilotSettings(**own, ledger=ledger)
