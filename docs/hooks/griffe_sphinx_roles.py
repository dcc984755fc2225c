"""Griffe extension: show the Sphinx roles used in the project's docstrings as plain Markdown.

The code's docstrings follow the pytest/pluggy layout (``:class:`~dataflex_core.Scorer```,
``.. versionadded:: 0.1``), which Python help and IDEs read well; mkdocstrings would print
the roles verbatim. Rewriting them here keeps the docstrings as they are.
"""

from __future__ import annotations

import re
from typing import Any

try:
    import griffe
except ImportError:  # the docs tests call rewrite() where the docs toolchain is not installed
    griffe = None

ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj):`(~?)([^`]+)`")
VERSION = re.compile(r"^([ \t]*)\.\. (versionadded|versionchanged|deprecated):: *(\S+)[ \t]*$", re.M)
WORDS = {
    "versionadded": "Added in version",
    "versionchanged": "Changed in version",
    "deprecated": "Deprecated since version",
}


def _role(match: re.Match[str]) -> str:
    short, target = match.group(1), match.group(2)
    return f"`{target.rsplit('.', 1)[-1] if short else target}`"


FIELD = re.compile(r"^:(param|type|returns?|rtype|raises?)\b")


def narrative_first(text: str) -> str:
    """Move paragraphs that follow the ``:param:``/``:returns:`` fields in front of them.

    The hookspecs say *when* a hook is called after its fields; the Sphinx parser
    would fold those paragraphs into the last field's description.
    """
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if FIELD.match(line)), None)
    if start is None:
        return text
    end = start
    while end < len(lines):
        line = lines[end]
        if FIELD.match(line) or (line.startswith((" ", "\t")) and line.strip()):
            end += 1
        elif (
            not line.strip()
            and end + 1 < len(lines)
            and (FIELD.match(lines[end + 1]) or lines[end + 1].startswith(" "))
        ):
            end += 1
        else:
            break
    trailing = [line for line in lines[end:]]
    if not any(line.strip() for line in trailing):
        return text
    head = lines[:start]
    while head and not head[-1].strip():
        head.pop()
    while trailing and not trailing[0].strip():
        trailing.pop(0)
    return "\n".join([*head, "", *trailing, "", *lines[start:end]]).rstrip() + "\n"


def rewrite(text: str) -> str:
    """Sphinx roles -> inline code (``~`` keeps the last name only); version directives -> a sentence."""
    text = ROLE.sub(_role, narrative_first(text))
    return VERSION.sub(lambda m: f"{m.group(1)}*{WORDS[m.group(2)]} {m.group(3)}.*", text)


if griffe is not None:

    class SphinxRoles(griffe.Extension):
        def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
            if obj.docstring is not None:
                obj.docstring.value = rewrite(obj.docstring.value)
