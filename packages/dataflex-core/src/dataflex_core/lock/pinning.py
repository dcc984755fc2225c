"""Pinned plugin sets in any host: enforce ``dataflex.plugins.lock`` at mount, record the set in checkpoints.

Before any component is built, only the locked distributions are imported and a difference from the lock stops
the run with ``dataflex verify``'s table (``allow_drift``: a warning, recorded). Without a lock the set is still
recorded, so a resume on another one is refused.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..atomic_write import write_text_atomic
from ..discovery import ENV_PLUGINS_LOCK
from ..errors import ConfigError
from ..keys import Key, parse_keys
from .compare import Difference, format_differences
from .enforce import enforce, get_plugin_manager, use_plugin_lock
from .file import DEFAULT_LOCK_FILE, PluginSet, read_lock, write_lock
from .scan import scan_environment

logger = logging.getLogger("dataflex_core.step")

#: Key of the ``dataflex:`` block holding these settings.
PLUGINS_KEY = "plugins"
#: ``dataflex.plugins``'s keys.
PLUGIN_KEYS = {
    "lock": Key(str, "the path of a `dataflex lock` file", example="lock: /path/dataflex_plugins.lock"),
    "allow_drift": Key(bool, "accept version and content changes from the lock with a warning", default=False),
    "allow_missing_state": Key(
        bool, "resume a checkpoint without DataFlex's files, the plugin set unchecked and every component fresh",
        default=False,
    ),
}  # fmt: skip
#: The plugin set a checkpoint was written with: a lock file under its usual name (``dataflex verify`` reads it).
CHECKPOINT_PLUGIN_SET = DEFAULT_LOCK_FILE
#: How the set was pinned when the checkpoint was written, and the drift accepted then.
CHECKPOINT_PINNING = "dataflex_plugins.json"

MOUNT_HINT = (
    "the run stops before the first rollout (dataflex.plugins.allow_drift=true accepts version and content changes "
    "with a warning)"
)
RESUME_HINT = (
    "resume in an environment with the checkpoint's plugin set (it is stored in the checkpoint as "
    f"{CHECKPOINT_PLUGIN_SET}; `dataflex verify <that file>` shows the same table), or set "
    "dataflex.plugins.allow_drift=true to accept version and content changes"
)


@dataclass(frozen=True)
class PluginSettings:
    """``dataflex.plugins`` after validation."""

    lock: str | None = None
    allow_drift: bool = False
    #: Resume a checkpoint that lacks DataFlex's files (plugin set unchecked, components fresh) instead of refusing.
    allow_missing_state: bool = False
    #: Where the lock path came from, for messages: the config key or the environment variable.
    lock_from: str = f"dataflex.{PLUGINS_KEY}.lock"


def plugin_settings(plugins: Any) -> PluginSettings:
    """Check ``dataflex.plugins`` as the read block holds it (``None``: unset); ``$DATAFLEX_PLUGINS_LOCK`` supplies
    the lock when it has none."""
    keys = parse_keys(PLUGIN_KEYS, plugins, f"dataflex.{PLUGINS_KEY}")
    lock = keys["lock"]
    if lock is not None and not lock.strip():
        raise ConfigError(f"dataflex.{PLUGINS_KEY}.lock must be the path of a `dataflex lock` file, got {lock!r}")
    flags = {"allow_drift": keys["allow_drift"], "allow_missing_state": keys["allow_missing_state"]}
    env_lock = os.environ.get(ENV_PLUGINS_LOCK, "").strip()
    if not lock and env_lock:
        return PluginSettings(lock=env_lock, lock_from=f"${ENV_PLUGINS_LOCK}", **flags)
    return PluginSettings(lock=lock or None, **flags)


@dataclass
class ResolvedPlugins:
    """The plugin set this run uses, how it was pinned, and any drift that was accepted."""

    settings: PluginSettings
    plugin_set: PluginSet
    #: Differences from the lock that ``allow_drift`` accepted at mount.
    drift: list[Difference] = field(default_factory=list)
    #: Differences from a resumed checkpoint's set that ``allow_drift`` accepted.
    resume_drift: list[Difference] = field(default_factory=list)

    def describe(self) -> str:
        pinned = f"locked by {self.settings.lock}" if self.settings.lock else "not locked"
        text = f"{self.plugin_set.summary()} ({pinned})"
        if self.drift:
            text += f"; accepted drift: {', '.join(f'{d.dist} {d.label}' for d in self.drift)}"
        return text


def resolve_plugins(plugins: Any) -> ResolvedPlugins:
    """Load the plugins this run may use and check them against the lock; call before building components.

    :param plugins: the run's ``dataflex.plugins`` (:attr:`~dataflex_core.block.DataFlexBlock.plugins`; ``None``
        reads only the environment).

    :raises dataflex_core.lock.PluginSetMismatch: with one row per difference the settings do not accept.
    """
    settings = plugin_settings(plugins)
    if settings.lock:
        source = f"{settings.lock_from}={settings.lock}"
        # the locked distributions' files are checked before any of them is imported
        manager = use_plugin_lock(settings.lock, allow_drift=settings.allow_drift, expected_from=source)
        expected = read_lock(settings.lock)
        actual = scan_environment(manager=manager)
        drift = enforce(
            expected,
            actual,
            allow_drift=settings.allow_drift,
            expected_from=source,
            hint=MOUNT_HINT,
            lock=settings.lock,
        )
        if drift:
            logger.warning("dataflex plugin drift accepted (allow_drift):\n%s", format_differences(drift))
    else:
        actual = scan_environment(manager=get_plugin_manager())
        drift = []
    resolved = ResolvedPlugins(settings=settings, plugin_set=actual, drift=drift)
    logger.info("dataflex plugin set: %s", resolved.describe())
    return resolved


# -- the checkpoint record -------------------------------------------------------
def save_plugin_record(folder: str | os.PathLike[str], resolved: ResolvedPlugins) -> None:
    """Store the plugin set (lock format) and how it was pinned in a checkpoint folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    write_lock(resolved.plugin_set, folder / CHECKPOINT_PLUGIN_SET)
    record = {
        "lock": resolved.settings.lock,
        "allow_drift": resolved.settings.allow_drift,
        "drift": [d.as_dict() for d in resolved.drift],
        "resume_drift": [d.as_dict() for d in resolved.resume_drift],
    }
    write_text_atomic(folder / CHECKPOINT_PINNING, json.dumps(record, indent=2, sort_keys=True) + "\n")


def check_plugin_record(folder: str | os.PathLike[str], resolved: ResolvedPlugins) -> list[Difference]:
    """Compare this run's plugin set with the one a checkpoint was written with.

    :returns: the differences ``allow_drift`` accepted (also kept on ``resolved.resume_drift``).
    :raises dataflex_core.lock.PluginSetMismatch: on any other difference, naming each.
    """
    path = Path(folder) / CHECKPOINT_PLUGIN_SET
    if not path.exists():
        logger.warning(
            "checkpoint %s records no dataflex plugin set (written without a dataflex host's checkpointing); "
            "the plugin set cannot be compared on this resume",
            folder,
        )
        return []
    recorded = read_lock(path)
    accepted = enforce(
        recorded,
        resolved.plugin_set,
        allow_drift=resolved.settings.allow_drift,
        expected_from=f"the checkpoint {folder}",
        hint=RESUME_HINT,
    )
    if accepted:
        logger.warning("resuming %s with a drifted plugin set (allow_drift):\n%s", folder, format_differences(accepted))
    resolved.resume_drift = list(accepted)
    return accepted
