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
from dataflex_core.atomic_write import write_text_atomic
from dataflex_core.text_table import format_table

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
    #: What was (or could not be) checked beyond the component suites: a mechanism's declarations, a plugin's kind.
    notes: list[str] = field(default_factory=list)


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
        """True when every check passed (or failed as declared) and nothing else went wrong.

        A check blocked by another component (a broken scorer feeding an actuator) counts
        against that component: it fails the run only through that component's own checks.
        """
        return (
            not self.errors
            and not any(p.errors for p in self.packages)
            and bool(self.devices)
            and all(r.status in OK_STATUSES for rs in self.own_results().values() for r in rs)
        )

    def own_results(self) -> dict[str, list[CheckResult]]:
        """Results per component, without those another component caused (a broken scorer feeding it)."""
        by_component: dict[str, list[CheckResult]] = defaultdict(list)
        for result in self.results:
            if result.culprit is None or result.culprit == result.component:
                by_component[result.component].append(result)
        return by_component

    def components(self) -> list[dict[str, Any]]:
        by_component = self.own_results()
        elsewhere = Counter(r.component for r in self.results if r.culprit not in (None, r.component))
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
                    "counts": {s: counts.get(s, 0) for s in (PASSED, FAILED, EXPECTED_FAILURE, BLOCKED)}
                    | {"caused_by_another_component": elsewhere.get(component_id, 0)},
                    "checks": [r.to_json() for r in self.results if r.component == component_id],
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
                {"name": p.name, "version": p.version, "components": p.components, "errors": p.errors, "notes": p.notes}
                for p in self.packages
            ],
            "summary": {s: counts.get(s, 0) for s in (PASSED, FAILED, EXPECTED_FAILURE, BLOCKED)}
            | {"total": len(self.results)},
            "problems": problems(self),
            "components": self.components(),
        }

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        return write_text_atomic(path, json.dumps(self.to_json(), indent=2, sort_keys=False) + "\n")


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except TypeError:
        return repr(value)


#: Score-source granularity classes, as the shapes an actuator meets.
_SHAPE_CLASS = {"prompt": "per-sample", "response": "per-sample", "token": "token", "domain": "domain"}
_ACCEPTS_FOR = {"per-sample": ("prompt", "response"), "token": ("token",), "domain": ("domain",)}


def _source_problems(report: Report, component: str, results: list[CheckResult]) -> tuple[list[str], set[str]]:
    """One line per score shape on which every check of an actuator fails (it cannot take that shape)."""
    subjects = {s.id: s for s in report.subjects}
    by_shape: dict[str, list[CheckResult]] = defaultdict(list)
    for r in results:
        subject = subjects.get(r.subject)
        if subject is not None and subject.source is not None:
            by_shape[_SHAPE_CLASS[subject.granularity]].append(r)
    working = [shape for shape, rs in by_shape.items() if any(r.status in OK_STATUSES for r in rs)]
    lines, consumed = [], set()
    for shape, rs in by_shape.items():
        failed = [r for r in rs if r.status == FAILED]
        if not working or shape in working or not failed:
            continue
        keep = tuple(g for w in working for g in _ACCEPTS_FOR[w])
        lines.append(
            f"{component}: every check with {shape} scores fails ({len(failed)} failures over "
            f"{len({r.subject for r in rs})} score source(s)), e.g. {failed[0].check}: {failed[0].message}; "
            f"if it is not meant to take {shape} scores, declare accepts_granularity = {keep!r}"
        )
        consumed.update(r.id for r in rs)
    return lines, consumed


def problems(report: Report) -> list[str]:
    """The real problems, one line each: what fails, where first, and how often.

    Failures of one check on one component make one line (however many cases
    and score sources show it); an actuator that fails with every source of one
    score shape gets one line naming the declaration to change; checks blocked by
    a broken scorer from elsewhere count against that scorer.
    """
    lines: list[str] = []
    for component, results in report.own_results().items():
        shape_lines, consumed = _source_problems(report, component, results)
        lines += shape_lines
        groups: dict[str, list[CheckResult]] = defaultdict(list)
        for r in results:
            if r.status == FAILED and r.id not in consumed:
                groups[r.check].append(r)
        for check, failed in groups.items():
            first = failed[0]
            sources = sorted({r.subject.split("@", 1)[1] for r in failed if "@" in r.subject})
            where = f"{len(failed)} case(s)" + (f" with scores from {', '.join(sources)}" if sources else "")
            lines.append(f"{component} {check} fails in {where}: {first.message}")
    caused: dict[tuple[str, str], list[CheckResult]] = defaultdict(list)
    for r in report.results:
        if r.culprit not in (None, r.component):
            caused[(r.culprit, r.component)].append(r)
    for (culprit, component), results in caused.items():
        lines.append(
            f"{culprit} (as a score source) blocked {len(results)} check(s) of {component}, which are not held "
            f"against {component}: {results[0].message}"
        )
    return lines


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    return format_table(rows, rule=True).splitlines()


def summary_lines(report: Report) -> list[str]:
    """The human-readable summary: one line per real problem, one row per component, then the verdict."""
    data = report.to_json()
    lines = [
        f"dataflex-conformance {__version__}  dataflex-core {data['dataflex_core']}  torch {data['torch']}  "
        f"devices: {', '.join(report.devices) or 'none'} (--device {report.device_request})"
    ]
    found = data["problems"]
    if found:
        lines.append(f"problems ({len(found)}):")
        lines += [f"  {line}" for line in found]
        lines.append("")
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
    lines += [f"NOTE {p.name}: {note}" for p in report.packages for note in p.notes]
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
