"""The prompts of ``mechanism: filter``'s refill rounds (and ``pilot``'s screening): shuffled passes over the train
dataset, seeded, checkpointed, less the rows ``pilot.evict_solved`` evicted."""

from __future__ import annotations

import logging
from typing import Any

import torch

from ...state_fields import count, field, rows
from ...step.blocks import BlockSampler

logger = logging.getLogger("dataflex_core.step")


class RefillSampler(BlockSampler):
    """The prompts of refill rounds: shuffled passes over the dataset, one prompt batch at a time.

    Seeded by the run's seed (its own generator, apart from the framework's prompt order), so refills are
    deterministic; its position travels with the component state: the current pass (a permutation of the
    dataset's rows, one int64 tensor; empty before the first refill) and how far it has been taken, both
    checked on resume. Evicted rows (:meth:`evict`) are skipped in every later draw.
    """

    kind = "refill"
    name = "refill_sampler"

    def __init__(self, population: int, batch_size: int, seed: int = 0) -> None:
        super().__init__(population, batch_size, seed)
        self._pass = torch.zeros(0, dtype=torch.long)
        self._cursor = 0
        #: Rows never drawn again (sorted).
        self.evicted = torch.zeros(0, dtype=torch.long)
        #: Evictions reached their cap (warned once).
        self.capped = False

    def next_block(self, size: int | None = None) -> list[int]:
        """The next ``size`` rows (default: the batch's). A block that runs into a new pass takes that pass's rows
        it already holds last in the pass, so a block never repeats a row and every pass visits each row once."""
        parts: list[torch.Tensor] = []
        wanted = self.batch_size if size is None else int(size)
        while wanted:
            if self._cursor >= len(self._pass):
                order = torch.randperm(self.population, generator=self.generator)
                held = torch.isin(order, torch.cat(parts)) if parts else torch.zeros(len(order), dtype=torch.bool)
                self._pass, self._cursor = torch.cat([order[~held], order[held]]), 0
            take = self._pass[self._cursor : self._cursor + wanted]
            self._cursor += len(take)
            take = take[~torch.isin(take, self.evicted)]
            parts.append(take)
            wanted -= len(take)
        return torch.cat(parts).tolist()

    def evict(self, rows: torch.Tensor, keep: int, reason: str = "dataflex.pilot.evict_solved") -> int:
        """Skip ``rows`` in every later draw while at least ``keep`` rows stay drawable (past that, a warning naming
        the ``reason`` and no more evictions: the dataset is never exhausted); how many rows were newly evicted."""
        fresh = torch.unique(rows.to(torch.long))
        fresh = fresh[~torch.isin(fresh, self.evicted)]
        room = max(self.population - len(self.evicted) - int(keep), 0)
        if len(fresh) > room and not self.capped:
            self.capped = True
            logger.warning(
                "%s: %d of %d rows are evicted; evicting %d more would leave fewer than the %d a round draws, so "
                "they and later ones stay drawable",
                reason, len(self.evicted), self.population, len(fresh), keep,
            )  # fmt: skip
            fresh = fresh[:room]
        self.evicted = torch.sort(torch.cat([self.evicted, fresh])).values
        return len(fresh)

    def state_dict(self) -> dict[str, Any]:
        return {
            **self.block_state(),
            "pass": self._pass.clone(),
            "cursor": self._cursor,
            "evicted": self.evicted.clone(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Take :meth:`state_dict`, checked field by field: ``pass`` each of the dataset's rows once (or empty
        before the first refill), ``cursor`` a position in it, ``evicted`` distinct rows."""
        self.load_block_state(state)
        started = len(field(state, "pass")) > 0
        self._pass = rows(state, "pass", self.population, every=True) if started else torch.zeros(0, dtype=torch.long)
        self._cursor = count(state, "cursor", high=len(self._pass))
        # a checkpoint of a release before pilot.evict_solved has no evicted rows
        self.evicted = (
            torch.sort(rows(state, "evicted", self.population)).values if "evicted" in state else self.evicted
        )
