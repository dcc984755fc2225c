"""What one step gives the host: metrics always, and what its framework must do with the step's batch."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

#: Prefix of every metric DataFlex logs.
PREFIX = "dataflex/"
#: The metric that says how long the host's hook took, the host's own I/O included.
HOOK_TIME = f"{PREFIX}hook_time_s"


@dataclass
class StepResult:
    """What one step gives the host.

    ``applied`` is what the framework's loss must multiply in: ``(bs,)`` (one weight for each of a row's valid tokens)
    or ``(bs, L)``, float32, 0 on invalid tokens; with importance weights it already contains them. ``factor`` is the
    DataFlex part alone. Both are ``None`` when the step leaves the loss as it is (inactive before ``warmup_step``, a
    uniform fallback, a mechanism that acts on the sampler).
    """

    metrics: dict[str, float]
    applied: torch.Tensor | None = None
    factor: torch.Tensor | None = None
    #: select: bool ``(bs,)`` of kept rows over every row of the batch (padding never kept).
    kept: torch.Tensor | None = None
    #: True when ``on_invalid: uniform`` replaced invalid output by the framework's own loss.
    fallback: bool = False
    #: The host must recompute group advantages on the ``kept`` rows alone (its own estimator).
    recompute_advantage: bool = False
    #: The host must remove the rows outside ``kept`` from its loss mask and denominator; ``factor`` is then
    #: the weight of each kept row on that smaller mask.
    hard_drop: bool = False
    #: A mechanism's own compute counts for :func:`~dataflex_core.compute.compute_counters` (a filter's
    #: ``evicted_rollouts``, ``evicted_tokens``, ``generation_rounds``, ``refills``).
    compute: dict[str, int] = field(default_factory=dict)

    def timed(self, start: float) -> StepResult:
        """Stamp ``dataflex/hook_time_s`` from ``start`` (``time.perf_counter()`` when the host's hook began)."""
        self.metrics[HOOK_TIME] = time.perf_counter() - start
        return self
