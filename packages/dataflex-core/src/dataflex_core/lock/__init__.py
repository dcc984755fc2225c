"""Pinned plugin sets: what ``dataflex lock`` records, what ``dataflex verify`` compares, what a host enforces.

The lock guards the plugins' files on disk; what it protects and what it does not is the threat model in
``docs/production.md``. This package is the public place to import the lock API from.
"""

from __future__ import annotations

from .compare import Difference, compare, format_differences, remedies
from .enforce import (
    PluginDriftWarning,
    PluginSetMismatch,
    enforce,
    enforce_before_import,
    locked_manager,
    restrict_to,
    use_plugin_lock,
)
from .environment import installed_files, installed_plugin_set
from .file import (
    CORE_DIST,
    DEFAULT_LOCK_FILE,
    DistRecord,
    LockFileError,
    PluginSet,
    parse_lock,
    read_lock,
    write_lock,
)
from .scan import lock_environment, scan_environment

__all__ = [
    "CORE_DIST",
    "DEFAULT_LOCK_FILE",
    "Difference",
    "DistRecord",
    "LockFileError",
    "PluginDriftWarning",
    "PluginSet",
    "PluginSetMismatch",
    "compare",
    "enforce",
    "enforce_before_import",
    "format_differences",
    "installed_files",
    "installed_plugin_set",
    "lock_environment",
    "locked_manager",
    "parse_lock",
    "read_lock",
    "remedies",
    "restrict_to",
    "scan_environment",
    "use_plugin_lock",
    "write_lock",
]
