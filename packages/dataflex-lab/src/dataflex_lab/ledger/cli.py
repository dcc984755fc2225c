"""``dataflex ledger show|plot|filter|merge``, added to dataflex-core's ``dataflex`` through ``dataflex.cli``."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable

#: Exit status when a ledger, a dataset or an output cannot be used (the message says which and why).
EXIT_LEDGER_ERROR = 2


def _show(args: argparse.Namespace) -> int:
    from .reading import load_ledger
    from .summary import format_summary, summarize

    report = summarize(load_ledger(args.ledger), top=args.top)
    sys.stdout.write(json.dumps(report, indent=2) + "\n" if args.json else format_summary(report, args.ledger))
    return 0


def _plot(args: argparse.Namespace) -> int:
    from .plot import plot_ledgers
    from .reading import LedgerError, load_ledger

    labels = args.label or ([os.path.basename(os.path.normpath(p)) for p in args.ledgers])
    if len(labels) != len(args.ledgers):
        raise LedgerError(f"--label is given {len(labels)} times for {len(args.ledgers)} ledgers; name each once")
    ledgers = [(label, load_ledger(path)) for label, path in zip(labels, args.ledgers)]
    _write(lambda: plot_ledgers(ledgers, args.output), args.output)
    return 0


def _filter(args: argparse.Namespace) -> int:
    from .filter import KeepRule, filter_dataset

    rule = KeepRule(solve_rate=args.solve_rate, min_samples=args.min_samples, keep_unseen=not args.drop_unseen)
    report = filter_dataset(
        args.ledger, args.dataset, args.output, rule, prompt_key=args.prompt_key, ledger_output=args.ledger_output
    )
    sys.stdout.write(json.dumps(report.as_dict(), indent=2) + "\n" if args.json else report.lines(args.output))
    return 0


def _merge(args: argparse.Namespace) -> int:
    from .merge import merge_ledgers

    merged = merge_ledgers(args.ledgers)
    _write(lambda: merged.export(args.output), args.output)
    print(f"wrote {args.output}: {len(args.ledgers)} ledgers of {len(merged)} prompts merged", file=sys.stderr)
    return 0


def _write(write: Callable[[], object], path: str) -> None:
    """``write()``; a path that cannot take the file is a one-line error naming it."""
    from .reading import LedgerError

    try:
        write()
    except OSError as exc:
        raise LedgerError(f"cannot write {path!r}: {exc.strerror or exc}") from None


def _band(text: str) -> tuple[float, float]:
    low, sep, high = text.partition(":")
    try:
        if not sep:
            raise ValueError
        return float(low), float(high)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LOW:HIGH (e.g. 0.05:0.95), got {text!r}") from None


def _run(handler: Callable[[argparse.Namespace], int], command: str) -> Callable[[argparse.Namespace], int]:
    """``handler`` with a refused input (core's ``ConfigError``: file, row, column, value) as one line, exit 2."""

    def run(args: argparse.Namespace) -> int:
        from dataflex_core.errors import ConfigError

        try:
            return handler(args)
        except ConfigError as exc:
            print(f"dataflex ledger {command}: {exc}", file=sys.stderr)
            return EXIT_LEDGER_ERROR

    return run


def add_ledger(subparsers: argparse._SubParsersAction, name: str = "ledger") -> argparse.ArgumentParser:
    """Add ``dataflex ledger`` to ``subparsers`` (the ``dataflex.cli`` entry point ``dataflex.ledger``)."""
    ledger = subparsers.add_parser(
        name,
        help="where a run's rollouts went, prompt by prompt; filter the next run's dataset by it",
        description="Read the per-prompt ledger of a run (a checkpoint folder, or the Parquet file "
        "session.export_ledger wrote): summarise it, plot it, filter a dataset by it, merge several.",
    )
    commands = ledger.add_subparsers(dest="ledger_command", metavar="COMMAND", required=True)
    source = "a checkpoint folder or a ledger exported to Parquet"

    show = commands.add_parser("show", help="prompts seen, solve rates, where the rollouts went",
                               description="Prompts seen; the solve-rate buckets at the run's group size (never "
                               "solved / between / always solved, by the posterior and by the last streak) with "
                               "their rollouts and zero-variance share; the solve-rate histogram; the prompts "
                               "that cost most without signal.")  # fmt: skip
    show.add_argument("ledger", metavar="LEDGER", help=source)
    show.add_argument("--json", action="store_true", help="print the report as JSON")
    show.add_argument("--top", type=int, default=10, metavar="N", help="prompts listed as costliest (default 10)")
    show.set_defaults(func=_run(_show, "show"))

    plot = commands.add_parser("plot", help="the solve-rate histogram with its waste, rollouts per prompt",
                               description="Draw a ledger (or two: before and after) to an image: rollouts by "
                               "solve rate, the zero-variance ones hatched; prompts by their rollouts.")  # fmt: skip
    plot.add_argument("ledgers", nargs="+", metavar="LEDGER", help=f"{source}; two to compare")
    plot.add_argument("-o", "--output", required=True, metavar="FILE", help="the image (.png, .pdf, .svg)")
    plot.add_argument("--label", action="append", metavar="NAME", help="a ledger's name in the legend (each once)")
    plot.set_defaults(func=_run(_plot, "plot"))

    keep = commands.add_parser("filter", help="the dataset's rows whose prompts meet a rule on the ledger",
                               description="Write the rows of a Parquet dataset whose prompts meet the rules, in "
                               "its own schema and row order, reading both in batches. The ledger must have been "
                               "recorded for that dataset (same prompt ids). Prints the rows each rule dropped.")  # fmt: skip
    keep.add_argument("ledger", metavar="LEDGER", help=source)
    keep.add_argument("--dataset", required=True, metavar="TRAIN.parquet", help="the run's train dataset")
    keep.add_argument("-o", "--output", required=True, metavar="OUT.parquet", help="the filtered dataset")
    keep.add_argument("--solve-rate", type=_band, metavar="LOW:HIGH", help="keep seen prompts whose solve rate "
                      "(successes / rollouts) is within [LOW, HIGH]; e.g. 0.05:0.95 drops the always and never "
                      "solved")  # fmt: skip
    keep.add_argument("--min-samples", type=int, default=0, metavar="N", help="keep seen prompts rolled out at "
                      "least N times")  # fmt: skip
    keep.add_argument("--drop-unseen", action="store_true", help="drop the prompts the run never rolled out "
                      "(kept by default)")  # fmt: skip
    keep.add_argument("--prompt-key", metavar="COLUMN", help="the dataset's prompt-id column (default the "
                      "ledger's prompt key; verl's index is read from extra_info.index)")  # fmt: skip
    keep.add_argument("--ledger-output", metavar="LEDGER.parquet", help="also write the kept prompts' ledger: "
                      "the next run on the filtered dataset warm-starts from it (dataflex.ledger.load)")  # fmt: skip
    keep.add_argument("--json", action="store_true", help="print the counts as JSON")
    keep.set_defaults(func=_run(_filter, "filter"))

    merge = commands.add_parser("merge", help="the ledgers of runs over one dataset as one",
                                description="Add the ledgers of runs over the same dataset, given in the order "
                                "the runs ran: counts summed, solve-rate evidence combined (the prior counted "
                                "once), the latest state from the later run.")  # fmt: skip
    merge.add_argument("ledgers", nargs="+", metavar="LEDGER", help=f"{source} (two or more)")
    merge.add_argument("-o", "--output", required=True, metavar="OUT.parquet", help="the merged ledger")
    merge.set_defaults(func=_run(_merge, "merge"))
    return ledger
