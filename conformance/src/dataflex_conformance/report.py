"""The certificate: a JSON report and the summary table printed on stdout.

The report names what was certified (package, version, component, params),
with what (dataflex-core and torch versions) and where (the devices each
component passed on), so an operator can trust a plugin they did not
write without rerunning the suite.
"""

from __future__ import annotations

import json
import platform
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from dataflex_core import __version__ as core_version

from .runner import BLOCKED, EXPECTED_FAILURE, FAILED, OK_STATUSES, PASSED, CheckResult
from .subjects import Subject
from .version import __version__

REPORT_FORMAT = 1


@dataclass
class PackageEntry:
    """A distribution asked for (or found), with the problems that stop it from being certified."""

    name: str
    version: str | None = None
    components: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@dataclass
class Report:
    device_request: str
    devices: list[str]
    results: list[CheckResult]
    subjects: list[Subject]
    packages: list[PackageEntry] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    expected_failures: dict[str, str] = field(default_factory=dict)
    #: Scorer/actuator pairs of a matching granularity left out because of ``score_range``.
    unpaired: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every check passed (or failed as declared) and nothing else went wrong."""
        return (
            not self.errors
            and not any(p.errors for p in self.packages)
            and bool(self.devices)
            and all(r.status in OK_STATUSES for r in self.results)
        )

    def components(self) -> list[dict[str, Any]]:
        by_component: dict[str, list[CheckResult]] = defaultdict(list)
        for result in self.results:
            by_component[result.component].append(result)
        seen: dict[str, Subject] = {}
        for subject in self.subjects:
            seen.setdefault(subject.component_id, subject)
        rows = []
        for component_id, subject in seen.items():
            results = by_component.get(component_id, [])
            certified = [
                d for d in self.devices if results and all(r.status in OK_STATUSES for r in results if r.device == d)
            ]
            counts = Counter(r.status for r in results)
            rows.append(
                {
                    "name": subject.name,
                    "id": component_id,
                    "kind": subject.kind,
                    "package": subject.dist,
                    "version": subject.version,
                    "params": {k: _jsonable(v) for k, v in subject.params.items()},
                    "description": subject.describe(),
                    "certified_devices": certified,
                    "status": "certified" if certified == self.devices and self.devices else "failed",
                    "counts": {s: counts.get(s, 0) for s in (PASSED, FAILED, EXPECTED_FAILURE, BLOCKED)},
                    "checks": [r.to_json() for r in results],
                }
            )
        return rows

    def to_json(self) -> dict[str, Any]:
        counts = Counter(r.status for r in self.results)
        return {
            "format": REPORT_FORMAT,
            "tool": {"name": "dataflex-conformance", "version": __version__},
            "dataflex_core": core_version,
            "torch": torch.__version__,
            "torch_cuda": torch.version.cuda,
            "python": platform.python_version(),
            "platform": platform.platform(),
            "device_request": self.device_request,
            "devices": list(self.devices),
            "ok": self.ok,
            "errors": list(self.errors),
            "expected_failures": dict(self.expected_failures),
            "unpaired": list(self.unpaired),
            "packages": [
                {"name": p.name, "version": p.version, "components": p.components, "errors": p.errors}
                for p in self.packages
            ],
            "summary": {s: counts.get(s, 0) for s in (PASSED, FAILED, EXPECTED_FAILURE, BLOCKED)}
            | {"total": len(self.results)},
            "components": self.components(),
        }

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=2, sort_keys=False) + "\n")
        return path


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except TypeError:
        return repr(value)


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def summary_lines(report: Report, max_failures: int = 3) -> list[str]:
    """The human-readable summary: one row per component, then the first failures of each check."""
    data = report.to_json()
    lines = [
        f"dataflex-conformance {__version__}  dataflex-core {data['dataflex_core']}  torch {data['torch']}  "
        f"devices: {', '.join(report.devices) or 'none'} (--device {report.device_request})"
    ]
    header = ("component", "kind", "package", "version", "passed", "failed", "xfail", "blocked", "certified on")
    rows = [header]
    for comp in data["components"]:
        c = comp["counts"]
        rows.append(
            (
                comp["id"],
                comp["kind"],
                comp["package"] or "-",
                comp["version"] or "-",
                str(c[PASSED]),
                str(c[FAILED]),
                str(c[EXPECTED_FAILURE]),
                str(c[BLOCKED]),
                ", ".join(comp["certified_devices"]) or "NOT CERTIFIED",
            )
        )
    if len(rows) > 1:
        lines += _table(rows)
    else:
        lines.append("no components were checked")
    for error in report.errors + [f"{p.name}: {e}" for p in report.packages for e in p.errors]:
        lines.append(f"ERROR {error}")
    groups: dict[tuple[str, str], list[CheckResult]] = defaultdict(list)
    for result in report.results:
        if result.status == FAILED:
            groups[(result.subject, result.check)].append(result)
    if groups:
        lines.append("")
        lines.append("failures (first of each check):")
        for (subject, check), results in list(groups.items()):
            first = results[0]
            more = f" (+{len(results) - 1} more cases)" if len(results) > 1 else ""
            lines.append(f"  {subject}-{check}[{first.device}-{first.case}]{more}: {first.message}")
    if report.unpaired:
        lines.append("")
        lines.append(f"not paired ({len(report.unpaired)}; score ranges do not fit):")
        lines += [f"  {line}" for line in report.unpaired]
    xfails = [r for r in report.results if r.status == EXPECTED_FAILURE]
    if xfails:
        reasons = Counter((r.xfail_key, r.reason) for r in xfails)
        lines.append("")
        lines.append("expected failures (declared by the caller):")
        for (key, reason), n in reasons.items():
            lines.append(f"  {key}: {n} check(s) — {reason}")
    total = Counter(r.status for r in report.results)
    lines.append("")
    lines.append(
        f"{'CERTIFIED' if report.ok else 'FAILED'}: {total.get(PASSED, 0)} passed, {total.get(FAILED, 0)} failed, "
        f"{total.get(EXPECTED_FAILURE, 0)} expected failures, {total.get(BLOCKED, 0)} blocked "
        f"of {len(report.results)} checks"
    )
    return lines


def print_summary(report: Report, stream=None) -> None:
    stream = stream or sys.stdout
    for line in summary_lines(report):
        print(line, file=stream)
