"""mix's sampler keeps TRL's prompt layout: each prompt num_generations times in a row, a chunk per generation."""

from __future__ import annotations

import collections

import torch
from dataflex_trl.sampler import MixtureRepeatSampler
from trl.trainer.utils import RepeatSampler

from dataflex_core.step import DomainMixtureSampler


def chunks_of(indices: list[int], size: int) -> list[list[int]]:
    return [indices[i : i + size] for i in range(0, len(indices), size)]


def test_the_layout_is_trls_repeat_layout():
    domains = [i % 2 for i in range(24)]
    mixture = DomainMixtureSampler(domains, ["a", "b"], 3, torch.tensor([0.5, 0.5]), seed=0)
    ours = list(MixtureRepeatSampler(mixture, mini_repeat_count=4, repeat_count=2))
    trls = list(RepeatSampler(list(range(24)), mini_repeat_count=4, batch_size=3, repeat_count=2, seed=0))
    assert len(ours) == len(trls) == len(MixtureRepeatSampler(mixture, 4, 2))
    for block_ours, block_trl in zip(chunks_of(ours, 3 * 4 * 2), chunks_of(trls, 3 * 4 * 2)):
        for sequence in (block_ours, block_trl):
            first, second = sequence[:12], sequence[12:]
            assert first == second  # the chunk repeated repeat_count times
            assert all(len(set(first[i : i + 4])) == 1 for i in range(0, 12, 4))  # each prompt 4 times in a row


def test_new_proportions_apply_from_the_next_chunk():
    domains = [0] * 50 + [1] * 50
    mixture = DomainMixtureSampler(domains, ["a", "b"], 4, torch.tensor([1.0, 0.0]), seed=0)
    it = iter(MixtureRepeatSampler(mixture, mini_repeat_count=2, repeat_count=1))
    first = [next(it) for _ in range(8)]
    mixture.set_proportions(torch.tensor([0.25, 0.75]))
    second = [next(it) for _ in range(8)]
    assert all(domains[i] == 0 for i in first)
    assert collections.Counter(domains[i] for i in second[::2]) == {1: 3, 0: 1}
