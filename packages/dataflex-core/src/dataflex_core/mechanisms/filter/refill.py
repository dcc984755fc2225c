"""The prompts of ``mechanism: filter``'s refill rounds: shuffled passes over the train dataset, seeded, checkpointed."""

from __future__ import annotations

from typing import Any

import torch

from ...step.blocks import BlockSampler


class RefillSampler(BlockSampler):
    """The prompts of refill rounds: shuffled passes over the dataset, one prompt batch at a time.

    Seeded by the run's seed (its own generator, apart from the framework's prompt order), so refills are
    deterministic; its position travels with the component state.
    """

    kind = "refill"
    name = "refill_sampler"

    def __init__(self, population: int, batch_size: int, seed: int = 0) -> None:
        super().__init__(population, batch_size, seed)
        self._order: list[int] = []

    def next_block(self) -> list[int]:
        block: list[int] = []
        while len(block) < self.batch_size:
            if not self._order:
                self._order = torch.randperm(self.population, generator=self.generator).tolist()
            take = self.batch_size - len(block)
            block += self._order[:take]
            self._order = self._order[take:]
        return block

    def state_dict(self) -> dict[str, Any]:
        return {**self.block_state(), "order": list(self._order)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.load_block_state(state)
        self._order = list(state["order"])
