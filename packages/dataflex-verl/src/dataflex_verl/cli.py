"""``dataflex-verl`` console script."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from . import TRAINER_MODES
from .version import __version__


def _demo(args: argparse.Namespace) -> int:
    from dataflex_core import DataFlexError
    from dataflex_core.demo_report import demo_options

    from .training_demo import DemoSettings, run_training_demo

    try:
        settings = DemoSettings(**demo_options(args), loss_agg_mode=args.loss_agg_mode)
        run_training_demo(settings)
    except (ValueError, DataFlexError, RuntimeError) as exc:
        print(f"dataflex-verl demo: {exc}", file=sys.stderr)
        return 2
    return 0


def _demo_step(args: argparse.Namespace) -> int:
    # TransferQueue warns once per request on small machines (thread count); keep the demo's output readable
    os.environ.setdefault("TQ_LOGGING_LEVEL", "ERROR")
    from .demo import run_demo

    rows = run_demo(
        num_prompts=args.prompts,
        n=args.n,
        max_response_len=args.max_response_len,
        loss_agg_mode=args.loss_agg_mode,
        seed=args.seed,
    )
    return 0 if rows else 1


def _trainers(args: argparse.Namespace) -> int:
    import verl  # noqa: F401 - importing verl runs the entry point
    from verl.trainer.ppo.v1 import get_trainer_cls

    for mode, base in TRAINER_MODES.items():
        cls = get_trainer_cls(mode)
        print(f"{mode}: {cls.__module__}.{cls.__qualname__} (keeps verl's {base!r} behaviour)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``dataflex-verl`` argument parser (also rendered into the CLI reference)."""
    from dataflex_core.demo_report import add_demo_arguments

    parser = argparse.ArgumentParser(prog="dataflex-verl", description="DataFlex inside verl's v1 trainers.")
    parser.add_argument("--version", action="version", version=f"dataflex-verl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    loss_modes = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]
    demo = sub.add_parser(
        "demo",
        help="train with verl's own GRPO fit loop on the CPU (tiny model, toy task): sync against dataflex_sync",
        description=(
            "Train both arms (verl's sync trainer and dataflex_sync) with verl's own entry point on the CPU: a tiny "
            "random Qwen2 learning a toy echo task. Prints one line per step, a summary table, and writes a plot; "
            "a toy run shows the mechanics and a direction, not a benchmark result."
        ),
    )
    add_demo_arguments(demo, workdir="dataflex_demo")
    demo.add_argument("--loss-agg-mode", default="token-mean", choices=loss_modes, help="verl's actor loss_agg_mode")
    demo.set_defaults(func=_demo)

    step = sub.add_parser(
        "demo-step",
        help="one call of verl's real _compute_advantage on a synthetic GRPO batch under a few scorer/reweighter pairs",
    )
    step.add_argument("--prompts", type=int, default=16, help="prompts (GRPO groups) in the batch (default 16)")
    step.add_argument("--n", type=int, default=8, help="responses per prompt (default 8)")
    step.add_argument("--max-response-len", type=int, default=64, help="longest response in tokens (default 64)")
    step.add_argument("--loss-agg-mode", default="token-mean", choices=loss_modes, help="verl's actor loss_agg_mode")
    step.add_argument("--seed", type=int, default=0)
    step.set_defaults(func=_demo_step)

    trainers = sub.add_parser("trainers", help="show the trainer modes registered with verl")
    trainers.set_defaults(func=_trainers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
