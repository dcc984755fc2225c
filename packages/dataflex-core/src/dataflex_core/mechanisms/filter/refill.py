"""The prompts of ``mechanism: filter``'s refill rounds: shuffled passes over the train dataset, seeded, checkpointed."""

from __future__ import annotations

from typing import Any

import torch

from ...step.blocks import BlockSampler


class RefillSampler(BlockSampler):
    """The prompts of refill rounds: shuffled passes over the dataset, one prompt batch at a time.

    Seeded by the run's seed (its own generator, apart from the framework's prompt order), so refills are
    deterministic; its position travels with the component state: the rest of the current pass as one int64
    tensor (a dataset's worth of ids; older checkpoints' lists still load).
    """

    kind = "refill"
    name = "refill_sampler"

    def __init__(self, population: int, batch_size: int, seed: int = 0) -> None:
        super().__init__(population, batch_size, seed)
        self._order = torch.zeros(0, dtype=torch.long)

    def next_block(self) -> list[int]:
        parts: list[torch.Tensor] = []
        wanted = self.batch_size
        while wanted:
            if not len(self._order):
                self._order = torch.randperm(self.population, generator=self.generator)
            take = self._order[:wanted]
            parts.append(take)
            self._order = self._order[len(take) :]
            wanted -= len(take)
        return torch.cat(parts).tolist()

    def state_dict(self) -> dict[str, Any]:
        return {**self.block_state(), "order": self._order.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.load_block_state(state)
        self._order = torch.as_tensor(state["order"], dtype=torch.long).reshape(-1).clone()
