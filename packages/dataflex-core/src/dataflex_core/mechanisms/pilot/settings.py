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

#: The presets of ``pilot.preset``; the orders of ``pilot.carry.order``.
PRESETS = ("pilot-commit",)
ORDERS = ("std", "recency", "random")
#: What ``preset: pilot-commit`` sets, as the paper's scripts do (``databricks/pilot-commit``, ``train_scripts/pc_*``):
#: 3x the batch explored each round, pilots 25 % of the group, the buffer, 10 rounds, then a failure, eviction.
PILOT_COMMIT = {
    "prompts": 3, "keep": True, "carry": {"max_off_steps": 4, "order": "std"}, "max_rounds": 10,
    "on_short": "raise", "evict_solved": True,
}  # fmt: skip
PILOT_COMMIT_SHARE = 0.25
#: The paper's admission: mean pilot accuracy in [0.125, 0.75], both bounds inclusive (the block's scorer/actuator).
PILOT_COMMIT_BAND = {"low": 0.125, "high": 0.75, "low_inclusive": True, "high_inclusive": True}

#: Keys of the ``dataflex:`` block only ``mechanism: pilot`` reads.
PILOT_KEYS = {
    **LEDGER_KEYS,
    "pilot": Key(dict, "the pilot's stages", example="pilot: {prompts: 2, rollouts: 2}", table={
        "preset": Key(str, "pilot-commit sets every part as the paper's scripts do; explicit keys override",
                      choices=PRESETS),
        "prompts": Key(int, "prompts screened per prompt the batch still lacks (with carry: per prompt of the "
                       "batch, every round)", default=2, low=1),
        "rollouts": Key(int, "rollouts of each screened prompt before it is admitted", default=2, low=1),
        "keep": Key(bool, "true: pilot rollouts join the trained group; false: screening only", default=True),
        "max_stages": Key(int, "stages per step, one screening stage and the commit at least", default=3, low=2),
        "max_screened": Key(int, "prompts screened per step at most; null: prompts x groups x screening stages", low=1),
        "on_short": Key(
            str, "raise stops a step that admitted too few prompts within its caps, backfill commits screened prompts "
            "without signal to fill it", default="raise", choices=ON_SHORT,
        ),
        "carry": Key(dict, "admitted prompts beyond the batch wait in a buffer, committed on a later step; null: "
                     "dropped", example="carry: {max_off_steps: 4, order: std}", table={
            "max_off_steps": Key(int, "a buffered prompt explored more than this many steps before a step's end is "
                                 "evicted", default=4, low=0),
            "order": Key(str, "which buffered prompts are committed first: std (highest pilot reward std, then newest), "
                         "recency (newest), random", default="std", choices=ORDERS),
        }),
        "max_rounds": Key(int, "with carry: rounds per step, each exploring and committing", default=10, low=1),
        "one_call": Key(bool, "with carry: a round's commit and exploration in one generation call; false: one call "
                        "per rollout count", default=True),
        "evict_solved": Key(bool, "prompts solved on every pilot are not drawn again by the pilot's sampler", default=False),
        "draw": DRAW,
    }),
}  # fmt: skip


@dataclass(frozen=True)
class CarrySettings:
    #: Steps a buffered prompt may wait after the step that explored it (older: evicted at a step's end).
    max_off_steps: int = 4
    order: str = "std"


@dataclass(frozen=True)
class PilotSettings:
    #: Each screening stage screens this many times the prompts the batch still lacks (with carry: the batch).
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
    preset: str | None = None
    #: The survivor buffer (``None``: surplus admitted prompts are dropped, today's stages).
    carry: CarrySettings | None = None
    max_rounds: int = 10
    one_call: bool = True
    evict_solved: bool = False
    #: Pilots as a share of ``rollout.n`` (the preset without ``rollouts``), resolved when the stages know it.
    rollouts_share: float | None = None

    def describe(self) -> str:
        """The resolved settings, one line, as the mount logs them."""
        pilots = f"{self.rollouts_share:.0%} of rollout.n" if self.rollouts_share else str(self.rollouts)
        c = self.carry
        carry = "null" if c is None else f"{{max_off_steps: {c.max_off_steps}, order: {c.order}}}"
        one_call = str(self.one_call).lower()
        rounds = f"max_rounds={self.max_rounds}, one_call={one_call}" if c else f"max_stages={self.max_stages}"
        return (
            f"dataflex.pilot (preset {self.preset or 'none'}): prompts={self.prompts}, rollouts={pilots}, keep="
            f"{str(self.keep).lower()}, carry={carry}, {rounds}, max_screened={self.max_screened}, on_short="
            f"{self.on_short}, evict_solved={str(self.evict_solved).lower()}"
        )


def pilot_settings(block: Mapping[str, Any]) -> PilotSettings:
    """The ``dataflex.pilot`` keys and the ledger's, checked, a preset's values under the keys the block sets
    (``null`` included: ``carry: null`` under the preset drops the buffer); raises :class:`ConfigError` naming
    the key and the fix."""
    own, ledger = admission_keys(block, "pilot", PILOT_KEYS)
    given = block.get("pilot") or {}
    share = None
    if own["preset"] == "pilot-commit":
        own.update({key: value for key, value in PILOT_COMMIT.items() if key not in given})
        share = None if "rollouts" in given else PILOT_COMMIT_SHARE
    carried = given["carry"] is not None if "carry" in given else own["preset"] is not None
    carry = own.pop("carry")
    return PilotSettings(**own, carry=CarrySettings(**carry) if carried else None, ledger=ledger, rollouts_share=share)
