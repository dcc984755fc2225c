"""Pinned plugin sets: what ``dataflex lock`` records, what ``dataflex verify`` compares, what a host enforces.

The lock guards the plugins' files on disk; what it protects and what it does not is the threat model in
``docs/production.md``. This package is the public place to import the lock API from.
"""

from __future__ import annotations

from ..distributions import canonical_name, plugin_distributions
from .compare import DIFFERENCE_LABELS, DRIFT_KINDS, Difference, compare, format_differences, remedies
from .enforce import (
    PluginDriftWarning,
    PluginSetMismatch,
    enforce,
    enforce_before_import,
    locked_manager,
    restrict_to,
    use_plugin_lock,
)
from .environment import core_version, installed_files, installed_plugin_set
from .file import (
    CORE_DIST,
    DEFAULT_LOCK_FILE,
    LOCK_FORMAT,
    MISSING_FILE,
    DistRecord,
    LockFileError,
    PluginSet,
    parse_lock,
    read_lock,
    write_lock,
)
from .importer import CHECKED_IMPORTER, CheckedImporter
from .scan import components_by_dist, load_plugins, lock_environment, scan_environment

__all__ = [
    "CHECKED_IMPORTER",
    "CORE_DIST",
    "CheckedImporter",
    "DEFAULT_LOCK_FILE",
    "DIFFERENCE_LABELS",
    "DRIFT_KINDS",
    "Difference",
    "DistRecord",
    "LOCK_FORMAT",
    "LockFileError",
    "MISSING_FILE",
    "PluginDriftWarning",
    "PluginSet",
    "PluginSetMismatch",
    "canonical_name",
    "compare",
    "components_by_dist",
    "core_version",
    "enforce",
    "enforce_before_import",
    "format_differences",
    "installed_files",
    "installed_plugin_set",
    "load_plugins",
    "lock_environment",
    "locked_manager",
    "parse_lock",
    "plugin_distributions",
    "read_lock",
    "remedies",
    "restrict_to",
    "scan_environment",
    "use_plugin_lock",
    "write_lock",
]
