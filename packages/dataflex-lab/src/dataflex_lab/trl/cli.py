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


def _evidence(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from .evidence import QUICK, Campaign, report_campaign, run_campaign

    def campaign() -> object:
        options: dict = dict(QUICK) if args.quick else {}
        for key in ("families", "recipes", "seeds", "steps", "val_every", "target", "jobs"):
            value = getattr(args, key)
            if value is not None:
                options[key] = value
        if args.task_params:
            try:
                options["task_params"] = json.loads(args.task_params)
            except json.JSONDecodeError as exc:
                raise ValueError(f"--task-params is not valid JSON ({exc.msg}): {args.task_params!r}") from None
        planned = Campaign(**options, workdir=Path(args.workdir))
        return report_campaign(planned) if args.report_only else run_campaign(planned)

    return run_command("dataflex-trl", "trl", campaign)


def add_evidence(subparsers: argparse._SubParsersAction, name: str = "evidence") -> argparse.ArgumentParser:
    """Add ``dataflex-trl evidence`` (the ``dataflex.cli`` entry point ``dataflex-trl.evidence``)."""
    from ..cli import _comma_list as comma_list

    evidence = subparsers.add_parser(
        name,
        help="the recipes against uniform sampling on the task families, K seeds, compared at equal rollouts",
        description="Train every recipe (uniform, curricula, select, reweight, filter) on each task family for K seeds with "
        "TRL's GRPOTrainer on the CPU, then compare them with uniform at equal rollouts: AUC, final value and "
        "rollouts to --target on the held-out split, paired by seed, Holm across recipes (docs/evidence.md).",
    )
    evidence.add_argument("--families", type=comma_list(str), metavar="F,F", help="task families (default: all)")
    evidence.add_argument("--recipes", type=comma_list(str), metavar="R,R", help="recipes (default: all)")
    evidence.add_argument("--seeds", type=int, metavar="K", help="seeds per recipe (default 8)")
    evidence.add_argument("--steps", type=int, help="training steps per run (default 30)")
    evidence.add_argument("--val-every", type=int, metavar="N", help="held-out evaluation every N steps (default 5)")
    evidence.add_argument(
        "--target",
        type=float,
        help="held-out level for rollouts-to-target, every family (default: repeat 0.15, count 0.3)",
    )
    evidence.add_argument("--jobs", type=int, help="runs side by side, one thread each (default 1)")
    evidence.add_argument(
        "--task-params", metavar="JSON", help='per family, e.g. \'{"repeat": {"difficulty": [1, 4]}}\''
    )
    evidence.add_argument(
        "--report-only",
        action="store_true",
        help="train nothing: the tables and plots again from the workdir's <family>.runs.json",
    )
    evidence.add_argument("--quick", action="store_true", help="a smoke test: 1 family, 3 recipes, 2 seeds, 4 steps")
    evidence.add_argument(
        "--workdir", default="dataflex_evidence", help="runs, tables, plots (default ./dataflex_evidence)"
    )
    evidence.set_defaults(func=_evidence)
    return evidence
