"""Aligned plain-text tables, as the CLIs print them."""

from __future__ import annotations

from collections.abc import Sequence


def format_table(rows: Sequence[Sequence[object]], *, indent: str = "", rule: bool = False) -> str:
    """Rows (the first is the header) as left-aligned columns; the last column is not padded. A control character
    in a cell (a newline, an escape sequence's ESC) is written as its escape, so what a plugin's metadata or error
    says stays in its own cell and row.

    :param indent: prefix of every line.
    :param rule: put a line of dashes under the header.
    """
    cells = [["".join(c if c.isprintable() else repr(c)[1:-1] for c in str(cell)) for cell in row] for row in rows]
    if not cells:
        return ""
    columns = max(len(r) for r in cells)
    cells = [r + [""] * (columns - len(r)) for r in cells]
    widths = [max(len(r[i]) for r in cells) for i in range(columns)]
    lines = [(indent + "  ".join(c.ljust(w) for c, w in zip(r, widths))).rstrip() for r in cells]
    if rule:
        lines.insert(1, indent + "  ".join("-" * w for w in widths))
    return "\n".join(lines)
