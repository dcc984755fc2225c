"""Toy components the hosts' and the core's tests share: behaviour easy to predict, registered under a prefix.

A test suite calls :func:`register_toy_components` once (``"hosttest"`` ->
``hosttest_constant``, ``hosttest_proportional``, ...), so each suite keeps its
own names in its configs while the components are written once. Registration
goes through the public decorators, as a user's own components do; a module
that verl imports in every Ray process can call it too, so the trainer finds the
components inside verl's workers.
"""

from __future__ import annotations

import torch

from dataflex_core import (
    Batch,
    Reweighter,
    Sampler,
    Scorer,
    mean_one,
    register_reweighter,
    register_sampler,
    register_scorer,
)

#: ``suffix -> kind`` of what :func:`register_toy_components` registers.
TOY_COMPONENTS = {
    "constant": "scorer",
    "reward": "scorer",
    "proportional": ("reweighter", "sampler"),
}


def mean_abs_advantage(batch: Batch) -> torch.Tensor:
    """``(bs,)``: each response's mean ``|advantage|`` over its tokens (0 for an empty one)."""
    mask = batch.batch["response_mask"].bool()
    adv = torch.where(mask, batch.batch["advantages"].abs(), torch.zeros(()))
    return adv.sum(-1) / mask.sum(-1).clamp(min=1)


class DomainPreferenceScorer(Scorer):
    """A ``pre_rollout`` scorer for curriculum tests: each candidate scores ``domain_scores[its domain]``
    (``other_score`` for the other domains); it counts the steps it observed (its state), so a resumed run that
    restores component state continues the count. Subclass it with the scores a test wants and register it.
    """

    timing = "pre_rollout"
    requires = ["domain"]
    domain_scores: dict[str, float] = {}
    other_score = 0.0

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.observed = 0

    def score(self, batch, step_id, **ctx):
        domains = batch.non_tensor_batch["domain"]
        return torch.tensor([self.domain_scores.get(d, self.other_score) for d in domains], dtype=torch.float64)

    def observe(self, outcomes, step_id, **ctx):
        self.observed += 1

    def state_dict(self):
        return {"observed": self.observed}

    def load_state_dict(self, state):
        self.observed = int(state["observed"])


def register_toy_components(prefix: str) -> dict[str, str]:
    """Register the toy components as ``<prefix>_<suffix>``; returns ``suffix -> name``.

    - scorer ``<prefix>_constant``: every sample scores 0.5 (reads ``advantages``): any reweighter then gives
      uniform weights;
    - scorer ``<prefix>_reward``: each response's reward (``rm_scores`` summed over the response);
    - reweighter ``<prefix>_proportional``: ``mean_one(scores + 0.1)`` at any granularity, easy to recompute;
    - sampler ``<prefix>_proportional``: probabilities proportional to the (non-negative) scores.
    """
    if not prefix or not prefix.replace("_", "").isalnum():
        raise ValueError(f"prefix {prefix!r} must be a non-empty identifier (letters, digits, underscores)")

    @register_scorer(f"{prefix}_constant")
    class ConstantScorer(Scorer):
        """Every sample scores the same: a reweighter must then give uniform weights."""

        requires = ["advantages"]

        def score(self, batch, step_id, **ctx):
            return torch.full((len(batch),), 0.5)

    @register_scorer(f"{prefix}_reward")
    class RewardScorer(Scorer):
        """Each response's reward (``rm_scores`` summed over the response)."""

        requires = ["rm_scores"]

        def score(self, batch, step_id, **ctx):
            return batch.batch["rm_scores"].sum(-1)

    @register_reweighter(f"{prefix}_proportional")
    class ProportionalReweighter(Reweighter):
        """Weights proportional to the scores plus 0.1, mean one: easy to recompute by hand in a test."""

        accepts_granularity = ("prompt", "response", "token")

        def act(self, scores, batch, **ctx):
            return mean_one(scores.float() + 0.1, batch)

    @register_sampler(f"{prefix}_proportional")
    class ProportionalSampler(Sampler):
        """Probabilities proportional to the (non-negative) scores: prompts scored 0 are never drawn."""

        def act(self, scores, batch, **ctx):
            return scores.double() / scores.double().sum()

    return {suffix: f"{prefix}_{suffix}" for suffix in TOY_COMPONENTS}
