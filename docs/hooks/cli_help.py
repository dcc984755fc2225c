"""mkdocs hook: paste each console script's ``--help`` into the page at build time.

A page writes ``<!-- dataflex-cli dataflex_core.cli:build_parser -->`` and gets
the help of that argparse parser and of each of its sub-commands (and theirs), so the CLI
reference shows the options the installed code really accepts.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
from typing import Any

MARKER = re.compile(r"<!-- dataflex-cli ([\w.]+):(\w+) -->")
#: argparse wraps help at $COLUMNS; a fixed width keeps the page the same on every machine.
WIDTH = "100"


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse offers no public accessor for sub-parsers
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def parser_help(target: str) -> str:
    """Markdown with the ``--help`` of ``module:factory()`` and of every sub-command it defines."""
    module_name, _, factory = target.partition(":")
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        parser = getattr(importlib.import_module(module_name), factory)()
        blocks = [("", parser.format_help())]
        for name, sub in _subcommands(parser).items():  # and a sub-command's own (``dataflex ledger show``)
            blocks.append((name, sub.format_help()))
            blocks += [(f"{name} {inner}", command.format_help()) for inner, command in _subcommands(sub).items()]
    finally:
        if previous is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = previous
    out = []
    for name, text in blocks:
        if name:
            out += [f"#### `{parser.prog} {name}`", ""]
        out += ["```text", text.rstrip(), "```", ""]
    return "\n".join(out)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any, **kwargs: Any) -> str:
    return MARKER.sub(lambda m: parser_help(f"{m.group(1)}:{m.group(2)}"), markdown)
