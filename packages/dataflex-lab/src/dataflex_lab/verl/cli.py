"""``dataflex-verl demo`` and ``dataflex-verl demo-step``, added to the host's command through ``dataflex.cli``.

Building the parsers imports no verl, so ``dataflex-verl --help`` and the CLI
reference work where verl is not installed.
"""

from __future__ import annotations

import argparse
import os

from ..demo_report import add_demo_arguments, demo_options, run_command

#: verl's actor ``loss_agg_mode`` values the demos offer.
LOSS_AGG_MODES = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]


def _demo(args: argparse.Namespace) -> int:
    from .training_demo import DemoSettings, run_training_demo

    return run_command(
        "dataflex-verl",
        "verl",
        lambda: run_training_demo(
            DemoSettings(**demo_options(args), loss_agg_mode=args.loss_agg_mode, trainer=args.trainer)
        ),
    )


def _demo_step(args: argparse.Namespace) -> int:
    # TransferQueue warns once per request on small machines (thread count); keep the demo's output readable
    os.environ.setdefault("TQ_LOGGING_LEVEL", "ERROR")
    from .demo_step import run_demo

    rows = run_demo(
        num_prompts=args.prompts,
        n=args.n,
        max_response_len=args.max_response_len,
        loss_agg_mode=args.loss_agg_mode,
        seed=args.seed,
    )
    return 0 if rows else 1


def add_demo(subparsers: argparse._SubParsersAction, name: str = "demo") -> argparse.ArgumentParser:
    """Add ``dataflex-verl demo`` (the ``dataflex.cli`` entry point ``dataflex-verl.demo``)."""
    demo = subparsers.add_parser(
        name,
        help="train with verl's own GRPO fit loop on the CPU (tiny model, toy task): sync against dataflex_sync",
        description=(
            "Train both arms (verl's sync trainer and dataflex_sync) with verl's own entry point on the CPU: a tiny "
            "random Qwen2 learning a toy echo task, or a task family (--task repeat|count) validated on its held-out "
            "split by verl's own validation. Prints one line per step, a summary table, where each arm's rollouts "
            "went, and writes a plot; a toy run shows the mechanics and a direction, not a benchmark result."
        ),
    )
    add_demo_arguments(demo, workdir="dataflex_demo")
    demo.add_argument(
        "--loss-agg-mode", default="token-mean", choices=LOSS_AGG_MODES, help="verl's actor loss_agg_mode"
    )
    demo.add_argument(
        "--trainer",
        default="v1",
        choices=["v1", "legacy", "one-step-off"],
        help="verl's trainer line: v1 (sync against dataflex_sync), legacy (RayPPOTrainer, trainer.use_v1=false) or "
        "one-step-off (verl's OneStepOffRayTrainer, with the CPU weight sync); the last two without and with the "
        "dataflex: block",
    )
    demo.set_defaults(func=_demo)
    return demo


def add_demo_step(subparsers: argparse._SubParsersAction, name: str = "demo-step") -> argparse.ArgumentParser:
    """Add ``dataflex-verl demo-step`` (the ``dataflex.cli`` entry point ``dataflex-verl.demo-step``)."""
    step = subparsers.add_parser(
        name,
        help="one call of verl's real _compute_advantage on a synthetic GRPO batch under a few scorer/reweighter pairs",
    )
    step.add_argument("--prompts", type=int, default=16, help="prompts (GRPO groups) in the batch (default 16)")
    step.add_argument("--n", type=int, default=8, help="responses per prompt (default 8)")
    step.add_argument("--max-response-len", type=int, default=64, help="longest response in tokens (default 64)")
    step.add_argument(
        "--loss-agg-mode", default="token-mean", choices=LOSS_AGG_MODES, help="verl's actor loss_agg_mode"
    )
    step.add_argument("--seed", type=int, default=0)
    step.set_defaults(func=_demo_step)
    return step
