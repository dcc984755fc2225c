"""The ``dataflex:`` block, read once into a frozen :class:`DataFlexBlock` that every reader takes.

:func:`read_block` reads the block as the host holds it (OmegaConf or dict) when the session is made and
checks the keys every run reads; a mechanism parses its own (:attr:`DataFlexBlock.keys`), and unknown keys are
found at mount, once the mechanisms are loaded (:func:`check_block_keys`).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError

#: Keys of the ``dataflex:`` block that the core reads.
CORE_KEYS = ("mechanism", "scorer", "actuator", "warmup_step")
#: ``dataflex.mechanism`` when the block does not set it.
DEFAULT_MECHANISM = "reweight"
#: Keys every host reads besides the core's, with their defaults (``plugins`` holds ``lock`` / ``allow_drift``,
#: read by the plugin pinning; ``call_budget_s``: seconds after which a component call still running is warned
#: about, ``null`` for never).
HOST_KEYS = {"on_invalid": "raise", "plugins": None, "call_budget_s": 60.0}
#: The ``dataflex.on_invalid`` values.
ON_INVALID = ("raise", "uniform")


def to_plain(cfg: Any) -> Any:
    """An OmegaConf node (or anything mapping-like) as plain dicts and lists."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf
    except ImportError:  # omegaconf is optional for the core
        DictConfig = ListConfig = ()  # type: ignore[assignment]
    if DictConfig and isinstance(cfg, (DictConfig, ListConfig)):
        return OmegaConf.to_container(cfg, resolve=True)
    if isinstance(cfg, Mapping):
        return {k: to_plain(v) for k, v in cfg.items()}
    if isinstance(cfg, (list, tuple)):
        return [to_plain(v) for v in cfg]
    return cfg


@dataclass(frozen=True)
class DataFlexBlock:
    """The ``dataflex:`` block, read: the keys every run reads, checked, and every key as written.

    :param keys: the whole block as plain data, to read (never to change); a mechanism parses its own keys from
        it, the builder its ``scorer`` and ``actuator`` entries.
    :param plugins: ``dataflex.plugins`` as written (the plugin pinning checks it).
    """

    keys: Mapping[str, Any]
    mechanism: str = DEFAULT_MECHANISM
    warmup_step: int = 0
    on_invalid: str = HOST_KEYS["on_invalid"]
    call_budget_s: float | None = HOST_KEYS["call_budget_s"]
    plugins: Any = None


def read_block(cfg: Any) -> DataFlexBlock | None:
    """The one parse of a ``dataflex:`` block (``None``: no block); anything but a mapping, or a core or host key
    of the wrong type, is a :class:`ConfigError` naming the fix."""
    if cfg is None:
        return None
    plain = to_plain(cfg)
    if plain is None:
        return None
    if not isinstance(plain, Mapping):
        raise ConfigError(
            f"the dataflex block must be a mapping of keys such as mechanism, scorer and actuator, got "
            f"{type(plain).__name__} {plain!r}; write it as `dataflex: {{mechanism: reweight, scorer: {{name: ...}}, "
            "actuator: {name: ...}}`, not as a list"
        )
    warmup_step = plain.get("warmup_step", 0)
    if isinstance(warmup_step, bool) or not isinstance(warmup_step, int) or warmup_step < 0:
        raise ConfigError(f"dataflex.warmup_step must be an integer >= 0, got {warmup_step!r}")
    on_invalid = plain.get("on_invalid", HOST_KEYS["on_invalid"])
    if on_invalid not in ON_INVALID:
        raise ConfigError(
            f"dataflex.on_invalid={on_invalid!r} is not one of {', '.join(ON_INVALID)}; "
            "raise (default) stops the run on invalid plugin output, uniform uses weights 1 for that step"
        )
    budget = plain.get("call_budget_s", HOST_KEYS["call_budget_s"])
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, (int, float)) or not budget > 0):
        raise ConfigError(
            f"dataflex.call_budget_s={budget!r} must be a number of seconds > 0 (a component call running longer "
            "is warned about, naming it) or null to never warn"
        )
    return DataFlexBlock(
        keys=dict(plain),
        mechanism=plain.get("mechanism", DEFAULT_MECHANISM),
        warmup_step=warmup_step,
        on_invalid=on_invalid,
        call_budget_s=None if budget is None else float(budget),
        plugins=plain.get("plugins"),
    )


def check_block_keys(block: DataFlexBlock, extra_keys: Iterable[str] = ()) -> None:
    """Every key of ``block`` is the core's (:data:`CORE_KEYS`) or one of ``extra_keys``; an unknown key is a
    :class:`ConfigError` with the closest known one."""
    known_keys = (*CORE_KEYS, *extra_keys)
    unknown = sorted(set(block.keys) - set(known_keys))
    if unknown:
        close = {k: difflib.get_close_matches(k, known_keys, n=1, cutoff=0.6) for k in unknown}
        hints = "".join(f"; did you mean {v[0]!r} for {k!r}?" for k, v in close.items() if v)
        raise ConfigError(f"dataflex block has unknown key(s) {unknown}{hints} accepted keys: {', '.join(known_keys)}")
