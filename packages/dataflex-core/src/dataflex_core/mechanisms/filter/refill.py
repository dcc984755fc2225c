"""The prompts of ``mechanism: filter``'s refill rounds: shuffled passes over the train dataset, seeded, checkpointed."""

from __future__ import annotations

from typing import Any

import torch

from ...state_fields import count, field, rows
from ...step.blocks import BlockSampler


class RefillSampler(BlockSampler):
    """The prompts of refill rounds: shuffled passes over the dataset, one prompt batch at a time.

    Seeded by the run's seed (its own generator, apart from the framework's prompt order), so refills are
    deterministic; its position travels with the component state: the current pass (a permutation of the
    dataset's rows, one int64 tensor; empty before the first refill) and how far it has been taken, both
    checked on resume.
    """

    kind = "refill"
    name = "refill_sampler"

    def __init__(self, population: int, batch_size: int, seed: int = 0) -> None:
        super().__init__(population, batch_size, seed)
        self._pass = torch.zeros(0, dtype=torch.long)
        self._cursor = 0

    def next_block(self) -> list[int]:
        parts: list[torch.Tensor] = []
        wanted = self.batch_size
        while wanted:
            if self._cursor >= len(self._pass):
                self._pass, self._cursor = torch.randperm(self.population, generator=self.generator), 0
            take = self._pass[self._cursor : self._cursor + wanted]
            parts.append(take)
            self._cursor += len(take)
            wanted -= len(take)
        return torch.cat(parts).tolist()

    def state_dict(self) -> dict[str, Any]:
        return {**self.block_state(), "pass": self._pass.clone(), "cursor": self._cursor}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Take :meth:`state_dict`, checked field by field: ``pass`` each of the dataset's rows once (or empty
        before the first refill), ``cursor`` a position in it."""
        self.load_block_state(state)
        started = len(field(state, "pass")) > 0
        self._pass = rows(state, "pass", self.population, every=True) if started else torch.zeros(0, dtype=torch.long)
        self._cursor = count(state, "cursor", high=len(self._pass))
