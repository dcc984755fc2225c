"""One step's generation rounds under ``mechanism: filter``: which groups each round admitted, which the batch keeps.

The trained batch is the first ``groups`` admitted groups in generation order; admitted groups beyond them
are the surplus (generated, never trained). A step still short after ``max_rounds`` follows ``on_short``:
``raise`` or ``backfill`` (evicted groups in generation order complete the batch).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ...errors import InvalidOutputError
from ...step.result import PREFIX
from ...step.seams import StepRounds
from .settings import FilterSettings

#: The prefix of the filter's metrics.
FILTER_PREFIX = f"{PREFIX}filter/"


@dataclass(frozen=True)
class RoundPrompts:
    """One round's valid responses, for the ledger: their ledger rows, rewards, tokens and group."""

    rows: torch.Tensor
    rewards: torch.Tensor
    tokens: torch.Tensor
    group: torch.Tensor

    def zero_variance(self) -> tuple[int, int]:
        """``(groups whose responses all got one reward, groups)`` among the round's groups with a valid response."""
        kinds, group = torch.unique(self.group, return_inverse=True)
        groups, rewards = len(kinds), self.rewards.to(torch.float64)
        high = torch.zeros(groups, dtype=torch.float64).scatter_reduce_(0, group, rewards, "amax", include_self=False)
        low = torch.zeros(groups, dtype=torch.float64).scatter_reduce_(0, group, rewards, "amin", include_self=False)
        return int((high == low).sum()), groups


@dataclass(frozen=True)
class LedgerFeed:
    """One step's valid responses as the ledger records them (dataset rows, rewards, tokens, trained or not):
    what the main process of a host hands the others so that every process records the same step."""

    rows: torch.Tensor
    rewards: torch.Tensor
    tokens: torch.Tensor
    trained: torch.Tensor
    step: int


@dataclass
class AdmissionRounds(StepRounds):
    """One step's generation rounds: which groups each admitted, and which groups the trained batch keeps.

    :param groups: the groups the trained batch must have (the step's prompts).
    :param settings: the caps and the short-step policy.
    """

    groups: int
    settings: FilterSettings
    #: Per round: the admitted flag of each of its groups (in the round's group order).
    admitted: list[torch.Tensor] = field(default_factory=list)
    #: Per round: each group's rollouts and response tokens.
    rollouts: list[torch.Tensor] = field(default_factory=list)
    tokens: list[torch.Tensor] = field(default_factory=list)
    #: Per round: its valid responses for the ledger (``None`` without one).
    prompts: list[RoundPrompts | None] = field(default_factory=list)
    #: The prompts of the next refill round (``None``: the batch's), set by the mechanism after each round.
    refill_size: int | None = None

    def add(
        self, admitted: torch.Tensor, rollouts: torch.Tensor, tokens: torch.Tensor, prompts: RoundPrompts | None = None
    ) -> None:
        """Record one round's groups (bool, rollouts and tokens per group) and its responses for the ledger."""
        self.admitted.append(admitted.to(torch.bool).cpu())
        self.rollouts.append(rollouts.to(torch.long).cpu())
        self.tokens.append(tokens.to(torch.long).cpu())
        self.prompts.append(prompts)

    @property
    def rounds(self) -> int:
        return len(self.admitted)

    @property
    def admitted_groups(self) -> int:
        return int(sum(int(a.sum()) for a in self.admitted))

    @property
    def needs_refill(self) -> bool:
        """Too few admitted groups and another round allowed: the host generates one more prompt batch."""
        return self.admitted_groups < self.groups and self.rounds < self.settings.max_rounds

    def chosen(self) -> list[torch.Tensor]:
        """Per round, the indices of its groups the trained batch keeps, in generation order.

        :raises InvalidOutputError: still short after ``max_rounds`` with ``on_short: raise``.
        """
        short = self.groups - self.admitted_groups
        if short > 0 and self.settings.on_short == "raise":
            raise InvalidOutputError(
                f"mechanism filter admitted {self.admitted_groups} of the {self.groups} groups the batch needs after "
                f"{self.rounds} generation round(s) (dataflex.filter.max_rounds={self.settings.max_rounds}); raise "
                "max_rounds, widen the selector's band, or set dataflex.filter.on_short=backfill to complete the "
                "batch with evicted groups"
            )
        left, backfill = self.groups, max(short, 0)
        out = []
        for admitted in self.admitted:
            keep = admitted.nonzero().flatten()[:left]
            left -= len(keep)
            out.append(keep)
        if backfill:  # evicted groups in generation order complete the batch
            for i, admitted in enumerate(self.admitted):
                extra = (~admitted).nonzero().flatten()[:backfill]
                backfill -= len(extra)
                out[i] = torch.sort(torch.cat([out[i], extra])).values
        return out

    def counts(self, chosen: list[torch.Tensor]) -> dict[str, int]:
        """The compute counts of the rows outside the trained batch (:func:`~dataflex_core.compute.compute_counters`)."""
        parts = list(zip(chosen, self.rollouts, self.tokens))  # a round's groups less those kept (each kept once)
        return {
            "evicted_rollouts": sum(int(rollouts.sum() - rollouts[keep].sum()) for keep, rollouts, _ in parts),
            "evicted_tokens": sum(int(tokens.sum() - tokens[keep].sum()) for keep, _, tokens in parts),
            "generation_rounds": self.rounds,
            "refills": self.rounds - 1,
        }

    def metrics(self, chosen: list[torch.Tensor]) -> dict[str, float]:
        total = sum(len(a) for a in self.admitted)
        kept_admitted = sum(int(a[keep].sum()) for a, keep in zip(self.admitted, chosen))
        return {
            f"{FILTER_PREFIX}admitted_groups": float(self.admitted_groups),
            f"{FILTER_PREFIX}generated_groups": float(total),
            f"{FILTER_PREFIX}admitted_fraction": self.admitted_groups / max(total, 1),
            f"{FILTER_PREFIX}trained_groups": float(sum(len(keep) for keep in chosen)),
            f"{FILTER_PREFIX}surplus_groups": float(self.admitted_groups - kept_admitted),
            f"{FILTER_PREFIX}backfilled_groups": float(sum(len(keep) for keep in chosen) - kept_admitted),
        }
