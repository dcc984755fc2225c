"""Aligned plain-text tables, as the CLIs print them."""

from __future__ import annotations

from collections.abc import Sequence


def format_table(rows: Sequence[Sequence[object]], *, indent: str = "", rule: bool = False) -> str:
    """Rows (the first is the header) as left-aligned columns; the last column is not padded.

    :param indent: prefix of every line.
    :param rule: put a line of dashes under the header.
    """
    cells = [[str(c) for c in row] for row in rows]
    if not cells:
        return ""
    columns = max(len(r) for r in cells)
    cells = [r + [""] * (columns - len(r)) for r in cells]
    widths = [max(len(r[i]) for r in cells) for i in range(columns)]
    lines = [(indent + "  ".join(c.ljust(w) for c, w in zip(r, widths))).rstrip() for r in cells]
    if rule:
        lines.insert(1, indent + "  ".join("-" * w for w in widths))
    return "\n".join(lines)
