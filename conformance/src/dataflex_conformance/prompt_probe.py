"""A check's view of a ``pre_rollout`` scorer or a sampler: candidate prompts instead of rollouts.

The checks shared with the other kinds (shape, dtype, device, finiteness,
no autograd graph, linear cost) run unchanged on this probe; it builds
candidate batches (:mod:`.prompt_batches`), feeds a scorer the case's
outcomes through ``observe`` before it scores (once per instance and
sample, as a host does between steps), and gives a sampler the scores of its
``pre_rollout`` scorer or of the case's distribution.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from dataflex_core.contracts import GROUP_MIN_ROLLOUTS

from .batches import Case, score_range_of
from .probe import STEP_ID, Probe
from .prompt_batches import PromptBatchFactory, PromptSample, prompt_scores
from .subjects import Subject

#: Rollouts per candidate of the budget an allocator is certified under, unless a check sets its own.
ROLLOUTS_PER_PROMPT = 4


@dataclass(frozen=True)
class Budget:
    """The keywords a host gives an allocator's ``act``: the budget and the bounds of every count."""

    budget: int
    n_min: int = GROUP_MIN_ROLLOUTS
    n_max: int | None = None

    def kwargs(self) -> dict[str, Any]:
        return {"budget": self.budget, "n_min": self.n_min, "n_max": self.n_max}

    def __str__(self) -> str:
        return f"budget={self.budget}, n_min={self.n_min}, n_max={self.n_max}"


def default_budget(num_prompts: int) -> Budget:
    """What a host gives by default: the candidates times ``rollout.n`` (:data:`ROLLOUTS_PER_PROMPT`), ``n_min`` 2."""
    return Budget(num_prompts * ROLLOUTS_PER_PROMPT)


class PromptProbe(Probe):
    """:class:`~dataflex_conformance.probe.Probe` over candidate prompts."""

    factory: PromptBatchFactory

    def __init__(self, subject: Subject, case: Case, device: torch.device | str, factory: PromptBatchFactory) -> None:
        super().__init__(subject, case, device, factory)
        #: (component, sample) pairs whose outcomes were observed already: a host feeds each step once.
        self._fed: list[tuple[Any, PromptSample]] = []

    def sample(self, case: Case | None = None) -> PromptSample:
        return self.factory.build(case or self.case, self.device)

    def observe(self, component: Any, sample: PromptSample) -> None:
        """Feed ``component`` the sample's outcomes (once for this instance and sample)."""
        if any(c is component and s is sample for c, s in self._fed):
            return
        self._fed.append((component, sample))
        for step, outcomes in sample.outcomes:
            try:
                component.observe(outcomes, step)
            except Exception as exc:  # noqa: BLE001
                raise self.fail(f"observe() of step {step}'s outcomes raised {type(exc).__name__}: {exc}") from exc

    def scores(self, sample: PromptSample, case: Case | None = None) -> torch.Tensor:
        """The scores a sampler receives: its ``pre_rollout`` scorer's or the case's distribution, made once per
        sample (clones and reorderings carry them, so every call sees the same scores for the same prompt)."""
        if sample.scores is None:
            source = self.subject.source
            if isinstance(source, Subject):
                sample.scores = self._scorer_output(source, sample)
            else:
                sample.scores = prompt_scores(case or self.case, sample, score_range_of(self.subject.cls))
        return sample.scores.clone()

    def _fed_scorer(self, source: Subject, sample: PromptSample) -> Any:
        """The ``pre_rollout`` scorer feeding the subject, fed the sample's outcomes as a host feeds it."""
        scorer = source.make()
        for step, outcomes in sample.outcomes:
            scorer.observe(outcomes, step)
        return scorer

    def _score_shape(self, source: Subject, sample: PromptSample) -> tuple[int, ...]:
        return (len(sample),)

    def allocate(self, component: Any, sample: PromptSample, budget: Budget | None = None, batch: Any = None) -> Any:
        """An allocator's ``act`` on the candidates under ``budget`` (default :func:`default_budget`); a raise fails."""
        budget = budget or default_budget(len(sample))
        try:
            return component.act(self.scores(sample), sample.batch if batch is None else batch, step_id=STEP_ID,
                                 **budget.kwargs(), **sample.ctx())  # fmt: skip
        except Exception as exc:  # noqa: BLE001
            raise self.fail(f"act() under {budget} raised {type(exc).__name__}: {exc}") from exc

    def call(self, component: Any, sample: PromptSample, scores: torch.Tensor | None = None, batch: Any = None) -> Any:
        """``score`` (after observing the sample's outcomes) or ``act`` on the candidates; a raise is a failure."""
        batch = sample.batch if batch is None else batch
        if self.subject.kind == "scorer":
            self.observe(component, sample)
        if self.subject.kind == "allocator":
            return self.allocate(component, sample, batch=batch)
        try:
            if self.subject.kind == "scorer":
                return component.score(batch, STEP_ID, **sample.ctx())
            return component.act(scores, batch, step_id=STEP_ID, **sample.ctx())
        except Exception as exc:  # noqa: BLE001
            method = "score" if self.subject.kind == "scorer" else "act"
            raise self.fail(f"{method}() raised {type(exc).__name__}: {exc}") from exc

    def expected_shape(self, sample: PromptSample) -> tuple[int, ...]:
        return (len(sample),)
