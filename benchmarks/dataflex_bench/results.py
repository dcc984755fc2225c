"""One row per measured figure, the printed table and the JSON file.

A row's status is ``pass`` / ``miss`` (ratio against its target), ``skip``
(the case cannot run here, with the reason), ``smoke`` (quick mode: shapes
too small for the target to mean anything), ``dry-run`` (the GPU code path
ran on the CPU), ``info`` (measured for comparison, not judged: the pairs
with a fixed mmap threshold) or ``error`` (the case crashed or its output was
unusable).
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

MIB_BYTES = 1 << 20
STATUSES = ("pass", "miss", "skip", "smoke", "dry-run", "info", "error")
#: Statuses of rows that measured something but are not held to their target.
UNJUDGED = ("smoke", "dry-run", "info")


@dataclass
class Result:
    case: str
    name: str
    shape: str
    device: str = "cpu"
    median_s: float | None = None
    baseline_s: float | None = None
    ratio: float | None = None
    target: float | None = None
    status: str = "skip"
    reps: int = 0
    note: str = ""
    #: Case-specific figures (phase split, group counts, ...), copied to JSON as-is.
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool | None:
        """True/False for a judged row; None for skipped, unjudged and errored rows."""
        return {"pass": True, "miss": False}.get(self.status)

    def to_json(self) -> dict[str, Any]:
        row = asdict(self)
        row["passed"] = self.passed
        for key in ("median_s", "baseline_s", "ratio"):
            if isinstance(row[key], float) and not math.isfinite(row[key]):
                row[key] = None
        return row


def judge(ratio: float, target: float) -> str:
    """``pass`` when the ratio is at or under the target."""
    return "pass" if ratio <= target else "miss"


def measured(
    case: str,
    name: str,
    shape: str,
    *,
    median_s: float,
    baseline_s: float,
    ratio: float,
    target: float,
    reps: int,
    device: str = "cpu",
    unjudged: str | None = None,
    note: str = "",
    extra: dict[str, Any] | None = None,
) -> Result:
    return Result(
        case=case,
        name=name,
        shape=shape,
        device=device,
        median_s=median_s,
        baseline_s=baseline_s,
        ratio=ratio,
        target=target,
        status=unjudged or judge(ratio, target),
        reps=reps,
        note=note,
        extra=dict(extra or {}),
    )


def machine() -> dict[str, Any]:
    """What the figures were measured on; absolute times mean nothing without it."""
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": None,
        # glibc allocator setting the run used (benchmarks/run.py fixes it on Linux).
        "malloc_mmap_threshold": os.environ.get("MALLOC_MMAP_THRESHOLD_"),
    }
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    info["processor"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    if torch.cuda.is_available():
        info["cuda"] = torch.cuda.get_device_name(0)
    return info


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.1f}"


def _num(value: float | None, digits: int = 2) -> str:
    if value is None:
        return "-"
    return "inf" if not math.isfinite(value) else f"{value:.{digits}f}"


COLUMNS = ("case", "name", "shape", "device", "median ms", "baseline ms", "ratio", "target", "status")


def table_rows(results: list[Result]) -> list[tuple[str, ...]]:
    rows = []
    for r in results:
        target = "-" if r.target is None else f"<= {r.target:g}"
        rows.append(
            (r.case, r.name, r.shape, r.device, _ms(r.median_s), _ms(r.baseline_s), _num(r.ratio), target, r.status)
        )
    return rows


def format_table(results: list[Result], markdown: bool = False) -> str:
    """The results as aligned text, or as a Markdown table for the README."""
    rows = table_rows(results)
    if markdown:
        lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "|".join("---" for _ in COLUMNS) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join(lines)
    widths = [max(len(str(x)) for x in col) for col in zip(COLUMNS, *rows)]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in [COLUMNS, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def notes(results: list[Result]) -> list[str]:
    """One line per miss, skip and error, with its reason."""
    return [
        f"{r.status}: {r.case} {r.name} [{r.shape}]: {r.note}" for r in results if r.status in ("miss", "skip", "error")
    ]


def write_json(path: str | Path, results: list[Result], meta: dict[str, Any]) -> None:
    payload = {**meta, "machine": machine(), "results": [r.to_json() for r in results]}
    path = Path(path)
    if path.parent and not path.parent.exists():
        path.parent.mkdir(parents=True)
    path.write_text(json.dumps(payload, indent=2, sort_keys=False) + "\n", encoding="utf-8")


#: Pair-table columns: (case, header prefix), in order; every shape of a case gets a column.
SUMMARY_PAIR_CASES = (
    ("pair", ""),
    ("pair_fixed_mmap", "fixed mmap threshold "),
    ("scaling", "scaling (fixed mmap threshold) "),
    ("scaling_default_alloc", "scaling (default allocator) "),
)


def _spread(values: list[float]) -> str:
    """One figure, or the median of several with their range."""
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def _cell(rows: list[dict[str, Any] | None]) -> str:
    """A (case, name, shape) figure over the runs: the ratio (median and range of several), misses marked."""
    present = [r for r in rows if r is not None]
    if not present:
        return "-"
    ratios = [r["ratio"] for r in present if r["ratio"] is not None]
    if not ratios:
        return present[0]["status"]
    bad = [r["status"] for r in present if r["status"] not in ("pass", "info", "smoke", "dry-run")]
    if not bad:
        mark = ""
    elif len(present) == 1:
        mark = f" **{bad[0]}**"
    else:
        mark = f" **{len(bad)}/{len(present)} {'/'.join(sorted(set(bad)))}**"
    return _spread(ratios) + mark


def summary_markdown(payloads: dict[str, Any] | list[dict[str, Any]]) -> str:
    """A compact Markdown summary of one JSON result file, or of several runs of the same cases.

    One line per pair with a column per (case, shape) of the pair and scaling
    cases; the memory case as peak / fields with the MiB; the other cases one
    row each; skipped pairs listed once with the reason's first clause. With
    several runs every figure is the median of the runs with the range in
    brackets, and a miss is marked with how many runs missed.
    """
    if isinstance(payloads, dict):
        payloads = [payloads]
    runs = [{(r["case"], r["name"], r["shape"]): r for r in p["results"]} for p in payloads]
    rows = list({key: row for run in runs for key, row in run.items()}.values())

    def over_runs(key: tuple[str, str, str]) -> list[dict[str, Any] | None]:
        return [run.get(key) for run in runs]

    columns = [
        (case, shape, (prefix if case.startswith("scaling") else prefix + shape).strip())
        for case, prefix in SUMMARY_PAIR_CASES
        for shape in dict.fromkeys(r["shape"] for r in rows if r["case"] == case and r["shape"] != "-")
    ]
    names = list(dict.fromkeys(r["name"] for r in rows if r["case"] in ("pair", "pair_fixed_mmap")))
    lines: list[str] = []
    if len(runs) > 1:
        lines += [f"Median of {len(runs)} runs (range in brackets).", ""]
    for number, payload in enumerate(payloads, 1):
        load = payload.get("load_average") or {}
        if load.get("start") and load.get("end"):
            lines.append(
                f"- run {number}: started {payload.get('started', '?')}, {payload.get('duration_s', '?')} s, "
                f"1-minute load average {load['start'][0]:g} at the start, {load['end'][0]:g} at the end"
            )
    if lines and lines[-1].startswith("- run"):
        lines.append("")
    skipped = []
    if columns:
        lines += ["| pair | " + " | ".join(c[2] for c in columns) + " |", "|---|" + "---|" * len(columns)]
    for name in names:
        cells = [over_runs((case, name, shape)) for case, shape, _ in columns]
        if all(r is None or r["status"] == "skip" for runs_of_cell in cells for r in runs_of_cell):
            first = next(r for runs_of_cell in cells for r in runs_of_cell if r is not None)
            skipped.append((name, first["note"]))
            continue
        lines.append(f"| {name} | " + " | ".join(_cell(c) for c in cells) + " |")
    memory = [r for r in rows if r["case"] == "memory" and r["ratio"] is not None]
    if memory:
        shapes = list(dict.fromkeys(r["shape"] for r in memory))
        lines += [
            "",
            "| pair: peak extra memory / bytes of the fields read | " + " | ".join(shapes) + " |",
            "|---|" + "---|" * len(shapes),
        ]
        for name in dict.fromkeys(r["name"] for r in memory):
            cells = []
            for shape in shapes:
                found = over_runs(("memory", name, shape))
                measured_runs = [r for r in found if r is not None and r["ratio"] is not None]
                if not measured_runs:
                    cells.append(_cell(found))
                    continue
                peak = statistics.median(r["extra"]["peak_bytes"] for r in measured_runs) / MIB_BYTES
                fields = measured_runs[0]["extra"]["field_bytes"] / MIB_BYTES
                cells.append(f"{_cell(found)} ({peak:.0f} / {fields:.0f} MiB)")
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    others = [r for r in rows if r["case"] not in {c for c, _ in SUMMARY_PAIR_CASES} | {"memory"}]
    others += [r for r in rows if r["case"] == "memory" and r["status"] == "error"]
    if others:
        lines += [
            "",
            "| case | name | shape | median ms | baseline ms | ratio | target | status |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in others:
            found = [x for x in over_runs((r["case"], r["name"], r["shape"])) if x is not None]
            ms = [x["median_s"] for x in found if x["median_s"] is not None]
            base = [x["baseline_s"] for x in found if x["baseline_s"] is not None]
            ms_text = "-" if not ms else f"{statistics.median(ms) * 1e3:.0f}"
            base_text = "-" if not base else f"{statistics.median(base) * 1e3:.0f}"
            ratios = [x["ratio"] for x in found if x["ratio"] is not None]
            ratio = "-" if not ratios else _spread(ratios)
            target = "-" if r["target"] is None else f"<= {r['target']:g}"
            status = "/".join(dict.fromkeys(x["status"] for x in found))
            lines.append(
                f"| {r['case']} | {r['name']} | {r['shape']} | {ms_text} | {base_text} | {ratio} | {target} | {status} |"
            )
    if skipped:
        lines += ["", "Skipped pairs (the reweighter rejects the scorer's scores):"]
        lines += [f"- {name}: {note.split(': ', 1)[-1].split(';')[0]}" for name, note in skipped]
    return "\n".join(lines)
