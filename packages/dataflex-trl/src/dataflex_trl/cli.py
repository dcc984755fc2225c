"""``dataflex-trl`` console script."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from .version import __version__


def _demo(args: argparse.Namespace) -> int:
    from dataflex_core import DataFlexError
    from dataflex_core.demo_report import parse_params

    from .demo import DemoSettings, run_training_demo

    try:
        scorer_params, actuator_params = parse_params(args.params)
        settings = DemoSettings(
            mechanism=args.mechanism,
            scorer=args.scorer,
            actuator=args.actuator,
            scorer_params=scorer_params,
            actuator_params=actuator_params,
            steps=args.steps,
            seed=args.seed,
            seeds=args.seeds,
            loss_type=args.loss_type,
            lr=args.lr,
            workdir=Path(args.workdir),
            json_path=Path(args.json) if args.json else None,
            plot_path=Path(args.plot) if args.plot else None,
            task=args.task,
            val_every=args.val_every,
        )
        run_training_demo(settings)
    except (ValueError, DataFlexError, RuntimeError) as exc:
        print(f"dataflex-trl demo: {exc}", file=sys.stderr)
        return 2
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``dataflex-trl`` argument parser (also rendered into the CLI reference)."""
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
    demo.add_argument("--mechanism", choices=["reweight", "select", "mix", "curriculum"], default="reweight")
    demo.add_argument("--scorer", metavar="NAME", help="scorer of the DataFlex arm (default per mechanism)")
    demo.add_argument("--actuator", metavar="NAME", help="reweighter/selector/mixer of the DataFlex arm")
    demo.add_argument("--params", metavar="JSON", help='component params, e.g. \'{"actuator": {"temperature": 0.5}}\'')
    demo.add_argument("--steps", type=int, default=30, help="training steps per arm (default 30)")
    demo.add_argument("--seed", type=int, default=0, help="seed of the model, the prompts and the sampling")
    demo.add_argument("--seeds", type=int, default=1, metavar="K", help="run K seeds and compare the arms over them")
    demo.add_argument("--loss-type", choices=list(LOSS_UNITS), default="dapo", help="TRL's loss_type (default dapo)")
    demo.add_argument("--lr", type=float, default=1e-2, help="learning rate (default 1e-2)")
    demo.add_argument("--workdir", default="dataflex_trl_demo", help="folder for TRL's output and the plot")
    demo.add_argument("--json", metavar="PATH", help="write every step's metrics here (format dataflex-demo/1)")
    demo.add_argument("--plot", metavar="PATH", help="the PNG plot (default WORKDIR/demo.png)")
    demo.add_argument(
        "--task",
        choices=["echo", "mixed"],
        help="toy task: echo, or mixed (echo prompts beside solved and unsolvable ones); default mixed for "
        "curriculum, echo otherwise",
    )
    demo.add_argument(
        "--val-every",
        type=int,
        metavar="N",
        help="evaluate on echo prompts every N steps and compare the arms on it (0: never; default 3 for "
        "curriculum, else 0)",
    )
    demo.set_defaults(handler=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    raise SystemExit(main())
