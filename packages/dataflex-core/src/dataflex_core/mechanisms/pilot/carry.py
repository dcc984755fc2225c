"""``pilot.carry``: the survivor buffer of Pilot-Commit, admitted prompts waiting to be committed on a later round.

Every prompt a round admits enters the buffer (dataset row, the step that explored it, the std of its pilot
rewards); a round commits from it the prompts the batch still lacks, in the configured order: ``std`` (highest
pilot reward std first, then the newest step, then the order they entered: the reference's sort), ``recency``
(newest step first) or ``random`` (the buffer's own seeded generator). At a step's end the prompts explored more
than ``max_off_steps`` steps before it are evicted (``step - explored > max_off_steps``, as the reference's
flush), their pilot rollouts spent. The buffer is part of the checkpoint, each field checked on load.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ...state_fields import StateFieldError, count, field, generator_state, rows
from .settings import CarrySettings


class SurvivorBuffer:
    """Admitted prompts not yet committed: per prompt its dataset row, the step it was explored at, its pilot std."""

    kind = "carry"
    name = "survivor_buffer"

    def __init__(self, settings: CarrySettings, population: int, seed: int = 0) -> None:
        self.settings, self.population = settings, int(population)
        self.generator = torch.Generator().manual_seed(int(seed))
        self.row = torch.zeros(0, dtype=torch.long)
        self.step = torch.zeros(0, dtype=torch.long)
        self.std = torch.zeros(0, dtype=torch.float64)

    def __len__(self) -> int:
        return len(self.row)

    def add(self, row: torch.Tensor, step: int, std: torch.Tensor) -> None:
        """Prompts admitted at ``step``, after the buffer's; a prompt already waiting takes the new step and std in
        its place (the reference's dict keeps a key's position)."""
        at = {int(r): i for i, r in enumerate(self.row.tolist())}
        fresh = []
        for r, s in zip(row.tolist(), std.tolist()):
            if r in at:
                self.step[at[r]], self.std[at[r]] = int(step), s
            else:
                at[r] = len(at)
                fresh.append((r, s))
        self.row = torch.cat([self.row, torch.tensor([r for r, _ in fresh], dtype=torch.long)])
        self.step = torch.cat([self.step, torch.full((len(fresh),), int(step), dtype=torch.long)])
        self.std = torch.cat([self.std, torch.tensor([s for _, s in fresh], dtype=torch.float64)])

    def take(self, wanted: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(rows, explored at)`` of up to ``wanted`` prompts in the configured order, removed from the buffer."""
        if wanted >= len(self):
            order = torch.arange(len(self))
        elif self.settings.order == "std":  # lexsort: the last key first; stable, so ties keep their entry order
            order = torch.from_numpy(np.lexsort((-self.step.numpy(), -self.std.numpy())))[:wanted]
        elif self.settings.order == "recency":
            order = torch.sort(-self.step, stable=True).indices[:wanted]
        else:
            order = torch.randperm(len(self), generator=self.generator)[:wanted]
        taken = (self.row[order], self.step[order])
        self._keep(~torch.isin(torch.arange(len(self)), order))
        return taken

    def flush(self, step: int) -> int:
        """Evict the prompts explored more than ``max_off_steps`` steps before ``step``; how many were evicted."""
        old = (int(step) - self.step) > self.settings.max_off_steps
        self._keep(~old)
        return int(old.sum())

    def _keep(self, mask: torch.Tensor) -> None:
        self.row, self.step, self.std = self.row[mask], self.step[mask], self.std[mask]

    def state_dict(self) -> dict[str, Any]:
        return {
            "population": self.population, "generator": self.generator.get_state(), "rows": self.row.clone(),
            "steps": self.step.clone(), "std": self.std.clone(),
        }  # fmt: skip

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Take :meth:`state_dict`, each field checked: the same dataset's size, distinct rows of it, one step
        (>= 0) and one finite std (>= 0) per row."""
        saved = count(state, "population", low=1)
        if saved != self.population:
            raise StateFieldError("population", saved, f"the buffer was saved over this run's {self.population} rows")
        generator = generator_state(state, "generator")
        row = rows(state, "rows", self.population)
        step = torch.as_tensor(field(state, "steps"))
        if step.dim() != 1 or len(step) != len(row) or step.is_floating_point() or bool((step < 0).any()):
            raise StateFieldError("steps", step, f"one step >= 0 per buffered row ({len(row)}), integers")
        std = torch.as_tensor(field(state, "std"))
        if std.dim() != 1 or len(std) != len(row) or not std.is_floating_point():
            raise StateFieldError("std", std, f"one float per buffered row ({len(row)})")
        if not bool(torch.isfinite(std).all()) or bool((std < 0).any()):
            raise StateFieldError("std", std.tolist()[:8], "each std is finite and >= 0")
        self.generator.set_state(generator)
        self.row, self.step, self.std = row, step.to(torch.long), std.to(torch.float64)
