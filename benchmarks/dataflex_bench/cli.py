"""``python benchmarks/run.py [--quick] [--json PATH] [--cases a,b] [--reps N] [--fail-on-miss]``.

Exit status: 0 when every case ran (a missed target is printed and recorded but does not fail the run: on a shared
machine a miss can be noise); 1 when a case crashed; 2 with ``--fail-on-miss`` when a target was missed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from .components import run_components
from .discovery import run_discovery
from .fit import run_fit
from .host import run_host
from .memory import run_memory
from .results import STATUSES, Result, format_table, write_json
from .scale import run_scale
from .trl_step import run_trl

CASES = ("discovery", "components", "memory", "host", "fit", "fit-legacy", "fit-pilot", "trl", "scale")


@dataclass(frozen=True)
class Plan:
    """Repetitions and sizes of one mode; quick mode's rows are ``smoke`` (shapes too small to judge)."""

    mode: str
    reps: int
    discovery_reps: int
    host_reps: int
    host_shape: tuple[int, int, int]  # (bs, L, group size)
    unjudged: str | None


FULL = Plan("full", reps=7, discovery_reps=7, host_reps=21, host_shape=(1024, 4096, 8), unjudged=None)
QUICK = Plan("quick", reps=3, discovery_reps=2, host_reps=3, host_shape=(64, 128, 8), unjudged="smoke")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nox -s bench --", description="DataFlex benchmarks: ratios against a baseline measured in the same run."
    )
    parser.add_argument("--quick", action="store_true", help="small shapes, few repetitions: a smoke run")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated subset of {', '.join(CASES)}")
    parser.add_argument("--reps", type=int, help="timed repetitions per figure (default 7, 21 for host; quick 3)")
    parser.add_argument("--only", default="", help="components and memory: only components whose name contains this")
    parser.add_argument("--fail-on-miss", action="store_true", help="exit 2 when a target is missed")
    return parser


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def log(message: str) -> None:
    print(message, flush=True)


def run_case(name: str, fn: Callable[[], list[Result]]) -> list[Result]:
    """One case; a crash becomes an ``error`` row so the other cases still run."""
    start = time.perf_counter()
    log(f"== {name}")
    try:
        rows = fn()
    except Exception as exc:  # noqa: BLE001 - report, keep going, exit non-zero at the end
        traceback.print_exc()
        rows = [Result(name, "(case crashed)", "-", status="error", note=f"{type(exc).__name__}: {exc}")]
    log(f"== {name} done in {time.perf_counter() - start:.1f} s")
    return rows


def case_runners(plan: Plan, reps: int | None, only: str = "") -> dict[str, Callable[[], list[Result]]]:
    quick, unjudged = plan.mode == "quick", plan.unjudged
    bs, length, group_size = plan.host_shape
    common = {"unjudged": unjudged, "progress": log}
    runners: dict[str, Callable[[], list[Result]]] = {
        "discovery": lambda: run_discovery(reps=reps or plan.discovery_reps, **common),
        "components": lambda: run_components(quick=quick, reps=reps or plan.reps, only=only, **common),
        "memory": lambda: run_memory(quick=quick, only=only, **common),
        "host": lambda: run_host(bs=bs, length=length, group_size=group_size, reps=reps or plan.host_reps, **common),
        "trl": lambda: run_trl(quick=quick, **common),
        "scale": lambda: run_scale(quick=quick, reps=reps or plan.reps, **common),
    }
    for case in ("fit", "fit-legacy", "fit-pilot"):
        runners[case] = lambda case=case: run_fit(case, quick=quick, **common)
    return runners


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    plan = QUICK if args.quick else FULL
    wanted = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = sorted(set(wanted) - set(CASES))
    if unknown:
        print(f"unknown case(s) {unknown}; choose from {', '.join(CASES)}", file=sys.stderr)
        return 1
    started, load_start = dt.datetime.now(dt.timezone.utc), load_average()
    log(f"DataFlex benchmarks, {plan.mode} mode, torch {torch.__version__}, {torch.get_num_threads()} thread(s)")
    runners = case_runners(plan, args.reps, args.only)
    results: list[Result] = []
    for case in CASES:
        if case in wanted:
            results += run_case(case, runners[case])
    elapsed = (dt.datetime.now(dt.timezone.utc) - started).total_seconds()
    counts = {s: sum(r.status == s for r in results) for s in STATUSES}
    log("\n" + format_table(results))
    log(f"\n{plan.mode} run in {elapsed:.0f} s: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n))
    log(f"load average (1, 5, 15 min) at the start {load_start}, at the end {load_average()}")
    if args.json:
        meta = {
            "mode": plan.mode,
            # other processes sharing the cores move every figure: the load says how much this run shared them
            "load_average": {"start": load_start, "end": load_average()},
            "started": started.isoformat(timespec="seconds"),
            "duration_s": round(elapsed, 1),
        }
        write_json(args.json, results, meta)
        log(f"wrote {args.json}")
    if counts["error"]:
        return 1
    return 2 if args.fail_on_miss and counts["miss"] else 0
