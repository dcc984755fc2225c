"""``mechanism: filter``'s keys of the ``dataflex:`` block (``filter: {max_rounds, on_short, draw}`` and the ledger's),
declared, and what filter and pilot share: the per-prompt ledger's keys and ``<owner>.draw``, read by one function."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ...errors import ConfigError
from ...keys import Key, parse_keys
from ..curriculum import PROMPT_LEDGER_KEYS, LedgerSettings, curriculum_settings, ledger_keys

#: What a step short of admitted groups after its rounds (or stages) does.
ON_SHORT = ("raise", "backfill")
#: The top-level ``dataflex:`` keys of the filter's (and pilot's) ledger: ``prompt_key`` unset, no ledger.
LEDGER_KEYS = {
    **PROMPT_LEDGER_KEYS,
    "prompt_key": replace(
        PROMPT_LEDGER_KEYS["prompt_key"], default=None,
        meaning="the dataset column of the prompt ids the per-prompt ledger is keyed by; null: no ledger",
    ),
}  # fmt: skip
#: The mechanisms that may draw the prompts under ``filter.draw`` (the dataloader's and the refills').
DRAW_MECHANISMS = ("mix", "curriculum")
#: The host keys of the ``dataflex:`` block that ``filter.draw`` takes from it.
DRAW_INHERITS = ("on_invalid", "call_budget_s")
#: ``<owner>.draw``: the ``dataflex:`` block of the mechanism that draws the prompts.
DRAW = Key(
    dict, f"the block of the mechanism that draws the prompts, with mechanism {' or '.join(DRAW_MECHANISMS)}",
    example="{mechanism: curriculum, scorer: {name: ...}, actuator: {name: ...}}",
)  # fmt: skip
#: Keys of the ``dataflex:`` block only ``mechanism: filter`` reads.
FILTER_KEYS = {
    **LEDGER_KEYS,
    "filter": Key(dict, "the filter's rounds", example="filter: {max_rounds: 4, on_short: raise}", table={
        "max_rounds": Key(int, "generation rounds per step, the first included", default=4, low=1),
        "on_short": Key(
            str, "raise stops a step still short of admitted groups after max_rounds, backfill completes it with "
            "evicted groups", default="raise", choices=ON_SHORT,
        ),
        "draw": DRAW,
        "skip_constant": Key(
            int, "a prompt whose last this many groups were constant (every reward equal) is not drawn again by the "
            "refills; needs prompt_key, not with draw; null: refills draw every prompt", low=1,
        ),
    }),
}  # fmt: skip


@dataclass(frozen=True)
class FilterSettings:
    #: Generation rounds per step at most, the first included (>= 1).
    max_rounds: int = 4
    on_short: str = "raise"
    #: ``filter.draw``: the ``dataflex:`` block of the mix or curriculum that draws the prompts (``None``: the
    #: host's order and :class:`RefillSampler`).
    draw: Mapping[str, Any] | None = None
    ledger: LedgerSettings = field(default_factory=LedgerSettings)
    #: ``filter.skip_constant``: the ledger's streak of constant groups after which refills skip a prompt.
    skip_constant: int | None = None


def admission_keys(
    block: Mapping[str, Any], owner: str, table: Mapping[str, Key]
) -> tuple[dict[str, Any], LedgerSettings]:
    """``(dataflex.<owner>, the ledger)``: what filter and pilot read alike, by their table ``table``, checked
    (``<owner>.draw`` against ``prompt_key``); raises :class:`ConfigError` with the fix."""
    keys = parse_keys(table, block, "dataflex", partial=True)
    ledger = LedgerSettings(**ledger_keys(keys))
    if ledger.prompt_key is None and (ledger.ledger_load is not None or ledger.success_threshold is not None):
        raise ConfigError(
            f"dataflex.ledger / dataflex.success_threshold configure the per-prompt ledger of mechanism {owner}, "
            "which is keyed by dataflex.prompt_key; set prompt_key to the dataset column of the prompt ids"
        )
    own = keys[owner]
    return {**own, "draw": draw_block(own["draw"], ledger.prompt_key, owner)}, ledger


def draw_block(plain: Mapping[str, Any] | None, prompt_key: str | None, owner: str) -> dict[str, Any] | None:
    """``<owner>.draw`` (``filter.draw``, ``pilot.draw``), checked: a ``dataflex:`` block of mechanism mix or
    curriculum (``None``: unset) whose ``prompt_key`` is the owner's."""
    if plain is None:
        return None
    if plain.get("mechanism") not in DRAW_MECHANISMS:
        raise ConfigError(f"dataflex.{owner}.draw must be {DRAW.meaning} (e.g. {DRAW.example}), got {dict(plain)!r}")
    if plain["mechanism"] == "curriculum":
        draw_key = curriculum_settings(plain).prompt_key
        if prompt_key is not None and prompt_key != draw_key:
            raise ConfigError(
                f"dataflex.prompt_key={prompt_key!r} but dataflex.{owner}.draw.prompt_key={draw_key!r}: with a "
                f"curriculum drawing the prompts the {owner} feeds the curriculum's ledger; set the key in draw only"
            )
    return dict(plain)


def filter_settings(block: Mapping[str, Any]) -> FilterSettings:
    """The ``dataflex.filter`` keys and the ledger's, checked; raises :class:`ConfigError` with the fix."""
    own, ledger = admission_keys(block, "filter", FILTER_KEYS)
    skip = own["skip_constant"]
    if skip is not None and ledger.prompt_key is None:
        raise ConfigError(
            f"dataflex.filter.skip_constant={skip} reads each prompt's streak of constant groups from the per-prompt "
            "ledger; set dataflex.prompt_key to the dataset column of the prompt ids"
        )
    if skip is not None and own["draw"] is not None:
        raise ConfigError(
            f"dataflex.filter.skip_constant={skip} does not apply with filter.draw: the drawing mechanism picks the "
            "refills (a curriculum's greso skips prompts on a constant streak); drop one of the two"
        )
    return FilterSettings(**own, ledger=ledger)
