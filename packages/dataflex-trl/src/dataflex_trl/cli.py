"""``dataflex-trl`` console script."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .version import __version__


def _demo(args: argparse.Namespace) -> int:
    from dataflex_core import DataFlexError
    from dataflex_core.demo_report import demo_options

    from .demo import DemoSettings, run_training_demo

    try:
        settings = DemoSettings(**demo_options(args), loss_type=args.loss_type)
        run_training_demo(settings)
    except (ValueError, DataFlexError, RuntimeError) as exc:
        print(f"dataflex-trl demo: {exc}", file=sys.stderr)
        return 2
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``dataflex-trl`` argument parser (also rendered into the CLI reference)."""
    from dataflex_core.demo_report import add_demo_arguments

    from .mount import LOSS_UNITS

    parser = argparse.ArgumentParser(prog="dataflex-trl", description="DataFlex inside TRL's GRPOTrainer.")
    parser.add_argument("--version", action="version", version=f"dataflex-trl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser(
        "demo",
        help="train with TRL's own GRPO loop on the CPU (tiny model, toy task): baseline against DataFlex",
        description=(
            "Train a tiny random Qwen2 on the toy echo task with TRL's GRPOTrainer, once plainly and once with "
            "DataFlex, with the same seed; print a line per step and a summary table, write a PNG plot and, with "
            "--json, every logged metric. A toy run shows the mechanics and a direction, not a benchmark result."
        ),
    )
    add_demo_arguments(demo, workdir="dataflex_trl_demo")
    demo.add_argument("--loss-type", choices=list(LOSS_UNITS), default="dapo", help="TRL's loss_type (default dapo)")
    demo.set_defaults(handler=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    raise SystemExit(main())
