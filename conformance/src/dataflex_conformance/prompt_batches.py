"""Candidate prompts for ``pre_rollout`` scorers and samplers: what a host hands them before rollout.

In ``mechanism: curriculum`` a host scores *candidate prompts*, not rollouts:
a batch with one row per candidate (its ``prompt_index`` always, every history
field of :data:`dataflex_core.step.PROMPT_FIELDS` and the dataset columns a
component declares), after the scorer has observed earlier steps' outcomes
(``Scorer.observe``; :data:`dataflex_core.step.OUTCOME_FIELDS`). A
:class:`PromptCase` names the number of candidates and how many steps of
outcomes come first; the outcomes mix the awkward prompts real steps have
(all responses solved, all failed, fractional successes, prompts that are
not candidates now). Candidates are distinct prompts drawn from a larger
dataset, so state indexed by ``prompt_index`` grows as it does in a run.
Everything is seeded: two builds of a case are identical.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import torch

from dataflex_core import Allocator, Batch, Sampler, Scorer
from dataflex_core.step import is_prompt_field

from .batches import Case, distribution_scores, synthesise
from .fields import FieldContext, FieldSynthesiser, resolve_synthesisers


@dataclass(frozen=True)
class PromptCase(Case):
    """``bs`` candidate prompts, after ``observed`` steps of outcomes (and, for samplers, a score distribution)."""

    observed: int = 0


@dataclass
class PromptSample:
    """A built case: the candidates' batch and the outcomes a scorer observes before scoring them."""

    batch: Batch
    #: ``(step, outcomes batch)`` in the order a host feeds them.
    outcomes: list[tuple[int, Batch]] = field(default_factory=list)
    #: The scores of the scorer feeding a sampler, once computed for this sample.
    scores: torch.Tensor | None = None

    @property
    def device(self) -> torch.device:
        return self.batch.batch["prompt_index"].device

    def __len__(self) -> int:
        return int(self.batch.batch["prompt_index"].shape[0])

    def ctx(self) -> dict:
        """The keyword context: hosts add their own; a component must not depend on any."""
        return {}

    def clone(self) -> PromptSample:
        return PromptSample(
            _clone_batch(self.batch),
            [(step, _clone_batch(batch)) for step, batch in self.outcomes],
            None if self.scores is None else self.scores.clone(),
        )

    def permuted(self, perm: torch.Tensor) -> PromptSample:
        """The candidates reordered by ``perm`` (fields and cached scores move with their row); outcomes alike."""
        scores = None if self.scores is None else self.scores[perm.to(self.scores.device)]
        return PromptSample(self.batch.select_rows(perm.to(self.device)), list(self.outcomes), scores)


def _clone_batch(batch: Batch) -> Batch:
    return Batch(
        {k: v.clone() for k, v in batch.batch.items()},
        {k: v.copy() for k, v in batch.non_tensor_batch.items()},
        batch.meta_info,
    )


def is_prompt_world(cls: type) -> bool:
    """True for components that work on candidate prompts: ``pre_rollout`` scorers, samplers and allocators."""
    return issubclass(cls, (Sampler, Allocator)) or (issubclass(cls, Scorer) and cls.timing == "pre_rollout")


def _history(n: int, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """Plausible history fields of ``n`` candidates: some never sampled, the others with consistent counts."""
    times = torch.randint(0, 4, (n,), generator=gen)
    if n > 1:
        times[0] = 0  # one candidate never rolled out, one rolled out, whatever the seed
        times[1] = max(int(times[1]), 1)
    rollouts = times * torch.randint(1, 9, (n,), generator=gen)
    successes = (torch.rand(n, generator=gen, dtype=torch.float64) * rollouts).floor()
    seen = times > 0
    return {
        "times_sampled": times,
        "last_sampled_step": torch.where(seen, torch.randint(1, 3, (n,), generator=gen), torch.full((n,), -1)),
        "rollouts": rollouts,
        "successes": successes,
        "reward_sum": successes + 0.25 * (rollouts - successes),
        "last_success_rate": torch.where(seen, torch.rand(n, generator=gen, dtype=torch.float64), 0.0),
        # the ledger's other counters, consistent with those (no further draws: the cases stay as they were)
        "rollouts_trained": rollouts.clone(),
        "rollouts_filtered": torch.zeros_like(rollouts),
        "tokens_generated": rollouts * 16,
        "reward_sq_sum": successes + 0.0625 * (rollouts - successes),
        "uniform_reward_steps": torch.where(seen & ((successes == 0) | (successes == rollouts)), times, 0),
        "uniform_reward_streak": torch.where(seen & ((successes == 0) | (successes == rollouts)), times, 0),
    }


def _outcomes(universe: int, gen: torch.Generator, step: int) -> Batch:
    """One step's outcomes over a mix of prompts: all solved, all failed, fractional."""
    m = max(1, min(universe, 6 + universe // 8))
    rows = torch.randperm(universe, generator=gen)[:m]
    rollouts = torch.randint(1, 9, (m,), generator=gen)
    kind = torch.arange(m) % 3  # 0: all failed, 1: all solved, 2: a fraction
    fraction = torch.rand(m, generator=gen, dtype=torch.float64)
    successes = torch.where(kind == 0, 0.0, torch.where(kind == 1, 1.0, fraction)) * rollouts
    return Batch(
        {
            "prompt_index": rows,
            "rollouts": rollouts,
            "successes": successes,
            "reward_mean": successes / rollouts,
            "uniform_reward": kind < 2,
        },
        {"prompt_id": np.asarray([f"prompt-{int(r)}" for r in rows], dtype=object)},
    )


class PromptBatchFactory:
    """Builds the candidates' batch of a case, with every history field and the dataset columns ``fields`` name.

    :param fields: the ``requires`` of every component that will read the batch.
    :param custom: synthesisers for dataset columns the suite does not know (see :mod:`.fields`).
    :param who: the component(s) asking, for the error naming a missing column.
    """

    def __init__(self, fields: list[str], custom: Mapping[str, FieldSynthesiser] | None = None, who: str = "") -> None:
        columns = [name for name in dict.fromkeys(fields) if not is_prompt_field(name) and name != "response_mask"]
        self.synthesisers = resolve_synthesisers(columns, custom, who)

    def build(self, case: Case, device: torch.device | str) -> PromptSample:
        n = case.bs
        gen = torch.Generator().manual_seed(case.seed)
        universe = 4 * n + 3
        rows = torch.randperm(universe, generator=gen)[:n]
        tensors: dict[str, torch.Tensor] = {"prompt_index": rows, **_history(n, gen)}
        ids = np.asarray([f"prompt-{int(r)}" for r in rows], dtype=object)
        objects: dict[str, np.ndarray] = {"prompt_id": ids}
        ctx = FieldContext(
            response_mask=torch.ones(n, 1, dtype=torch.long),
            uid=ids,
            group=torch.arange(n),
            num_groups=n,
            is_padding=torch.zeros(n, dtype=torch.bool),
            prompt_length=4,
            generator=gen,
        )
        columns, column_objects = synthesise(self.synthesisers, ctx, n, "column", str(n))
        tensors.update(columns)
        objects.update(column_objects)
        observed = [(step, _outcomes(universe, gen, step)) for step in range(1, getattr(case, "observed", 0) + 1)]
        moved = [
            (step, Batch({k: v.to(device) for k, v in b.batch.items()}, b.non_tensor_batch)) for step, b in observed
        ]
        return PromptSample(Batch({k: v.to(device) for k, v in tensors.items()}, objects), moved)


def prompt_scores(case: Case, sample: PromptSample, score_range: tuple[float, float]) -> torch.Tensor:
    """Synthetic scores of the case's distribution for the candidates, inside ``score_range``."""
    gen = torch.Generator().manual_seed(case.seed + 104729)
    scores = distribution_scores(case, (len(sample),), score_range, gen)
    return scores.to(torch.float32).to(sample.device)
