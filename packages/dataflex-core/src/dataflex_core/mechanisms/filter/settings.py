"""``mechanism: filter``'s keys of the ``dataflex:`` block (``filter: {max_rounds, on_short, draw}`` and the ledger's), checked."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import ConfigError
from ...ledger import LEDGER_KEY
from ..curriculum import curriculum_settings

#: What a step short of admitted groups after ``max_rounds`` does.
ON_SHORT = ("raise", "backfill")
#: The ``dataflex.filter`` keys and their defaults.
FILTER_DEFAULTS = {"max_rounds": 4, "on_short": "raise", "draw": None}


#: The top-level ``dataflex:`` keys of the filter's ledger, with their defaults.
LEDGER_KEYS = {"prompt_key": None, "success_threshold": None, **LEDGER_KEY}
#: The mechanisms that may draw the prompts under ``filter.draw`` (the dataloader's and the refills').
DRAW_MECHANISMS = ("mix", "curriculum")
#: The host keys of the ``dataflex:`` block that ``filter.draw`` takes from it.
DRAW_INHERITS = ("on_invalid", "call_budget_s")


@dataclass(frozen=True)
class FilterSettings:
    #: Generation rounds per step at most, the first included (>= 1).
    max_rounds: int = 4
    on_short: str = "raise"
    #: The dataset column of the prompt ids the ledger is keyed by (``None``: no ledger).
    prompt_key: str | None = None
    success_threshold: float | None = None
    #: ``dataflex.ledger.load``: an exported ledger to start from.
    ledger_load: str | None = None
    #: ``filter.draw``: the ``dataflex:`` block of the mix or curriculum that draws the prompts (``None``: the
    #: host's order and :class:`RefillSampler`).
    draw: Mapping[str, Any] | None = None


def draw_block(plain: Any, prompt_key: str | None, owner: str = "filter") -> dict[str, Any] | None:
    """``<owner>.draw`` (``filter.draw``, ``pilot.draw``), checked: a ``dataflex:`` block of mechanism mix or
    curriculum (``None``: unset)."""
    if plain is None:
        return None
    if not isinstance(plain, Mapping) or plain.get("mechanism") not in DRAW_MECHANISMS:
        raise ConfigError(
            f"dataflex.{owner}.draw must be the block of the mechanism that draws the prompts, with mechanism "
            f"{' or '.join(DRAW_MECHANISMS)} (e.g. {{mechanism: curriculum, scorer: {{name: ...}}, actuator: "
            f"{{name: ...}}}}), got {plain!r}"
        )
    if plain["mechanism"] == "curriculum":
        draw_key = curriculum_settings(plain).prompt_key
        if prompt_key is not None and prompt_key != draw_key:
            raise ConfigError(
                f"dataflex.prompt_key={prompt_key!r} but dataflex.{owner}.draw.prompt_key={draw_key!r}: with a "
                f"curriculum drawing the prompts the {owner} feeds the curriculum's ledger; set the key in draw only"
            )
    return dict(plain)


def mechanism_keys(block: Mapping[str, Any], name: str, defaults: Mapping[str, Any], example: str) -> Mapping[str, Any]:
    """``dataflex.<name>``: a mapping of known keys (empty when absent); raises :class:`ConfigError` naming the
    unknown keys or the value that is not a mapping, with ``example`` as the fix."""
    plain = block.get(name) or {}
    if not isinstance(plain, Mapping):
        raise ConfigError(f"dataflex.{name} must be a mapping (e.g. {example}), got {plain!r}")
    unknown = sorted(set(plain) - set(defaults))
    if unknown:
        raise ConfigError(f"dataflex.{name} has unknown keys {unknown}; it accepts {sorted(defaults)}")
    return plain


def filter_settings(block: Mapping[str, Any]) -> FilterSettings:
    """The ``dataflex.filter`` keys and the ledger's, checked; raises :class:`ConfigError` with the fix."""
    key = block.get("prompt_key")
    ledger = curriculum_settings({**block, "prompt_key": "index" if key is None else key})
    if key is None and (ledger.ledger_load is not None or ledger.success_threshold is not None):
        raise ConfigError(
            "dataflex.ledger / dataflex.success_threshold configure the per-prompt ledger of mechanism filter, "
            "which is keyed by dataflex.prompt_key; set prompt_key to the dataset column of the prompt ids"
        )
    plain = mechanism_keys(block, "filter", FILTER_DEFAULTS, "{max_rounds: 4, on_short: raise}")
    rounds = plain.get("max_rounds", FILTER_DEFAULTS["max_rounds"])
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ConfigError(
            f"dataflex.filter.max_rounds must be an integer >= 1 (generation rounds per step, the first included), "
            f"got {rounds!r}"
        )
    on_short = plain.get("on_short", FILTER_DEFAULTS["on_short"])
    if on_short not in ON_SHORT:
        raise ConfigError(
            f"dataflex.filter.on_short={on_short!r} is not one of {', '.join(ON_SHORT)}; raise stops a step still "
            "short of admitted groups after max_rounds, backfill completes it with evicted groups"
        )
    draw = draw_block(plain.get("draw"), key)
    return FilterSettings(rounds, on_short, key, ledger.success_threshold, ledger.ledger_load, draw)
