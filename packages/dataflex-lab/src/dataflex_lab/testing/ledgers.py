"""Ledgers for the tests of `dataflex ledger`: core's own ``PromptLedger`` fed step by step, then exported."""

from __future__ import annotations

import numpy as np
import torch

from dataflex_core.ledger import PromptIds, PromptLedger

#: Prompts of the test dataset, and rollouts per prompt and step.
PROMPTS, GROUP = 40, 4


def step_batches(steps: int, seed: int = 0, prompts_per_step: int = 8) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each step's ``(rows, rewards)``: ``prompts_per_step`` prompts x ``GROUP`` rollouts; prompt ``i`` succeeds
    with probability ``i / PROMPTS`` (rewards 0 or 1), so some prompts are always or never solved."""
    generator = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(steps):
        prompts = torch.randperm(PROMPTS, generator=generator)[:prompts_per_step]
        rows = prompts.repeat_interleave(GROUP)
        chance = rows.to(torch.float64) / (PROMPTS - 1)
        rewards = (torch.rand(len(rows), generator=generator, dtype=torch.float64) < chance).to(torch.float64)
        batches.append((rows, rewards))
    return batches


def ids(key: str = "index") -> PromptIds:
    """The dataset's ids: 1000 + 7 * row (not the row numbers, so a lookup by row would show)."""
    return PromptIds(1000 + 7 * np.arange(PROMPTS), key)


def recorded(batches: list[tuple[torch.Tensor, torch.Tensor]], first_step: int = 1, key: str = "index") -> PromptLedger:
    """A fresh ledger fed ``batches`` as steps ``first_step, ...`` (every fourth rollout filtered, 3 tokens each)."""
    ledger = PromptLedger(ids(key))
    for step, (rows, rewards) in enumerate(batches, start=first_step):
        trained = torch.arange(len(rows)) % 4 != 3
        ledger.record(rows, rewards, step, tokens=torch.full((len(rows),), 3), trained=trained)
    return ledger
