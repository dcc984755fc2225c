"""``dataflex-verl`` console script."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

from . import TRAINER_MODES
from .version import __version__


def _demo(args: argparse.Namespace) -> int:
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
    parser = argparse.ArgumentParser(prog="dataflex-verl", description="DataFlex inside verl's v1 trainers.")
    parser.add_argument("--version", action="version", version=f"dataflex-verl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser(
        "demo",
        help="run verl's real _compute_advantage on a synthetic GRPO batch under a few scorer/reweighter pairs",
    )
    demo.add_argument("--prompts", type=int, default=16, help="prompts (GRPO groups) in the batch (default 16)")
    demo.add_argument("--n", type=int, default=8, help="responses per prompt (default 8)")
    demo.add_argument("--max-response-len", type=int, default=64, help="longest response in tokens (default 64)")
    demo.add_argument(
        "--loss-agg-mode",
        default="token-mean",
        choices=["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"],
        help="verl's actor loss_agg_mode (default token-mean)",
    )
    demo.add_argument("--seed", type=int, default=0)
    demo.set_defaults(func=_demo)

    trainers = sub.add_parser("trainers", help="show the trainer modes registered with verl")
    trainers.set_defaults(func=_trainers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
