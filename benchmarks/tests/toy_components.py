"""Small components for testing the harness itself, written with the core helpers like a plugin would be.

They are added to a private :class:`~dataflex_core.Registry` (not through the
decorators), so they never leak into the process-wide registry other tests see.
"""

from __future__ import annotations

import torch

from dataflex_core import (
    Registry,
    Reweighter,
    Scorer,
    group_index,
    masked_seq_mean,
    masked_seq_sum,
    mean_one,
    segment_mean,
    valid_sample_mask,
    valid_token_mask,
)
from dataflex_core.registry import PluginInfo


class AbsAdvantage(Scorer):
    requires = ["advantages"]
    granularity = "prompt"

    def score(self, batch, step_id, **ctx):
        return masked_seq_mean(batch.batch["advantages"].abs(), batch.batch["response_mask"])


class SolveRate(Scorer):
    requires = ["rm_scores"]
    granularity = "prompt"
    needs_groups = True

    def score(self, batch, step_id, **ctx):
        reward = masked_seq_sum(batch.batch["rm_scores"], batch.batch["response_mask"])
        index, groups = group_index(batch.non_tensor_batch["uid"], reward.device)
        valid = valid_sample_mask(batch)
        return segment_mean((reward > 0.5).float(), index, groups, valid)[index]


class TokenProb(Scorer):
    requires = ["old_log_probs"]
    granularity = "token"

    def score(self, batch, step_id, **ctx):
        return batch.batch["old_log_probs"].exp()


class Softmax(Reweighter):
    accepts_granularity = ("prompt", "response")

    def __init__(self, temperature: float = 1.0, **kwargs):
        super().__init__(**kwargs)
        self.temperature = temperature

    def act(self, scores, batch, **ctx):
        valid = valid_sample_mask(batch)
        s = torch.where(valid, scores.float() / self.temperature, torch.tensor(float("-inf")))
        return mean_one(torch.softmax(s, 0), batch)


class TokenLinear(Reweighter):
    accepts_granularity = ("token",)

    def act(self, scores, batch, **ctx):
        return mean_one(0.5 * scores.float() + 0.5, batch) * valid_token_mask(batch)


class Broken(Reweighter):
    """Crashes on every call: the harness must report it as an error row and carry on."""

    accepts_granularity = ("prompt",)

    def act(self, scores, batch, **ctx):
        raise RuntimeError("broken on purpose")


class WrongShape(Reweighter):
    """Returns (bs, 1): the harness must refuse to time output a host would reject."""

    accepts_granularity = ("prompt",)

    def act(self, scores, batch, **ctx):
        return torch.ones(scores.shape[0], 1)


class RatesOnly(Reweighter):
    """Accepts only scores in [0, 1] and says so with a ValueError, like the solve-rate reweighters."""

    accepts_granularity = ("prompt",)

    def act(self, scores, batch, **ctx):
        if ((scores < 0) | (scores > 1)).any():
            raise ValueError("rates_only reads scores as rates in [0, 1]; pair it with solve_rate")
        return mean_one(1.0 - scores.float() + 0.5, batch)


class PromptTable(Scorer):
    """A ``pre_rollout`` scorer: it drives a sampler before any rollout, never a reweighter."""

    requires = ["prompt_index"]
    granularity = "prompt"
    timing = "pre_rollout"

    def score(self, batch, step_id, **ctx):
        raise AssertionError("a pre_rollout scorer is never paired with a reweighter")


TOY = PluginInfo(name="bench-toys", value="toy_components", dist="bench-toys", version="0")


def toy_registry(*, broken: bool = False) -> Registry:
    registry = Registry()
    for kind, name, cls in [
        ("scorer", "abs_adv", AbsAdvantage),
        ("scorer", "solve_rate", SolveRate),
        ("scorer", "token_prob", TokenProb),
        ("scorer", "prompt_table", PromptTable),
        ("reweighter", "softmax", Softmax),
        ("reweighter", "token_linear", TokenLinear),
    ]:
        registry.add(kind, name, cls, TOY)
    if broken:
        registry.add("reweighter", "broken", Broken, TOY)
        registry.add("reweighter", "wrong_shape", WrongShape, TOY)
        registry.add("reweighter", "rates_only", RatesOnly, TOY)
    return registry
