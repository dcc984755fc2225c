"""Dataloader samplers that draw prompts one batch-sized block at a time: the base both train samplers share.

``mix`` and ``curriculum`` act where the framework picks prompts. Both draw one block of ``batch_size`` indices
at a time with their own seeded generator and checkpoint their place in it (:class:`BlockSampler`);
:func:`systematic_counts` turns a distribution into whole counts per block.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import Sampler

from ..errors import ConfigError
from ..state_fields import count, generator_state, rows


def systematic_positions(proportions: torch.Tensor, total: int, generator: torch.Generator) -> torch.Tensor:
    """The entries ``total`` systematic picks land on, in increasing order (int64): entry ``d`` is picked
    ``floor`` or ``ceil`` of ``p_d * total`` times, ``p_d * total`` in expectation.

    One cumulative sum, then a binary search per pick: ``O(n + total log n)``.
    """
    expected = torch.mul(proportions.detach().to("cpu", torch.float64), total).cumsum_(0)
    expected[-1] = float(total)  # guard against rounding in the cumulative sum
    offset = torch.rand((), generator=generator, dtype=torch.float64)
    # pick j (1..total) lands on the first entry whose floor(expected + offset) reaches j; numpy's search: a few
    # hundred binary searches are not worth a parallel region (torch opens one above 200 values)
    edges = expected.add_(offset).numpy()
    return torch.from_numpy(np.searchsorted(edges, np.arange(1, total + 1, dtype=np.float64), side="left"))


def systematic_counts(proportions: torch.Tensor, total: int, generator: torch.Generator) -> torch.Tensor:
    """Integer counts summing to ``total`` with ``E[count_d] = p_d * total`` and ``|count_d - p_d total| < 1``."""
    return torch.bincount(systematic_positions(proportions, total, generator), minlength=len(proportions))


class BlockSampler(Sampler[int]):
    """Yields dataset indices one batch-sized block at a time; a subclass says how a block is drawn.

    Whole blocks only: a dataloader drops a last partial batch, whose prompts would be consumed untrained.

    :param population: dataset rows the sampler draws from.
    :param batch_size: indices per block (the dataloader's batch size).
    :param seed: seed of the sampler's own generator.
    """

    def __init__(self, population: int, batch_size: int, seed: int = 0) -> None:
        self.batch_size = int(batch_size)
        self.population = int(population)
        self.generator = torch.Generator().manual_seed(int(seed))
        self._block: list[int] = []
        self._yielded = 0

    def next_block(self) -> list[int]:
        """The next ``batch_size`` dataset indices."""
        raise NotImplementedError(f"{type(self).__qualname__} must implement next_block()")

    def __len__(self) -> int:
        return (self.population // self.batch_size) * self.batch_size

    def __iter__(self) -> Iterator[int]:
        while self._yielded < len(self):
            if not self._block:
                self._block = self.next_block()[::-1]  # reversed: pop() from the end is O(1)
            self._yielded += 1
            yield self._block.pop()
        self._yielded = 0

    def block_state(self) -> dict[str, Any]:
        """The dataset's size, the generator and the position in the current block (part of a subclass's
        ``state_dict``)."""
        return {
            "population": self.population,
            "generator": self.generator.get_state(),
            "block": list(self._block),
            "yielded": self._yielded,
        }

    def load_block_state(self, state: dict[str, Any]) -> None:
        """Take :meth:`block_state`, each field checked (:mod:`dataflex_core.state_fields`): saved over a dataset
        of this size, a generator's state, a block of its rows, a position in the pass."""
        saved = count(state, "population", low=1)
        if saved != self.population:  # another dataset, not an altered file: said as such, the first check to see it
            raise ConfigError(
                f"the checkpoint's {type(self).__name__} was saved over a train dataset of {saved} rows, but this "
                f"run's has {self.population}; resume with the same train files, or from another checkpoint"
            )
        generator = generator_state(state, "generator")
        block = rows(state, "block", self.population, distinct=False)
        yielded = count(state, "yielded", high=self.population)
        self.generator.set_state(generator)
        self._block = block.tolist()
        self._yielded = yielded
