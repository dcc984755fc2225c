"""Which verl trainer line runs DataFlex: ``dataflex.trainer_line`` against ``trainer.use_v1``.

verl 0.9 has two trainer lines. ``trainer.use_v1=true`` (verl's default) runs
the V1 trainers of ``trainer.v1.trainer_mode``, on TransferQueue; DataFlex
runs there as the ``dataflex_*`` trainer modes (:mod:`dataflex_verl.trainers`).
``trainer.use_v1=false`` runs ``RayPPOTrainer`` (``main_ppo_v0``) on
``DataProto``; DataFlex runs there at its ``compute_advantage``
(:mod:`dataflex_verl.legacy`). ``dataflex.trainer_line`` says which line the
user means (``auto``: whichever ``trainer.use_v1`` selects); a config whose
settings would have no effect on the line verl runs is refused here, when verl
validates it, before Ray starts.

Importing this module does not import verl.
"""

from __future__ import annotations

from typing import Any

from . import TRAINER_MODES

#: ``dataflex.trainer_line`` values; ``auto`` follows ``trainer.use_v1``.
TRAINER_LINES = ("auto", "v1", "legacy")
#: The block key, read by the host (not by core).
LINE_KEY = "trainer_line"


def _get(node: Any, *path: str, default: Any = None) -> Any:
    for part in path:
        try:
            node = node.get(part, None) if node is not None else None
        except Exception:  # noqa: BLE001 - not a config this check can read
            return default
    return default if node is None else node


def asks_for_dataflex(config: Any) -> bool:
    """Whether ``config`` has a ``dataflex:`` block or selects a DataFlex trainer mode."""
    return _get(config, "dataflex") is not None or _get(config, "trainer", "v1", "trainer_mode") in TRAINER_MODES


def trainer_line(config: Any) -> str | None:
    """``"v1"`` or ``"legacy"``: where DataFlex runs under ``config``; ``None`` when it asks for no DataFlex.

    :raises ConfigError: an unknown ``dataflex.trainer_line``, a line that ``trainer.use_v1`` does not run,
        or a ``dataflex_*`` trainer mode on the legacy line (which never reads ``trainer.v1.trainer_mode``).
    """
    if not asks_for_dataflex(config):
        return None
    from dataflex_core import ConfigError

    wanted = str(_get(config, "dataflex", LINE_KEY, default="auto"))
    if wanted not in TRAINER_LINES:
        raise ConfigError(f"dataflex.{LINE_KEY}={wanted!r} is not one of {', '.join(TRAINER_LINES)}")
    use_v1 = bool(_get(config, "trainer", "use_v1", default=True))
    line = "v1" if use_v1 else "legacy"
    if wanted not in ("auto", line):
        fix = "trainer.use_v1=false" if wanted == "legacy" else "trainer.use_v1=true"
        raise ConfigError(
            f"dataflex.{LINE_KEY}={wanted!r}, but trainer.use_v1={str(use_v1).lower()} runs verl's {line} trainer "
            f"line; set {fix}, or dataflex.{LINE_KEY}=auto to follow trainer.use_v1"
        )
    mode = _get(config, "trainer", "v1", "trainer_mode")
    if line == "legacy" and mode in TRAINER_MODES:
        raise ConfigError(
            f"trainer.use_v1=false runs verl's legacy trainer (RayPPOTrainer), which never reads "
            f"trainer.v1.trainer_mode (here {mode!r}): that DataFlex trainer would not be built. On the legacy line "
            "DataFlex runs at compute_advantage from the dataflex: block alone; leave trainer.v1.trainer_mode at "
            "verl's default, or set trainer.use_v1=true to run the V1 trainer mode"
        )
    return line
