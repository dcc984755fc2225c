"""How an installed plugin set differs from an expected one: one row per difference, and the fix."""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..components import declared_kinds
from ..text_table import format_table
from .file import BYTECODE_CACHE, CORE_DIST, MISSING_FILE, PluginSet
from .restore import restore_lines

#: Difference kinds, in the order rows are shown, with their labels.
DIFFERENCE_LABELS = {
    "missing": "missing",
    "unexpected": "unexpected",
    "version": "version changed",
    "content": "content changed",
    "entry_points": "entry points changed",
    "components": "components changed",
    "load_failed": "load failed",
    "outside": "entry point outside its distribution",
}
#: What to do about an entry point naming a module its distribution does not ship (:mod:`.outside`).
OUTSIDE_FIX = (
    "ship that module in the distribution (or point the entry point at one of its own modules) and reinstall it"
)
#: Differences ``allow_drift`` downgrades to a warning.
DRIFT_KINDS = frozenset({"version", "content"})


@dataclass(frozen=True)
class Difference:
    """One row of the verify table."""

    kind: str
    dist: str
    locked: str
    installed: str
    detail: str = ""

    @property
    def label(self) -> str:
        return DIFFERENCE_LABELS[self.kind]

    @property
    def is_drift(self) -> bool:
        return self.kind in DRIFT_KINDS

    def as_dict(self) -> dict[str, str]:
        return {"difference": self.label, "distribution": self.dist, "locked": self.locked,
                "installed": self.installed, "detail": self.detail}  # fmt: skip


def _short(content_hash: str) -> str:
    return content_hash[: len("sha256:") + 12]


def _file_changes(locked: Mapping[str, str], installed: Mapping[str, str]) -> str:
    changes = []
    for path in sorted(set(locked) | set(installed)):
        before, after = locked.get(path), installed.get(path)
        if before == after:
            continue
        if before is None and BYTECODE_CACHE in path.split("/"):
            changes.append(f"bytecode not compiled from its source {path}")
        elif before is None:
            changes.append(f"added {path}")
        elif after is None or after == MISSING_FILE:
            changes.append(f"removed {path}")
        else:
            changes.append(f"modified {path}")
    shown = changes[:5]
    if len(changes) > 5:
        shown.append(f"and {len(changes) - 5} more")
    return "; ".join(shown)


def _ep_text(eps: Mapping[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(eps.items())) or "-"


def _components_text(components: Mapping[str, tuple[str, ...]]) -> str:
    return "; ".join(f"{k}: {', '.join(components[k])}" for k in declared_kinds(components) if components[k]) or "-"


def compare(expected: PluginSet, actual: PluginSet) -> list[Difference]:
    """Every way ``actual`` differs from ``expected``, one row per difference, sorted by distribution."""
    rows: list[Difference] = []
    if expected.core_version != actual.core_version:
        rows.append(Difference("version", CORE_DIST, expected.core_version, actual.core_version))
    for name in sorted(set(expected.plugins) | set(actual.plugins)):
        want, have = expected.plugins.get(name), actual.plugins.get(name)
        if have is None:
            rows.append(Difference("missing", name, want.version, "-", "locked but not installed"))
            continue
        if want is None:
            rows.append(Difference("unexpected", name, "-", have.version, "installed but not locked; never imported"))
            continue
        if want.version != have.version:
            rows.append(Difference("version", name, want.version, have.version))
        if want.content_hash != have.content_hash:
            changes = _file_changes(want.files, have.files)
            rows.append(Difference("content", name, _short(want.content_hash), _short(have.content_hash), changes))
        if dict(want.entry_points) != dict(have.entry_points):
            rows.append(Difference("entry_points", name, _ep_text(want.entry_points), _ep_text(have.entry_points)))
        if have.load_error and have.load_error != want.load_error:
            # the same failure as when ``expected`` was recorded (a checkpoint of a run with a broken plugin
            # installed) is no difference: that run trained without the plugin too
            rows.append(Difference("load_failed", name, want.version, have.version, have.load_error))
        elif want.components is not None and have.components is not None:
            if _components_text(want.components) != _components_text(have.components):
                rows.append(
                    Difference("components", name, _components_text(want.components), _components_text(have.components))
                )
    return sorted_rows(rows)


def sorted_rows(rows: Iterable[Difference]) -> list[Difference]:
    """Rows in table order: ``dataflex-core`` first, then by distribution and kind of difference."""
    order = list(DIFFERENCE_LABELS)
    return sorted(rows, key=lambda d: (d.dist != CORE_DIST, d.dist, order.index(d.kind)))


def format_differences(differences: Iterable[Difference]) -> str:
    """The verify table, one aligned row per difference."""
    rows = [("difference", "distribution", "locked", "installed", "detail")]
    rows += [(d.label, d.dist, d.locked, d.installed, d.detail) for d in differences]
    return format_table(rows, indent="  ")


def remedies(differences: Iterable[Difference], lock: str) -> list[str]:
    """What an operator can run to get back to the lock ``lock`` names, one line per kind of fix (the reinstall of
    the distributions that differ: :mod:`.restore`)."""
    differences = list(differences)
    lock = shlex.quote(lock)  # a path with a space or a quote still works as printed
    lines = restore_lines(differences)
    unexpected = sorted({d.dist for d in differences if d.kind == "unexpected"})
    if unexpected:
        lines.append(
            f"remove what the lock does not list: `pip uninstall -y {' '.join(unexpected)}`, or review it and "
            f"add it to the lock with `dataflex lock -o {lock}`"
        )
    outside = sorted({d.dist for d in differences if d.kind == "outside"})
    if outside:
        lines.append(
            f"{', '.join(outside)}: an entry point names a module the distribution does not ship, so no lock can "
            f"hash the code it runs; {OUTSIDE_FIX}, or uninstall it"
        )
    if any(d.kind not in ("unexpected", "outside") for d in differences):
        lines.append(f"or, after reviewing the change, re-lock with `dataflex lock -o {lock}`")
    return lines
