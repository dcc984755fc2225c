"""``python benchmarks/run.py [--quick] [--json PATH] ...``: run the cases, print progress and the table.

Exit status: 0 when every case ran (targets missed or not: a miss is printed
and recorded, it does not fail the run, because on a shared machine a miss
can be noise); 1 when a case crashed; 2 with ``--fail-on-miss`` when a
target was missed (for dedicated benchmark machines).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from . import allocator
from .discovery import run_discovery
from .fit import run_fit
from .fit_pilot import run_fit_pilot
from .host import run_host
from .memory import run_memory
from .pairs import PAIR_TARGET, Shape, discover_pairs, run_pairs
from .pilot import run_pilot
from .results import STATUSES, Result, format_table, notes, summary_markdown, write_json
from .scale import run_scale
from .scale_padding import run_padded_step
from .trl_step import run_trl

CASES = ("discovery", "pairs", "memory", "device", "host", "fit", "fit-legacy", "fit-pilot", "trl", "scale", "pilot")
ALLOCATORS = ("default", "fixed", "both")
#: (pair case, scaling case) measured in this process with the default allocator: pairs judged, scaling not
#: (it would measure glibc's 32 MiB boundary, see allocator.py).
DEFAULT_CASES = ("pair", "scaling_default_alloc")
#: ... and in the fixed-mmap-threshold child: pairs for comparison, scaling judged.
FIXED_CASES = ("pair_fixed_mmap", "scaling")
RUN_PY = Path(__file__).resolve().parent.parent / "run.py"


@dataclass(frozen=True)
class Plan:
    """Shapes and repetitions of one mode."""

    mode: str
    pair_shapes: tuple[Shape, ...]
    #: Smaller group count for the scaling ratio, measured on ``pair_shapes[0]``.
    scaling_groups: int
    #: Timed repetitions of the host figure.
    reps: int
    #: Timed repetitions of the discovery figure (each is two fresh interpreters importing torch).
    discovery_reps: int
    #: Timed repetitions per entry of ``pair_shapes`` (the large shape clones about 1 GB a round).
    pair_reps: tuple[int, ...]
    warmup: int
    host_bs: int
    host_length: int
    host_group_size: int
    #: Timed rounds of the host case: one ``_compute_advantage`` call's time is bimodal on a shared machine
    #: (TransferQueue's storage actor runs on the same cores), so the medians need more rounds than a pair's.
    host_reps: int = 3
    #: Timed rounds of the padded step's rows (scale case): their target, 1.1, is the tightest of the bench, and
    #: one row in two of five full runs at 7 rounds read 1.12-1.26 from a slow spell lasting most of its rounds.
    #: They run as three passes minutes apart (``timing.split_reps``), the row the median pass: a spell lasting a
    #: pair's 15 rounds in a row still moved one row in one full run of four, and in one of two passes two rows
    #: in a run of three (2026-12-06).
    padding_reps: int = 3
    #: Shapes of the peak-memory case, each in a fresh process.
    memory_shapes: tuple[Shape, ...] = ()
    #: Allocators the pairs run with when ``--allocator`` is not given.
    allocator: str = "both"
    #: Status of rows measured at shapes other than the targets' (None: judge them).
    unjudged: str | None = None
    #: Torch thread counts the pairs run with (0: torch's default), when ``--threads`` is not given.
    threads: tuple[int, ...] = (1, 0)


FULL = Plan(
    mode="full",
    pair_shapes=(Shape(4096, 8, 256), Shape(512, 16, 4096)),
    scaling_groups=2048,
    reps=7,
    discovery_reps=7,
    pair_reps=(7, 5),
    warmup=1,
    host_bs=1024,
    host_length=4096,
    host_group_size=8,
    host_reps=21,
    padding_reps=15,
    memory_shapes=(Shape(128, 8, 4096), Shape(512, 16, 8192)),
)
QUICK = Plan(
    mode="quick",
    pair_shapes=(Shape(64, 8, 32), Shape(16, 16, 128)),
    scaling_groups=32,
    reps=3,
    discovery_reps=2,
    pair_reps=(3, 3),
    warmup=1,
    host_bs=64,
    host_length=128,
    host_group_size=8,
    memory_shapes=(Shape(16, 8, 256),),
    allocator="default",
    unjudged="smoke",
    threads=(1,),
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nox -s bench --",
        description="DataFlex benchmarks: ratios of medians against a minimal baseline, measured in the same run.",
    )
    parser.add_argument("--quick", action="store_true", help="small shapes, 3 repetitions: a smoke run (< 2 min)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    parser.add_argument(
        "--cases",
        default=",".join(CASES),
        help=f"comma-separated subset of {', '.join(CASES)} (default: all)",
    )
    parser.add_argument(
        "--pairs",
        default="",
        help="only pairs whose 'scorer+reweighter' name contains one of these comma-separated substrings",
    )
    parser.add_argument(
        "--reps",
        type=int,
        help="timed repetitions per figure (default 7, or 5 on the L=4096 pair shape, 21 for the host case; 3 in quick mode)",
    )
    parser.add_argument(
        "--threads",
        type=thread_settings,
        help="comma-separated torch intra-op thread counts the pairs run with, 0 meaning torch's default "
        "(full mode: 1,0, both judged; quick mode: 1); the other cases run with the first",
    )
    parser.add_argument(
        "--allocator",
        choices=ALLOCATORS,
        help="pairs with glibc's default allocator in this process (judged), with a fixed mmap threshold in a "
        "child process (for comparison), or both (default: both; quick mode: default)",
    )
    # Internal: set in the fixed-threshold child that --allocator fixed/both starts.
    parser.add_argument("--fixed-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--fail-on-miss", action="store_true", help="exit 2 when a target is missed")
    parser.add_argument("--markdown", action="store_true", help="print the final table as Markdown")
    parser.add_argument(
        "--summarize",
        metavar="JSON",
        nargs="+",
        help="print a compact Markdown summary of results files and exit (no run); with several files (repeated "
        "runs) each figure is their median with the range",
    )
    return parser


def thread_settings(text: str) -> tuple[int, ...]:
    """``"1,0"`` -> ``(1, 0)``: thread counts, 0 for torch's default."""
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        values = ()
    if not values or any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"--threads takes thread counts >= 0 separated by commas, got {text!r}")
    return values


def resolve_threads(settings: Sequence[int], default: int) -> list[int]:
    """The distinct thread counts ``settings`` name (0: torch's ``default``), in order."""
    return list(dict.fromkeys(n or default for n in settings))


def _load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # not available on this platform
        return None


def _log(message: str) -> None:
    print(message, flush=True)


def device_case_setup(quick: bool) -> tuple[str | None, str | None, str]:
    """(device, unjudged status, reason): CUDA when present; a CPU dry run in quick mode; otherwise a skip."""
    if torch.cuda.is_available():
        return "cuda", "smoke" if quick else None, ""
    if quick:
        return "cpu", "dry-run", "no CUDA device: the GPU code path ran on the CPU (dry run, not judged)"
    return None, None, "no CUDA device on this machine; run on a GPU machine for this case"


def run_case(name: str, fn: Callable[[], list[Result]]) -> list[Result]:
    """Run one case; a crash becomes an ``error`` row so the other cases still run."""
    start = time.perf_counter()
    _log(f"== {name}")
    try:
        rows = fn()
    except Exception as exc:  # noqa: BLE001 - report, keep going, exit non-zero at the end
        traceback.print_exc()
        rows = [Result(name, "(case crashed)", "-", status="error", note=f"{type(exc).__name__}: {exc}")]
    _log(f"== {name} done in {time.perf_counter() - start:.1f} s")
    return rows


def main(argv: Sequence[str] | None = None, registry=None) -> int:
    args = build_parser().parse_args(argv)
    if args.summarize:
        payloads = [json.loads(Path(path).read_text(encoding="utf-8")) for path in args.summarize]
        print(summary_markdown(payloads))
        return 0
    threads = torch.get_num_threads()
    try:
        return _run(args, registry, default_threads=threads)
    finally:
        torch.set_num_threads(threads)  # main() may run inside another program (the harness's tests)


def _run(args: argparse.Namespace, registry, default_threads: int) -> int:
    plan = QUICK if args.quick else FULL
    if args.fixed_child:
        plan = dataclasses.replace(plan, pair_shapes=plan.pair_shapes[:1], pair_reps=plan.pair_reps[:1])
    chosen_allocator = args.allocator or plan.allocator
    reps = args.reps or plan.reps
    pair_reps = [args.reps] * len(plan.pair_shapes) if args.reps else list(plan.pair_reps)
    threads = resolve_threads(args.threads or plan.threads, default_threads)
    torch.set_num_threads(threads[0])
    wanted = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = sorted(set(wanted) - set(CASES))
    if unknown:
        print(f"unknown case(s) {unknown}; choose from {', '.join(CASES)}", file=sys.stderr)
        return 1
    started = _dt.datetime.now(_dt.timezone.utc)
    load_start = _load_average()
    _log(
        f"DataFlex benchmarks, {plan.mode} mode, {reps} timed repetitions ({'/'.join(map(str, pair_reps))} "
        f"per pair shape) after {plan.warmup} warm-up round, "
        f"torch {torch.__version__}, pairs with {' and '.join(map(str, threads))} thread(s) "
        f"(torch's default here: {default_threads})"
    )

    if registry is None and ({"pairs", "device"} & set(wanted)):
        import dataflex_core

        registry = dataflex_core.get_registry()
    pairs = discover_pairs(registry, args.pairs.split(",")) if registry is not None else []

    results: list[Result] = []
    for case in CASES:
        if case not in wanted:
            continue
        if case == "discovery":
            results += run_case(
                case,
                lambda: run_discovery(
                    reps=args.reps or plan.discovery_reps, warmup=plan.warmup, unjudged=plan.unjudged, progress=_log
                ),
            )
        elif case == "pairs" and args.fixed_child:
            results += run_case(case, lambda: _pairs_case(pairs, plan, pair_reps, threads[:1], fixed_child=True))
        elif case == "pairs":
            if chosen_allocator in ("default", "both"):
                results += run_case(case, lambda: _pairs_case(pairs, plan, pair_reps, threads))
            if chosen_allocator in ("fixed", "both"):
                results += run_case(
                    f"{case} with {allocator.describe(allocator.FIXED_ENV)}", lambda: _fixed_child(args)
                )
        elif case == "memory":
            results += run_case(
                case,
                lambda: run_memory(
                    plan.memory_shapes, only=args.pairs.split(","), unjudged=plan.unjudged, progress=_log
                ),
            )
        elif case == "device":
            results += run_case(case, lambda: _device_case(pairs, plan, pair_reps, args.quick))
        elif case == "host":
            results += run_case(
                case,
                lambda: run_host(
                    bs=plan.host_bs,
                    length=plan.host_length,
                    group_size=plan.host_group_size,
                    reps=args.reps or plan.host_reps,
                    warmup=plan.warmup,
                    unjudged=plan.unjudged,
                    progress=_log,
                ),
            )
        elif case == "fit":
            results += run_case(case, lambda: run_fit(quick=args.quick, unjudged=plan.unjudged, progress=_log))
        elif case == "fit-legacy":
            results += run_case(
                case, lambda: run_fit(quick=args.quick, unjudged=plan.unjudged, progress=_log, line="legacy")
            )
        elif case == "fit-pilot":
            results += run_case(case, lambda: run_fit_pilot(quick=args.quick, unjudged=plan.unjudged, progress=_log))
        elif case == "trl":
            results += run_case(case, lambda: run_trl(quick=args.quick, unjudged=plan.unjudged, progress=_log))
        elif case == "scale":
            results += run_case(
                case, lambda: run_scale(quick=args.quick, reps=reps, unjudged=plan.unjudged, progress=_log)
            )
            results += run_case(
                case,
                lambda: run_padded_step(
                    quick=args.quick,
                    reps=args.reps or plan.padding_reps,
                    only=args.pairs.split(","),
                    threads=threads,
                    unjudged=plan.unjudged,
                    progress=_log,
                ),
            )
        elif case == "pilot":
            results += run_case(
                case, lambda: run_pilot(quick=args.quick, reps=reps, unjudged=plan.unjudged, progress=_log)
            )

    elapsed = (_dt.datetime.now(_dt.timezone.utc) - started).total_seconds()
    _log("")
    _log(format_table(results, markdown=args.markdown))
    for line in notes(results):
        _log(f"  {line}")
    counts = {s: sum(r.status == s for r in results) for s in STATUSES}
    _log(f"\n{plan.mode} run in {elapsed:.0f} s: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n))
    _log(f"load average (1, 5, 15 min) at the start {load_start}, at the end {_load_average()}")
    if args.json:
        meta = {
            "mode": plan.mode,
            "allocator": chosen_allocator,
            "reps": reps,
            "pair_reps": pair_reps,
            "warmup": plan.warmup,
            "pair_threads": threads,
            # The machine's 1/5/15-minute load averages when the run started and ended: other processes
            # sharing the cores move every figure (README, "Reading the figures on a shared machine").
            "load_average": {"start": load_start, "end": _load_average()},
            "started": started.isoformat(timespec="seconds"),
            "duration_s": round(elapsed, 1),
        }
        write_json(args.json, results, meta)
        _log(f"wrote {args.json}")
    if counts["error"]:
        return 1
    if args.fail_on_miss and counts["miss"]:
        return 2
    return 0


def _no_pairs(case: str) -> list[Result]:
    note = "no scorer + reweighter pair installed (pip install the plugin packages under plugins/)"
    _log(f"  SKIP: {note}")
    return [Result(case, "(none)", "-", status="skip", note=note)]


def _pairs_case(
    pairs, plan: Plan, reps: list[int], threads: Sequence[int] = (1,), fixed_child: bool = False
) -> list[Result]:
    """Every pair on every shape at each thread count, in this process, after :func:`allocator.settle`.

    The scaling figure is measured at the first thread count only. Rows at another
    thread count than 1 say it in their shape (``... @ 2 threads``).
    """
    case, scaling_case = FIXED_CASES if fixed_child else DEFAULT_CASES
    if not pairs:
        return _no_pairs(case)
    setting = allocator.describe()
    if not fixed_child and not allocator.is_default():
        _log(f"  note: {setting} is set in this environment, so these rows do not measure glibc's default")
    _log(f"  {len(pairs)} pairs, allocator: {setting}, after a run of large allocations")
    allocator.settle()
    rows: list[Result] = []
    for round_index, count in enumerate(threads):
        torch.set_num_threads(count)
        for index, shape in enumerate(plan.pair_shapes):
            scaling = round_index == 0 and index == 0
            _log(
                f" shape {shape.label}, {count} thread(s)"
                + (f" (+ scaling vs {plan.scaling_groups} groups)" if scaling else "")
            )
            shape_rows = run_pairs(
                pairs,
                shape,
                reps=reps[index],
                warmup=plan.warmup,
                case=case,
                scaling_case=scaling_case,
                scaling_groups=plan.scaling_groups if scaling else None,
                unjudged=plan.unjudged or ("info" if fixed_child else None),
                scaling_unjudged=plan.unjudged or (None if fixed_child else "info"),
                progress=_log,
            )
            for row in shape_rows:
                row.extra["threads"] = count
                if count != 1 and row.case == case:
                    row.shape += f" @ {count} threads"
            rows += shape_rows
    torch.set_num_threads(threads[0])
    for row in rows:
        row.extra["allocator"] = setting
    # Group the table by case: every pair row first, then every scaling row.
    return sorted(rows, key=lambda r: r.case != case)


def _fixed_child(args: argparse.Namespace) -> list[Result]:
    """The pairs on the first shape (and scaling) in a child process with glibc's mmap threshold fixed."""
    with tempfile.TemporaryDirectory(prefix="dataflex-bench-") as tmp:
        out = Path(tmp) / "fixed.json"
        command = [sys.executable, str(RUN_PY), "--fixed-child", "--cases", "pairs", "--json", str(out)]
        command += ["--pairs", args.pairs] if args.pairs else []
        command += ["--reps", str(args.reps)] if args.reps else []
        command += ["--threads", str(torch.get_num_threads())]  # the first setting: what the scaling rows use
        command += ["--quick"] if args.quick else []
        proc = subprocess.run(command, env={**os.environ, **allocator.FIXED_ENV}, check=False)
        if not out.exists():
            raise RuntimeError(f"the fixed-threshold child wrote no results (exit {proc.returncode})")
        payload = json.loads(out.read_text(encoding="utf-8"))
    fields = {f.name for f in dataclasses.fields(Result)}
    return [Result(**{k: v for k, v in row.items() if k in fields}) for row in payload["results"]]


def _device_case(pairs, plan: Plan, reps: list[int], quick: bool) -> list[Result]:
    device, unjudged, reason = device_case_setup(quick)
    if device is None:
        _log(f"  SKIP: {reason}")
        return [
            Result("pair_device", "(all pairs)", "-", device="cuda", status="skip", target=PAIR_TARGET, note=reason)
        ]
    if not pairs:
        return _no_pairs("pair_device")
    if reason:
        _log(f"  {reason}")
    rows: list[Result] = []
    for index, shape in enumerate(plan.pair_shapes):
        _log(f" shape {shape.label} on {device}")
        rows += run_pairs(
            pairs,
            shape,
            reps=reps[index],
            warmup=plan.warmup,
            device=device,
            case="pair_device",
            unjudged=unjudged,
            progress=_log,
        )
    return rows
