"""The per-step compute counters a demo logs for every arm, from what the framework logged for the batch.

``dataflex compare --x rollouts|tokens`` reads ``dataflex/compute/<counter>_total``; arms without DataFlex (TRL's
plain ``GRPOTrainer``) log none of them, so the demos derive them from the step's own log: the rollouts the step
generated (prompts x completions: a plain GRPO step trains every one), the tokens (mean completion length x
rollouts) and the wasted rollouts (those of groups whose rewards all agree, TRL's ``frac_reward_zero_std``). A
counter the host already logged is kept as it is.
"""

from __future__ import annotations

from collections.abc import Mapping

from dataflex_core.compute import COMPUTE_PREFIX as PREFIX
from dataflex_core.compute import COUNTERS, TOTAL_SUFFIX

#: TRL's names for the step's mean completion length and its share of groups with one reward.
TRL_MEAN_LENGTH, TRL_ZERO_STD = "completions/mean_length", "frac_reward_zero_std"


def total(name: str) -> str:
    """The cumulative counter's metric name, e.g. ``dataflex/compute/rollouts_generated_total``."""
    return f"{PREFIX}{name}{TOTAL_SUFFIX}"


class ComputeTotals:
    """Running totals of one run's counters; :meth:`step` gives a step's counters and totals to log."""

    def __init__(self) -> None:
        self.totals = dict.fromkeys(COUNTERS, 0.0)

    def step(self, logged: Mapping[str, float], rollouts: int) -> dict[str, float]:
        """The counters of a plain GRPO step that generated and trained ``rollouts`` completions."""
        if PREFIX + "rollouts_generated" in logged:  # the host counts its own
            return {}
        tokens = float(round(logged.get(TRL_MEAN_LENGTH, 0.0) * rollouts))
        step = {
            "rollouts_generated": float(rollouts),
            "rollouts_trained": float(rollouts),
            "rollouts_filtered": 0.0,
            "rollouts_wasted": float(round(logged.get(TRL_ZERO_STD, 0.0) * rollouts)),
            "tokens_generated": tokens,
            "tokens_trained": tokens,
            "generation_rounds": 1.0,
            "refills": 0.0,
        }
        out = {}
        for name, value in step.items():
            self.totals[name] += value
            out[PREFIX + name] = value
            out[total(name)] = self.totals[name]
        return out
