"""What ``dataflex plugins`` shows of a plugin manager: one row per plugin, and the problems it exits for.

Discovery (:mod:`.discovery`) loads the plugins and keeps where each came
from and how it failed; this module only reads that.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from .registry import PluginInfo, Registry
from .text_table import format_table


@dataclass(frozen=True)
class PluginFailure:
    """A plugin that was skipped, with the error that caused it."""

    plugin: PluginInfo
    error: BaseException
    traceback: str
    #: ``load`` (importing the entry point) or ``register`` (running its registration hooks).
    phase: str = "load"

    @property
    def message(self) -> str:
        return f"skipping plugin {self.plugin.label}: {type(self.error).__name__}: {self.error}"


class LoadedPlugins(Protocol):
    """What the report reads of a plugin manager (:class:`~dataflex_core.discovery.DataFlexPluginManager`)."""

    plugin_infos: dict[str, PluginInfo]
    #: Plugins that failed to import.
    failures: list[PluginFailure]
    #: Plugins whose registration hooks failed.
    register_failures: list[PluginFailure]

    @property
    def all_failures(self) -> list[PluginFailure]: ...

    def registry(self) -> Registry: ...

    def plugin_key(self, info: PluginInfo) -> str: ...


def _base_row(info: PluginInfo, status: str) -> dict[str, Any]:
    return {"entry_point": info.name, "value": info.value, "distribution": info.dist, "version": info.version,
            "status": status, "components": {}}  # fmt: skip


def plugin_rows(manager: LoadedPlugins) -> list[dict[str, Any]]:
    """One record per loaded or failed plugin, as printed by ``dataflex plugins --json``.

    A plugin whose component name clashes with another plugin's lists the name under
    ``clashes`` with the message saying why it cannot be used.
    """
    registry = manager.registry()
    by_plugin = registry.by_plugin()
    clashes_of: dict[PluginInfo, list[dict[str, str]]] = {}
    for clash in registry.clashes.values():
        for spec in clash.providers:
            clashes_of.setdefault(spec.plugin, []).append(
                {"kind": clash.kind, "name": clash.name, "error": clash.message}
            )
    failed = {manager.plugin_key(f.plugin): f for f in manager.register_failures}
    rows = []
    for key, info in sorted(manager.plugin_infos.items(), key=lambda kv: (kv[1].dist or "", kv[1].name)):
        row = _base_row(info, "loaded")
        for spec in by_plugin.get(info, []):
            row["components"].setdefault(spec.kind, []).append(spec.name)
        if key in failed:
            row["status"] = "failed"
            row["error"] = f"{type(failed[key].error).__name__}: {failed[key].error}"
        if info in clashes_of:
            row["status"] = "clash" if row["status"] == "loaded" else row["status"]
            row["clashes"] = clashes_of[info]
        rows.append(row)
    for failure in manager.failures:
        row = _base_row(failure.plugin, "failed")
        row["error"] = f"{type(failure.error).__name__}: {failure.error}"
        rows.append(row)
    return rows


def plugin_problems(manager: LoadedPlugins) -> list[str]:
    """One line per plugin that failed and per clashing name: what ``dataflex plugins`` exits non-zero for."""
    registry = manager.registry()
    return [f.message for f in manager.all_failures] + [clash.message for clash in registry.clashes.values()]


def plugin_table(rows: list[dict[str, Any]]) -> str:
    """The ``dataflex plugins`` table of :func:`plugin_rows`."""
    if not rows:
        return "no dataflex plugins installed (entry-point group 'dataflex')"
    table = [("entry point", "distribution", "version", "status", "components")]
    for row in rows:
        comps = "; ".join(f"{kind}: {', '.join(names)}" for kind, names in sorted(row["components"].items()))
        clashed = ", ".join(f"{c['kind']} {c['name']!r}" for c in row.get("clashes", []))
        if clashed:
            comps = f"{comps}; clash: {clashed}" if comps else f"clash: {clashed}"
        status_text = comps if row["status"] != "failed" else row.get("error", "")
        cells = (row["entry_point"], row["distribution"] or "-", row["version"] or "-", row["status"], status_text)
        table.append(tuple(_one_line(str(cell)) for cell in cells))
    return format_table(table)


def _one_line(text: str) -> str:
    """``text`` with each control character (a newline, an escape sequence's ESC) written as its escape, so what a
    plugin's metadata or error says stays in its own cell and row."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
