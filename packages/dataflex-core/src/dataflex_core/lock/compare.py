"""How an installed plugin set differs from an expected one: one row per difference, and the fix."""

from __future__ import annotations

import importlib.metadata as importlib_metadata
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..components import declared_kinds
from ..distributions import ENTRY_POINT_GROUP
from ..text_table import format_table
from .environment import install_origin
from .file import BYTECODE_CACHE, CORE_DIST, MISSING_FILE, PIP_REINSTALL, DistRecord, PluginSet
from .importer import module_of

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
#: What to do about an entry point naming a module its distribution does not ship (:func:`outside_rows`).
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
    return "; ".join(changes[:5]) + (f"; and {len(changes) - 5} more" if len(changes) > 5 else "")


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
            before, after = _components_text(want.components), _components_text(have.components)
            if before != after:
                rows.append(Difference("components", name, before, after))
    return sorted_rows(rows)


def entry_point_module(value: str) -> str:
    """The module an entry point's value (``pkg.mod:attr [extra]``) imports."""
    return importlib_metadata.EntryPoint(name="", value=value, group=ENTRY_POINT_GROUP).module


def outside_entry_points(record: DistRecord) -> dict[str, str]:
    """Entry-point name -> module, for each entry point naming a module ``record`` ships neither as a file (a
    removed one counts: that is a content difference) nor as a namespace package holding its files. Such a module
    (another distribution's, or a file on ``sys.path``) would run as this distribution's while no lock hashed it,
    so ``dataflex lock`` refuses it and it is never imported under a lock."""
    shipped = {found[0] for found in map(module_of, record.files) if found is not None}
    outside = {}
    for name, value in sorted(record.entry_points.items()):
        module = entry_point_module(value)
        if module not in shipped and not any(m.startswith(module + ".") for m in shipped):
            outside[name] = module
    return outside


def describe_outside(record: DistRecord, outside: Mapping[str, str]) -> str:
    """One clause per entry point of :func:`outside_entry_points`."""
    return "; ".join(
        f"entry point {name} = {record.entry_points[name]} names module {module!r}, which {record.name} does not "
        "ship (another distribution's, or a file on sys.path)"
        for name, module in outside.items()
    )


def outside_rows(plugin_set: PluginSet) -> list[Difference]:
    """One ``outside`` row per distribution with an entry point outside its files, sorted."""
    rows = []
    for name in plugin_set.dist_names:
        record = plugin_set.plugins[name]
        outside = outside_entry_points(record)
        if outside:
            shown = ", ".join(f"{n} = {record.entry_points[n]}" for n in outside)
            rows.append(Difference("outside", name, "-", shown, f"{describe_outside(record, outside)}; never imported"))
    return rows


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
    """What an operator can run to get back to the lock ``lock`` names, one line per kind of fix: one pip command
    reinstalls every distribution that differs from where it was installed from (``--force-reinstall``: a changed
    file keeps its version); an editable install is named apart, since no reinstall restores a checkout's files."""
    differences = list(differences)
    lock = shlex.quote(lock)  # a path with a space or a quote still works as printed
    by_dist: dict[str, list[Difference]] = {}
    for row in differences:
        if row.kind not in ("unexpected", "outside"):  # a reinstall mends neither
            by_dist.setdefault(row.dist, []).append(row)
    reinstall: dict[str, str] = {}
    lines = []
    for dist, rows in sorted(by_dist.items()):
        try:
            installed = importlib_metadata.distribution(dist)
        except importlib_metadata.PackageNotFoundError:
            installed = None  # then a missing row says the locked version
        folder, editable = install_origin(installed) if installed is not None else (None, False)
        # the locked version: a version or missing row says it, otherwise it is still the installed one
        version = next((r.locked for r in rows if r.kind in ("version", "missing")), None) or installed.version
        if editable and folder:
            lines.append(
                f"{dist} is an editable install of {folder}: its files are the checkout's own, so restore them there "
                f"(`git -C {shlex.quote(folder)} checkout -- .`) or re-lock after review"
            )
        else:  # from its checkout folder or wheel file, else from an index
            reinstall[dist] = folder or f"{dist}=={version}"
    if reinstall:
        targets = " ".join(shlex.quote(t) for t in reinstall.values())
        lines.insert(0, f"restore the locked bytes of {', '.join(reinstall)}: `{PIP_REINSTALL} {targets}`")
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
