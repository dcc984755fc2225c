"""Curriculum components for the meta tests: correct ones, and broken ones that each break one promise."""

from __future__ import annotations

import torch

from dataflex_core import Reweighter, Sampler, Scorer, mean_one


class GoodSolveRate(Scorer):
    """Per-prompt mean success, state indexed by prompt_index, 0.5 for unseen prompts."""

    name = "good_solve_rate"
    timing = "pre_rollout"
    requires = ["prompt_index"]
    score_range = (0.0, 1.0)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.rate = torch.zeros(0, dtype=torch.float64)

    def _grow(self, size):
        if size > len(self.rate):
            self.rate = torch.cat([self.rate, torch.full((size - len(self.rate),), 0.5, dtype=torch.float64)])

    def score(self, batch, step_id, **ctx):
        index = batch.batch["prompt_index"].cpu()
        self._grow(int(index.max()) + 1 if len(index) else 0)
        return self.rate[index].float().to(batch.batch["prompt_index"].device)

    def observe(self, outcomes, step_id, **ctx):
        index = outcomes.batch["prompt_index"].cpu()
        self._grow(int(index.max()) + 1)
        rate = outcomes.batch["successes"].cpu().double() / outcomes.batch["rollouts"].cpu().double()
        self.rate[index] = rate.clamp(0, 1)

    def state_dict(self):
        return {"rate": self.rate.clone()}

    def load_state_dict(self, state):
        self.rate = state["rate"].clone()


class GoodFloorSampler(Sampler):
    """Softmax with a uniform floor it declares."""

    name = "good_floor_softmax"

    def act(self, scores, batch, **ctx):
        q = torch.softmax(scores.double(), dim=0)
        return 0.9 * q + 0.1 / len(q)

    def min_probability(self, num_candidates):
        return 0.1 / num_candidates


class PromptReweighter(Reweighter):
    """A reweighter of prompt-level scores: never paired with a pre_rollout scorer."""

    name = "good_prompt_reweighter"

    def act(self, scores, batch, **ctx):
        return mean_one(torch.ones_like(scores, dtype=torch.float32), batch)


class SumNotOne(GoodFloorSampler):
    name = "broken_sum_not_one"

    def act(self, scores, batch, **ctx):
        return 0.9 * super().act(scores, batch)

    def min_probability(self, num_candidates):
        return 0.09 / num_candidates


class Starving(Sampler):
    """A plain softmax: no floor, so prompts far below the top can starve, with default params."""

    name = "broken_starving"

    def act(self, scores, batch, **ctx):
        return torch.softmax(scores.double(), dim=0)


class LyingFloor(Starving):
    name = "broken_lying_floor"

    def min_probability(self, num_candidates):
        return 0.1 / num_candidates


class RowRandom(Scorer):
    """Seeded randomness drawn per row, not per prompt: reordering the candidates changes a prompt's score."""

    name = "broken_row_random"
    timing = "pre_rollout"

    def score(self, batch, step_id, **ctx):
        gen = torch.Generator().manual_seed(step_id)
        n = len(batch.batch["prompt_index"])
        return torch.rand(n, generator=gen).to(batch.batch["prompt_index"].device)


class Forgetful(GoodSolveRate):
    """Keeps state but does not save it: a resumed run starts over."""

    name = "broken_forgetful"

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


class Rates:
    """A plain object in state: ``torch.load(weights_only=True)``, as a resume reads, refuses it."""

    def __init__(self, rate):
        self.rate = rate


class PickledState(GoodSolveRate):
    """Saves its statistic inside an object, which only ``weights_only=False`` reads back: a resume refuses it."""

    name = "broken_pickled_state"

    def state_dict(self):
        return {"rates": Rates(self.rate.clone())}

    def load_state_dict(self, state):
        self.rate = state["rates"].rate.clone()


class Undeclared(GoodSolveRate):
    name = "broken_undeclared_history"

    def score(self, batch, step_id, **ctx):
        return super().score(batch, step_id) * 0 + batch.batch["times_sampled"].float().clamp(max=1)


class Mutating(GoodSolveRate):
    name = "broken_mutating_candidates"
    requires = ["prompt_index", "rollouts"]

    def score(self, batch, step_id, **ctx):
        batch.batch["rollouts"] += 1
        return super().score(batch, step_id)


#: broken component -> the check that must catch it
BROKEN_PROMPTS = {
    SumNotOne: "check_probabilities_sum_to_one",
    Starving: "check_no_prompt_starved",
    LyingFloor: "check_no_prompt_starved",
    RowRandom: "check_candidate_order_free",
    Forgetful: "check_state_round_trip",
    PickledState: "check_state_round_trip",
    Undeclared: "check_prompt_fields_declared",
    Mutating: "check_prompts_not_mutated",
}
