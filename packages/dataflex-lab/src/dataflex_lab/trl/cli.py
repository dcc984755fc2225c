"""``dataflex-trl demo``, added to the host's command through the entry-point group ``dataflex.cli``.

Building the parser imports no TRL, so ``dataflex-trl --help`` and the CLI
reference work where TRL is not installed.
"""

from __future__ import annotations

import argparse

from ..demo_report import add_demo_arguments, demo_options, run_command


def _demo(args: argparse.Namespace) -> int:
    from .training_demo import DemoSettings, run_training_demo

    return run_command(
        "dataflex-trl", "trl", lambda: run_training_demo(DemoSettings(**demo_options(args), loss_type=args.loss_type))
    )


def add_demo(subparsers: argparse._SubParsersAction, name: str = "demo") -> argparse.ArgumentParser:
    """Add ``dataflex-trl demo`` (the ``dataflex.cli`` entry point ``dataflex-trl.demo``)."""
    from dataflex_trl.mount import LOSS_UNITS

    demo = subparsers.add_parser(
        name,
        help="train with TRL's own GRPO loop on the CPU (tiny model, toy task): baseline against DataFlex",
        description=(
            "Train a tiny random Qwen2 on the toy echo task with TRL's GRPOTrainer, once plainly and once with "
            "DataFlex, with the same seed; print a line per step and a summary table, write a PNG plot and, with "
            "--json, every logged metric. A toy run shows the mechanics and a direction, not a benchmark result."
        ),
    )
    add_demo_arguments(demo, workdir="dataflex_trl_demo")
    demo.add_argument("--loss-type", choices=list(LOSS_UNITS), default="dapo", help="TRL's loss_type (default dapo)")
    demo.set_defaults(func=_demo)
    return demo
