"""``mechanism: mix`` and ``curriculum`` in TRL: TRL's prompt order, with the prompts drawn by DataFlex.

TRL's ``RepeatSampler`` takes ``generation_batch_size / num_generations``
prompts at a time, yields that chunk ``num_iterations * steps_per_generation``
times and each prompt ``num_generations`` times in a row, so that a prompt's
completions form one group across processes. :class:`MixtureRepeatSampler`
keeps exactly that structure and draws each chunk from the sampler the
session built (core's :class:`~dataflex_core.step.BlockSampler`s: the domain
mixture for mix, the curriculum's for curriculum) instead of a shuffled pass
over the dataset: new proportions or a new history apply from
the next chunk it draws. Every process builds the same sampler with the same
seed and receives the same proportions (or feeds its history the same gathered
rewards), so all processes draw the same chunks, as TRL requires.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

import numpy as np
from torch.utils.data import Sampler

from dataflex_core.step import BlockSampler


class MixtureRepeatSampler(Sampler[int]):
    """TRL's ``RepeatSampler`` layout over chunks drawn by one of core's block samplers.

    :param mixture: draws chunks of ``mixture.batch_size`` prompts (one generation batch's prompts).
    :param mini_repeat_count: ``num_generations``.
    :param repeat_count: ``num_iterations * steps_per_generation``.
    """

    def __init__(self, mixture: BlockSampler, mini_repeat_count: int, repeat_count: int) -> None:
        self.mixture = mixture
        self.mini_repeat_count = int(mini_repeat_count)
        self.repeat_count = int(repeat_count)
        #: The chunks drawn so far and a CRC-32 over them: what the processes compare each step (they must agree).
        self.chunks_drawn = 0
        self.digest = 0

    @property
    def chunks(self) -> int:
        """Chunks per epoch: as many as ``RepeatSampler`` makes from the same dataset."""
        return len(self.mixture) // self.mixture.batch_size  # both samplers count whole blocks

    def __iter__(self) -> Iterator[int]:
        for _ in range(self.chunks):
            chunk = self.mixture.next_block()
            self.chunks_drawn += 1
            self.digest = zlib.crc32(np.asarray(chunk, dtype=np.int64).tobytes(), self.digest)
            for _ in range(self.repeat_count):
                for index in chunk:
                    for _ in range(self.mini_repeat_count):
                        yield index

    def drawn(self) -> tuple[int, int]:
        """``(chunks drawn, CRC-32 over them)``: equal on every process that drew the same prompts."""
        return self.chunks_drawn, self.digest

    def __len__(self) -> int:
        return self.chunks * self.mixture.batch_size * self.mini_repeat_count * self.repeat_count
