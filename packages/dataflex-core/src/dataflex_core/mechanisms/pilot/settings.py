"""``mechanism: pilot``'s keys of the ``dataflex:`` block (``pilot: {prompts, rollouts, keep, ...}``), checked at mount."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import ConfigError
from ..curriculum import curriculum_settings
from ..filter.settings import ON_SHORT, FilterSettings, draw_block, mechanism_keys

#: The ``dataflex.pilot`` keys and their defaults.
PILOT_DEFAULTS: dict[str, Any] = {
    "prompts": 2,
    "rollouts": 2,
    "keep": True,
    "max_stages": 3,
    "max_screened": None,
    "on_short": "raise",
    "draw": None,
}


@dataclass(frozen=True)
class PilotSettings(FilterSettings):
    """The filter's settings (``on_short``, the ledger's keys, ``draw``) plus the pilot's own.

    ``max_rounds`` is ``max_stages`` (the filter's reading of it is not used by the pilot).
    """

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


def _positive_int(plain: Mapping[str, Any], key: str, floor: int, meaning: str) -> int:
    value = plain.get(key, PILOT_DEFAULTS[key])
    if isinstance(value, bool) or not isinstance(value, int) or value < floor:
        raise ConfigError(f"dataflex.pilot.{key} must be an integer >= {floor} ({meaning}), got {value!r}")
    return value


def pilot_settings(block: Mapping[str, Any]) -> PilotSettings:
    """The ``dataflex.pilot`` keys, checked; raises :class:`ConfigError` naming the key and the fix."""
    key = block.get("prompt_key")
    ledger = curriculum_settings({**block, "prompt_key": "index" if key is None else key})
    if key is None and (ledger.ledger_load is not None or ledger.success_threshold is not None):
        raise ConfigError(
            "dataflex.ledger / dataflex.success_threshold configure the per-prompt ledger of mechanism pilot, "
            "which is keyed by dataflex.prompt_key; set prompt_key to the dataset column of the prompt ids"
        )
    plain = mechanism_keys(block, "pilot", PILOT_DEFAULTS, "{prompts: 2, rollouts: 2}")
    prompts = _positive_int(plain, "prompts", 1, "prompts screened per prompt the batch still lacks")
    rollouts = _positive_int(plain, "rollouts", 1, "rollouts of each screened prompt before it is admitted")
    stages = _positive_int(plain, "max_stages", 2, "stages per step, one screening stage and the commit at least")
    screened = plain.get("max_screened", PILOT_DEFAULTS["max_screened"])
    if screened is not None and (isinstance(screened, bool) or not isinstance(screened, int) or screened < 1):
        raise ConfigError(
            f"dataflex.pilot.max_screened must be an integer >= 1 (prompts screened per step at most) or unset, "
            f"got {screened!r}"
        )
    keep = plain.get("keep", PILOT_DEFAULTS["keep"])
    if not isinstance(keep, bool):
        raise ConfigError(
            f"dataflex.pilot.keep must be true (pilot rollouts join the trained group) or false (screening only), "
            f"got {keep!r}"
        )
    on_short = plain.get("on_short", PILOT_DEFAULTS["on_short"])
    if on_short not in ON_SHORT:
        raise ConfigError(
            f"dataflex.pilot.on_short={on_short!r} is not one of {', '.join(ON_SHORT)}; raise stops a step that "
            "admitted too few prompts within its caps, backfill commits screened prompts without signal to fill it"
        )
    return PilotSettings(
        max_rounds=stages, on_short=on_short, prompt_key=key, success_threshold=ledger.success_threshold,
        ledger_load=ledger.ledger_load, draw=draw_block(plain.get("draw"), key, "pilot"), prompts=prompts,
        rollouts=rollouts, keep=keep, max_stages=stages, max_screened=screened,
    )  # fmt: skip
