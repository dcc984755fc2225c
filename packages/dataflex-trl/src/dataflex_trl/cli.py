"""``dataflex-trl`` console script.

Its sub-commands come with other distributions (entry-point group
``dataflex.cli``): ``demo`` with ``dataflex-lab``, which the production
install does not need.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from dataflex_core.cli_extensions import add_extension_commands

from .version import __version__

#: Sub-commands other distributions provide, with what to install for each.
EXTENSION_COMMANDS = {"demo": "dataflex-lab[trl]"}


def build_parser() -> argparse.ArgumentParser:
    """The ``dataflex-trl`` argument parser (also rendered into the CLI reference)."""
    parser = argparse.ArgumentParser(prog="dataflex-trl", description="DataFlex inside TRL's GRPOTrainer.")
    parser.add_argument("--version", action="version", version=f"dataflex-trl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    add_extension_commands(sub, "dataflex-trl", EXTENSION_COMMANDS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
