"""What ``dataflex plugins`` shows of a plugin: its record, its row of the table, and how it failed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .registry import PluginInfo
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


def plugin_row(info: PluginInfo, status: str) -> dict[str, Any]:
    """A plugin's record of ``dataflex plugins --json``, before its components, clashes or error are added."""
    return {"entry_point": info.name, "value": info.value, "distribution": info.dist, "version": info.version,
            "status": status, "components": {}}  # fmt: skip


def plugin_table(rows: list[dict[str, Any]]) -> str:
    """The ``dataflex plugins`` table of the manager's ``describe_plugins()``."""
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
        table.append(cells)
    return format_table(table)
