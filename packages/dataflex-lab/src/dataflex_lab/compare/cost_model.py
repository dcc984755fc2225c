"""A run's modeled wall time: what its rollouts, generation calls and trained rollouts would cost on a real cluster.

Neither rollouts nor optimizer steps is what a real GRPO run pays. Generation is throughput-bound in the rollouts
it produces and latency-bound in the calls made one after another (a filter's refill round or a pilot's stage waits
for the previous one), and the update costs per trained rollout. The model charges each separately:

    seconds = per_rollout_s * rollouts generated
            + per_call_s * generation calls
            + per_trained_rollout_s * rollouts trained

and reads the three from the cumulative counters every host logs at each step (``dataflex/compute/
rollouts_generated_total``, ``generation_rounds_total``, ``rollouts_trained_total``).

No default constants: we found no published verl GRPO timing breakdown that separates the per-rollout, per-call
and per-trained-rollout costs (verl logs ``timing_s/gen`` and ``timing_s/update_actor`` per step, and published
step-time tables report those sums for one batch shape, which cannot be split into a per-call latency and a
per-rollout throughput). The constants are therefore required, read from a user's own verl run: time two steps
of different batch sizes (``timing_s/gen`` against rollouts gives ``per_rollout_s`` as the slope and
``per_call_s`` as the intercept; ``timing_s/update_actor`` over trained rollouts gives ``per_trained_rollout_s``).
docs/evidence.md#cost-model gives a worked example.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..compute import total
from .runs import CompareError, Run

#: The counters the model reads, by the cost each carries.
GENERATED, CALLS, TRAINED = total("rollouts_generated"), total("generation_rounds"), total("rollouts_trained")
COUNTERS = (GENERATED, CALLS, TRAINED)


@dataclass(frozen=True)
class CostModel:
    """Seconds per rollout generated, per generation call in sequence, and per rollout trained."""

    per_rollout_s: float
    per_call_s: float
    per_trained_rollout_s: float

    def __post_init__(self) -> None:
        for name in ("per_rollout_s", "per_call_s", "per_trained_rollout_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise CompareError(f"cost model: {name} {value!r} must be a finite number of seconds, 0 or more")
        if self.per_rollout_s == self.per_call_s == self.per_trained_rollout_s == 0:
            raise CompareError("cost model: every constant is 0, so every run would cost nothing; set at least one")

    def seconds(self, generated: float, calls: float, trained: float) -> float:
        """The modeled seconds of ``generated`` rollouts in ``calls`` sequential generation calls, ``trained``
        of them trained."""
        return self.per_rollout_s * generated + self.per_call_s * calls + self.per_trained_rollout_s * trained

    def describe(self) -> str:
        return (
            f"{self.per_rollout_s:g} s per rollout generated + {self.per_call_s:g} s per generation call + "
            f"{self.per_trained_rollout_s:g} s per rollout trained"
        )

    def as_dict(self) -> dict[str, float]:
        return {
            "per_rollout_s": self.per_rollout_s,
            "per_call_s": self.per_call_s,
            "per_trained_rollout_s": self.per_trained_rollout_s,
        }


def from_options(
    per_rollout_s: float | None, per_call_s: float | None, per_trained_s: float | None
) -> CostModel | None:
    """The model the three command-line options name, ``None`` when none is given; some but not all is an error."""
    given = [per_rollout_s, per_call_s, per_trained_s]
    if all(value is None for value in given):
        return None
    if any(value is None for value in given):
        raise CompareError(
            "the cost model needs all three of --seconds-per-rollout, --seconds-per-call and "
            "--seconds-per-trained-rollout (docs/evidence.md#cost-model: no published default)"
        )
    return CostModel(*given)  # type: ignore[arg-type]


def modeled_seconds(model: CostModel, counters: Sequence[Sequence[float]]) -> tuple[float, ...]:
    """The modeled seconds at each point from ``(generated, calls, trained)`` cumulative totals at that point."""
    return tuple(model.seconds(generated, calls, trained) for generated, calls, trained in zip(*counters))


def check_counters(run: Run) -> None:
    """Refuse a run that lacks a counter the model reads, naming it."""
    missing = [name for name in COUNTERS if not run.curve(name)]
    if missing:
        raise CompareError(
            f"{run.describe()} logs no {', '.join(map(repr, missing))}: the modeled wall time reads the cumulative "
            "counters the hosts (and the demos, for arms without DataFlex) log at every step"
        )
