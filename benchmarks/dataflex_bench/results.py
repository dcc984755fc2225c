"""One row per measured figure, the printed table and the JSON file.

A row's status is ``pass`` / ``miss`` (its ratio against its target), ``info`` (measured for reading, not
judged), ``smoke`` (quick mode: shapes too small for a target to mean anything), ``skip`` (the case cannot run
here; the note says why) or ``error`` (the case crashed or its output was unusable).
"""

from __future__ import annotations

import json
import math
import os
import platform
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

STATUSES = ("pass", "miss", "info", "smoke", "skip", "error")


@dataclass
class Result:
    case: str
    name: str
    shape: str
    median_s: float | None = None
    baseline_s: float | None = None
    ratio: float | None = None
    target: float | None = None
    status: str = "skip"
    reps: int = 0
    note: str = ""
    #: Case-specific figures (the phases of a step, per-run ratios, ...), written to JSON as they are.
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        row = asdict(self)
        for key in ("median_s", "baseline_s", "ratio", "target"):
            if isinstance(row[key], float) and not math.isfinite(row[key]):
                row[key] = None
        return row


def measured(
    case: str, name: str, shape: str, *, ratio: float, target: float | None, reps: int,
    median_s: float | None = None, baseline_s: float | None = None, unjudged: str | None = None,
    note: str = "", extra: dict[str, Any] | None = None,
) -> Result:  # fmt: skip
    """A row with a figure: judged against ``target`` unless ``unjudged`` names its status (or there is no target)."""
    status = unjudged or ("info" if target is None else "pass" if ratio <= target else "miss")
    return Result(case, name, shape, median_s, baseline_s, ratio, target, status, reps, note, dict(extra or {}))


def skipped(case: str, name: str, shape: str, reason: str, target: float | None = None) -> Result:
    return Result(case, name, shape, target=target, status="skip", note=reason)


def machine() -> dict[str, Any]:
    """What the figures were measured on: absolute times mean nothing without it."""
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


COLUMNS = ("case", "name", "shape", "median ms", "baseline ms", "ratio", "target", "status")


def _number(value: float | None, scale: float = 1.0, digits: int = 2) -> str:
    if value is None:
        return "-"
    return "inf" if not math.isfinite(value) else f"{value * scale:.{digits}f}"


def format_table(results: list[Result]) -> str:
    """The rows as aligned text, then one line per miss, skip and error with its note."""
    rows = [
        (r.case, r.name, r.shape, _number(r.median_s, 1e3, 1), _number(r.baseline_s, 1e3, 1), _number(r.ratio),
         "-" if r.target is None else f"<= {r.target:g}", r.status)
        for r in results
    ]  # fmt: skip
    widths = [max(len(str(x)) for x in column) for column in zip(COLUMNS, *rows)]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in [COLUMNS, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    noted = [r for r in results if r.status in ("miss", "skip", "error")]
    lines += [f"  {r.status}: {r.case} {r.name} [{r.shape}]: {r.note}" for r in noted]
    return "\n".join(lines)


def write_json(path: str | Path, results: list[Result], meta: dict[str, Any]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {**meta, "machine": machine(), "results": [r.to_json() for r in results]}
    path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
