"""``dataflex compare``, added to dataflex-core's ``dataflex`` command through the entry-point group ``dataflex.cli``."""

from __future__ import annotations

import argparse
import json
import sys

#: Exit status of ``dataflex compare`` when the runs cannot be read or compared.
EXIT_COMPARE_ERROR = 2


def _compare(args: argparse.Namespace) -> int:
    from dataflex_core.atomic_write import write_text_atomic

    from .compare import CompareError, compare_runs, read_runs
    from .compare.cost_axes import axes_markdown, ratio_summary, reach_on_axes
    from .compare.cost_model import from_options

    try:
        if args.plot:
            from .compare.plot import require_matplotlib

            require_matplotlib()
        runs = read_runs(args.runs, name_from=args.name_from)
        if args.list_metrics:
            print(_metric_listing(runs))
            return 0
        cost_model = from_options(args.seconds_per_rollout, args.seconds_per_call, args.seconds_per_trained_rollout)
        if args.cost_axes and args.target is None:
            raise CompareError("--cost-axes reads the time to --target on each axis: give --target LEVEL")
        report = compare_runs(
            runs,
            baseline=args.baseline,
            metrics=args.metrics,
            window=args.window,
            max_step=args.max_step,
            arms=args.arms,
            seeds=args.seeds,
            test=args.test,
            pairing=args.pairing,
            alpha=args.alpha,
            n_boot=args.bootstrap,
            rng_seed=args.rng_seed,
            x=args.x,
            target=args.target,
            cost_model=cost_model,
        )
        document = report.as_dict()
        tables = []
        if args.cost_axes:  # the evidence campaign's path (dataflex_lab.compare.cost_axes)
            document["cost_axes"] = {}
            for metric in report.metrics:
                results = reach_on_axes(runs, metric=metric.metric, target=args.target, cost_model=cost_model,
                                        **_same_reading(args, report.baseline))  # fmt: skip
                tables.append(axes_markdown(results, cost_model))
                document["cost_axes"][metric.metric] = {arm: ratio_summary(results, arm) for arm in report.arms[1:]}
        if args.json == "-":
            print(json.dumps(document, indent=2))
        else:
            sys.stdout.write(report.markdown() + "".join("\n" + table for table in tables))
        if args.json not in (None, "-"):
            _write(lambda path: write_text_atomic(path, json.dumps(document, indent=2) + "\n"), args.json)
        if args.plot:
            _write(report.plot, args.plot)
    except CompareError as exc:
        print(f"dataflex compare: {exc}", file=sys.stderr)
        return EXIT_COMPARE_ERROR
    return 0


def _same_reading(args: argparse.Namespace, baseline: str) -> dict:
    """The options of ``compare_runs`` that ``--cost-axes`` reads every axis with, as the main table's."""
    return {"baseline": baseline, "arms": args.arms, "seeds": args.seeds, "max_step": args.max_step,
            "window": args.window, "test": args.test, "pairing": args.pairing, "alpha": args.alpha,
            "n_boot": args.bootstrap, "rng_seed": args.rng_seed}  # fmt: skip


def _write(write, path: str) -> None:
    """``write(path)`` then a note; a path that cannot take the file (a directory, a device, a missing folder, a
    full or read-only disk) is a :class:`~dataflex_lab.compare.CompareError` naming it, one line and exit 2."""
    from dataflex_core.atomic_write import UnwritableTargetError

    from .compare import CompareError

    try:
        write(path)
    except UnwritableTargetError as exc:
        raise CompareError(str(exc)) from None
    except OSError as exc:
        raise CompareError(f"cannot write {path!r}: {exc.strerror or exc}") from None
    print(f"wrote {path}", file=sys.stderr)


def _metric_listing(runs) -> str:
    counts: dict[str, int] = {}
    for run in runs:
        for name in run.metric_names():
            counts[name] = counts.get(name, 0) + 1
    lines = [
        f"{name}" + ("" if n == len(runs) else f"  (only {n} of {len(runs)} runs)")
        for name, n in sorted(counts.items())
    ]
    return "\n".join(lines) if lines else "no numeric metrics in these runs"


def _comma_list(kind):
    def parse(text: str) -> list:
        try:
            return [kind(part) for part in text.split(",") if part.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}") from None

    return parse


def add_compare(subparsers: argparse._SubParsersAction, name: str = "compare") -> argparse.ArgumentParser:
    """Add ``dataflex compare`` to ``subparsers`` (the ``dataflex.cli`` entry point ``dataflex.compare``)."""
    from .compare.axis import AXES
    from .compare.stats import N_BOOTSTRAP, RNG_SEED

    compare = subparsers.add_parser(
        name,
        help="does an arm beat the baseline? mean, 95%% CI and p-value over seeds, per metric",
        description="Compare training runs over seeds: per arm and metric, the mean of the final window and the "
        "area under the curve with bootstrap intervals, and the difference to the baseline with a p-value "
        "(paired by seed when the arms share their seeds). Prints a Markdown table.",
    )
    compare.add_argument("runs", nargs="+", metavar="RUN", help="a demo's --json file (names its runs), or one "
                         "run's log as ARM@SEED=PATH: verl's file-logger .jsonl, a trainer_state.json or the output "
                         "directory holding it, or a TensorBoard event directory")  # fmt: skip
    compare.add_argument("--baseline", metavar="ARM", help="the arm the others are compared with; default the first")
    compare.add_argument("--metric", dest="metrics", action="extend", nargs="+", metavar="M", help="metric(s) to "
                         "compare; default the reward (verl's critic/score/mean, TRL's reward)")  # fmt: skip
    compare.add_argument("--x", choices=list(AXES), default="step", help="the axis: step (default), or the compute "
                         "spent, rollouts / tokens (the dataflex/compute/*_total counters) / seconds / "
                         "optimizer_steps / modeled (seconds under the --seconds-per-* cost model): the area and "
                         "final are then taken up to the budget every run reached (equal compute)")  # fmt: skip
    compare.add_argument("--target", type=float, metavar="LEVEL", help="also the compute (on --x) each arm needed "
                         "to reach LEVEL of the metric, and its ratio to the baseline's with a bootstrap CI")  # fmt: skip
    compare.add_argument("--cost-axes", action="store_true", help="with --target: also the time to LEVEL on each "
                         "cost axis, rollouts, optimizer steps and (with the cost model) modeled seconds, each "
                         "verdict naming its axis")  # fmt: skip
    compare.add_argument("--seconds-per-rollout", type=float, metavar="S", help="cost model: seconds per rollout "
                         "generated (all three --seconds-per-* or none; docs/evidence.md#cost-model)")  # fmt: skip
    compare.add_argument("--seconds-per-call", type=float, metavar="S", help="cost model: seconds per generation "
                         "call in sequence (a refill round, a pilot stage)")  # fmt: skip
    compare.add_argument("--seconds-per-trained-rollout", type=float, metavar="S", help="cost model: seconds per "
                         "rollout trained (the update)")  # fmt: skip
    compare.add_argument("--window", type=int, metavar="K", help="final window: the last K logged points "
                         "(default 10, or all points of a shorter run)")  # fmt: skip
    compare.add_argument("--max-step", type=int, metavar="N", help="ignore steps after N (runs of unequal length)")
    compare.add_argument("--arms", type=_comma_list(str), metavar="A,B", help="compare only these arms")
    compare.add_argument("--seeds", type=_comma_list(int), metavar="S,S", help="compare only these seeds")
    compare.add_argument("--test", choices=["permutation", "t"], default="permutation", help="permutation (exact "
                         "or Monte-Carlo, default) or t (paired t / Welch, assumes normal seeds)")  # fmt: skip
    compare.add_argument("--unpaired", dest="pairing", action="store_const", const="unpaired", default="auto",
                         help="do not pair by seed, even where the arms share their seeds")  # fmt: skip
    compare.add_argument("--alpha", type=float, default=0.05, help="verdict threshold on the Holm-adjusted p "
                         "(default 0.05)")  # fmt: skip
    compare.add_argument("--bootstrap", type=int, default=N_BOOTSTRAP, metavar="N", help="bootstrap resamples "
                         f"(default {N_BOOTSTRAP})")  # fmt: skip
    compare.add_argument("--rng-seed", type=int, default=RNG_SEED, metavar="S", help="seed of the resampling, so "
                         f"the report is reproducible (default {RNG_SEED})")  # fmt: skip
    compare.add_argument("--name-from", metavar="REGEX", help="name single-run logs from their path with the "
                         "groups (?P<arm>...) and (?P<seed>...), e.g. 'runs/(?P<arm>[^/]+)/seed(?P<seed>\\d+)'")  # fmt: skip
    compare.add_argument("--json", metavar="PATH", help="also write the report as JSON ('-': print JSON, no table)")
    compare.add_argument("--plot", metavar="PATH", help="write the curves with bands (.png/.pdf/.svg)")
    compare.add_argument("--list-metrics", action="store_true", help="print the metrics the runs log, then exit")
    compare.set_defaults(func=_compare)
    return compare
