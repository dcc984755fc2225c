"""``dataflex`` console script: inspect the installed plugin set."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from .plugins import get_plugin_manager
from .version import __version__


def _plugins(args: argparse.Namespace) -> int:
    manager = get_plugin_manager()
    rows = manager.describe_plugins()
    if args.json:
        print(json.dumps(rows, indent=2, sort_keys=True))
        return 0
    if not rows:
        print("no dataflex plugins installed (entry-point group 'dataflex')")
        return 0
    header = ("entry point", "distribution", "version", "status", "components")
    table = [header]
    for row in rows:
        comps = "; ".join(f"{kind}: {', '.join(names)}" for kind, names in sorted(row["components"].items()))
        table.append(
            (
                row["entry_point"],
                row["distribution"] or "-",
                row["version"] or "-",
                row["status"],
                comps or row.get("error", ""),
            )
        )
    widths = [max(len(str(r[i])) for r in table) for i in range(len(header) - 1)]
    for r in table:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)) + "  " + str(r[-1]))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dataflex", description="DataFlex plugin tools")
    parser.add_argument("--version", action="version", version=f"dataflex-core {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    plugins = sub.add_parser("plugins", help="list installed dataflex plugins and their components")
    plugins.add_argument("--json", action="store_true", help="print JSON instead of a table")
    plugins.set_defaults(func=_plugins)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
