"""One training run's logged metrics, named by its arm and seed.

Every reader turns its file format into :class:`Run` objects, and the
comparison only ever sees these, so a new log format needs a reader and
nothing else.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dataflex_core import DataFlexError


class CompareError(DataFlexError, ValueError):
    """Runs that cannot be read or compared: a bad file, missing steps, unequal seeds, an unknown metric."""


#: Where a run came from when it was built in memory rather than read from a file.
IN_MEMORY = "<memory>"


@dataclass(frozen=True, eq=False)
class Run:
    """The metrics one ``(arm, seed)`` logged, step by step.

    ``steps`` maps a training step to the numeric metrics logged at it; a
    value that was not finite (NaN, inf, or ``null``, which is how verl's file
    logger writes them) is kept as NaN so the comparison can name it instead
    of dropping it. ``non_numeric`` lists metrics logged with values that are
    not numbers (lists, strings), which cannot be compared. Runs compare by
    identity: two reads of one file are two runs.
    """

    arm: str
    seed: int
    steps: Mapping[int, Mapping[str, float]]
    source: str = IN_MEMORY
    non_numeric: frozenset[str] = field(default_factory=frozenset)
    #: The file declares this run's arm its baseline (a demo's plain-framework arm): compared against by default.
    baseline: bool = False
    #: The metric the file says its runs were made to be compared on (a demo's held-out reward): the default.
    metric: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.arm, str) or not self.arm.strip():
            raise CompareError(f"{self.source}: a run's arm must be a non-empty string, got {self.arm!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise CompareError(f"{self.source}: arm {self.arm!r} has seed {self.seed!r}; expected an integer")

    @property
    def label(self) -> str:
        """``arm@seed``, the name the reports and errors use."""
        return f"{self.arm}@{self.seed}"

    def describe(self) -> str:
        """The label with the file it came from, for error messages."""
        return self.label if self.source == IN_MEMORY else f"{self.label} ({self.source})"

    def metric_names(self) -> set[str]:
        return {name for metrics in self.steps.values() for name in metrics}

    def curve(self, metric: str) -> list[tuple[int, float]]:
        """``(step, value)`` pairs of ``metric`` in step order (empty when it was never logged)."""
        return [(step, self.steps[step][metric]) for step in sorted(self.steps) if metric in self.steps[step]]

    @classmethod
    def from_record(cls, record: Mapping[str, Any], source: str = IN_MEMORY) -> Run:
        """A run from ``{"arm": ..., "seed": ..., "steps": [{"step": 1, "metrics": {...}}, ...]}``.

        This is the shape of each entry of the demos' ``"runs"`` list (format
        ``dataflex-demo/1``), so a demo can hand its in-memory records to
        :func:`~dataflex_lab.compare.compare_runs` directly.
        """
        if not isinstance(record, Mapping):
            raise CompareError(f"{source}: a run must be an object with arm, seed and steps, got {record!r:.80}")
        missing = [key for key in ("arm", "seed", "steps") if key not in record]
        if missing:
            raise CompareError(f"{source}: run {dict(record)!r:.120} lacks {missing}; expected arm, seed and steps")
        builder = StepLog(f"{source} run {record['arm']}@{record['seed']}")
        entries = record["steps"]
        if not isinstance(entries, list):
            raise CompareError(f"{builder.where}: 'steps' must be a list of {{step, metrics}}, got {entries!r:.80}")
        for entry in entries:
            if not isinstance(entry, Mapping) or "step" not in entry or not isinstance(entry.get("metrics"), Mapping):
                raise CompareError(
                    f"{builder.where}: each entry of 'steps' must be {{'step': int, 'metrics': {{...}}}}, "
                    f"got {entry!r:.120}"
                )
            builder.add(entry["step"], entry["metrics"])
        return builder.run(record["arm"], record["seed"], source)


class StepLog:
    """Collects ``(step, metrics)`` records into a :class:`Run`, merging records of the same step.

    Loggers write one step in several records (verl logs validation and
    training metrics separately, TRL's ``log_history`` adds an evaluation
    entry), so records of one step merge; the same metric logged twice at one
    step with two different values is an error, never a silent overwrite.
    """

    def __init__(self, where: str) -> None:
        self.where = where
        self.steps: dict[int, dict[str, float]] = {}
        self.non_numeric: set[str] = set()

    def add(self, step: Any, metrics: Mapping[str, Any]) -> None:
        if (
            isinstance(step, bool)
            or not isinstance(step, (int, float))
            or not math.isfinite(step)  # JSON's NaN / Infinity
            or step != int(step)
        ):
            raise CompareError(f"{self.where}: step {step!r} is not an integer (a step is a whole, finite number)")
        merged = self.steps.setdefault(int(step), {})
        for name, raw in metrics.items():
            value = as_metric_value(raw)
            if value is None:
                self.non_numeric.add(str(name))
                continue
            if name in merged and not same_value(merged[name], value):
                raise CompareError(
                    f"{self.where}: metric {name!r} is logged twice at step {int(step)} with different values "
                    f"({merged[name]!r} and {value!r}); one step must have one value per metric"
                )
            merged[str(name)] = value

    def run(self, arm: Any, seed: Any, source: str) -> Run:
        return Run(
            arm=arm,
            seed=seed,
            steps={step: metrics for step, metrics in self.steps.items() if metrics},
            source=source,
            non_numeric=frozenset(self.non_numeric - {m for ms in self.steps.values() for m in ms}),
        )


def as_metric_value(raw: Any) -> float | None:
    """A logged value as a float (NaN for ``null``/NaN/inf), or None when it is not a number at all."""
    if raw is None:
        return math.nan
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        return None
    value = float(raw)
    return value if math.isfinite(value) else math.nan


def same_value(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def by_arm(runs: Iterable[Run]) -> dict[str, dict[int, Run]]:
    """``{arm: {seed: run}}`` in the order arms first appear; two runs with one ``(arm, seed)`` are an error."""
    grouped: dict[str, dict[int, Run]] = {}
    for run in runs:
        seeds = grouped.setdefault(run.arm, {})
        if run.seed in seeds:
            raise CompareError(
                f"two runs are named {run.label}: {seeds[run.seed].source} and {run.source}; "
                "each (arm, seed) may appear once — rename one (ARM@SEED=PATH) or leave one out"
            )
        seeds[run.seed] = run
    return grouped
