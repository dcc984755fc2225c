"""``dataflex-verl`` console script.

``dataflex-verl trainers`` is the host's own; ``demo`` and ``demo-step`` come
with ``dataflex-lab`` (entry-point group ``dataflex.cli``), which the production
install does not need.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from dataflex_core.cli_extensions import add_extension_commands

from . import TRAINER_MODES
from .version import __version__

#: Sub-commands other distributions provide, with what to install for each.
EXTENSION_COMMANDS = {"demo": "dataflex-lab[verl]", "demo-step": "dataflex-lab[verl]"}


def _trainers(args: argparse.Namespace) -> int:
    import verl  # noqa: F401 - importing verl runs the entry point
    from verl.trainer.ppo.v1 import get_trainer_cls

    for mode, base in TRAINER_MODES.items():
        cls = get_trainer_cls(mode)
        print(f"{mode}: {cls.__module__}.{cls.__qualname__} (keeps verl's {base!r} behaviour)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``dataflex-verl`` argument parser (also rendered into the CLI reference)."""
    parser = argparse.ArgumentParser(prog="dataflex-verl", description="DataFlex inside verl's v1 trainers.")
    parser.add_argument("--version", action="version", version=f"dataflex-verl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    add_extension_commands(sub, "dataflex-verl", EXTENSION_COMMANDS)
    trainers = sub.add_parser("trainers", help="show the trainer modes registered with verl")
    trainers.set_defaults(func=_trainers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
