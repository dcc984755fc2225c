"""The host kit's own components (``hostkit_*``, registered on import) and the blocks its suites run.

They live here, not in a plugin, so a host runs the kit with no plugin installed.
"""

from __future__ import annotations

from typing import Any

import torch

from dataflex_core import (
    Allocator,
    Reweighter,
    Sampler,
    Scorer,
    Selector,
    group_index,
    mean_one,
    register_allocator,
    register_reweighter,
    register_sampler,
    register_scorer,
    register_selector,
    segment_var,
    valid_sample_mask,
)

#: Rows of each group ``hostkit_two_per_group`` keeps.
KEEP_PER_GROUP = 2


# -- the suite's components ------------------------------------------------------------------------------------
def _mean_abs_advantage(batch: Any) -> torch.Tensor:
    mask = batch.batch["response_mask"].bool()
    adv = torch.where(mask, batch.batch["advantages"].abs().to(torch.float32), torch.zeros(()))
    return adv.sum(-1) / mask.sum(-1).clamp(min=1)


@register_scorer("hostkit_constant")
class ConstantScorer(Scorer):
    """Every row scores 0.5: with ``hostkit_linear`` every valid token gets weight 1."""

    requires = ["advantages"]

    def score(self, batch, step_id, **ctx):
        return torch.full((len(batch),), 0.5)


@register_scorer("hostkit_advantage")
class AdvantageScorer(Scorer):
    """Each response's mean ``|advantage|``: weights that differ between rows."""

    requires = ["advantages"]

    def score(self, batch, step_id, **ctx):
        return _mean_abs_advantage(batch)


@register_scorer("hostkit_nan")
class NaNScorer(Scorer):
    """NaN for every valid row: output the step must refuse."""

    requires = ["advantages"]

    def score(self, batch, step_id, **ctx):
        out = torch.ones(len(batch))
        out[valid_sample_mask(batch)] = float("nan")
        return out


@register_scorer("hostkit_counter")
class CounterScorer(Scorer):
    """Counts the rows and steps it scored, and sums their scores: state a checkpoint must carry."""

    requires = ["advantages"]

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.rows = 0
        self.steps: list[int] = []
        self.total = torch.zeros((), dtype=torch.float64)

    def score(self, batch, step_id, **ctx):
        scores = _mean_abs_advantage(batch)
        self.rows += len(batch)
        self.steps.append(int(step_id))
        self.total = self.total + scores.sum().to(torch.float64)
        return scores

    def state_dict(self):
        return {"rows": self.rows, "steps": list(self.steps), "total": self.total.clone()}

    def load_state_dict(self, state):
        self.rows, self.steps, self.total = int(state["rows"]), list(state["steps"]), state["total"].clone()


@register_reweighter("hostkit_linear")
class LinearReweighter(Reweighter):
    """``scores + 0.1``, mean one: uniform for uniform scores."""

    def act(self, scores, batch, **ctx):
        return mean_one(scores.float() + 0.1, batch)


@register_selector("hostkit_keep_all")
class KeepAll(Selector):
    """Keeps every row: a selection that must leave the framework's loss as it is."""

    def act(self, scores, batch, **ctx):
        return torch.ones(len(scores), dtype=torch.bool, device=scores.device)


@register_selector("hostkit_above_median")
class AboveMedian(Selector):
    """Keeps the valid rows scoring above the valid rows' median: some valid rows kept, some dropped."""

    def act(self, scores, batch, **ctx):
        valid = valid_sample_mask(batch).to(scores.device)
        median = scores[valid].median() if valid.any() else scores.new_zeros(())
        return valid & (scores > median)


@register_selector("hostkit_two_per_group")
class TwoPerGroup(Selector):
    """Keeps the first :data:`KEEP_PER_GROUP` valid rows of each ``uid`` group (in row order) and asks for their
    advantages recomputed as if only they had been sampled (as GFPO does): some rows of every group dropped."""

    recompute_advantage = True

    def act(self, scores, batch, **ctx):
        valid = valid_sample_mask(batch).to(scores.device)
        groups, _ = group_index(batch.non_tensor_batch["uid"], scores.device)
        groups = torch.where(valid, groups, torch.full_like(groups, -1))  # invalid rows rank in a group of their own
        order = torch.argsort(groups, stable=True)
        ordered = groups[order]
        rank = torch.empty_like(groups)
        rank[order] = torch.arange(len(groups), device=scores.device) - torch.searchsorted(ordered, ordered)
        return valid & (rank < KEEP_PER_GROUP)


@register_scorer("hostkit_reward_spread")
class RewardSpread(Scorer):
    """The variance of each group's rewards (``rm_scores`` summed over the response), given to each of its rows:
    0 for a group whose rollouts all got the same reward."""

    requires = ["rm_scores", "response_mask", "uid"]
    timing = "post_reward"
    granularity = "prompt"
    needs_groups = True

    def score(self, batch, step_id, **ctx):
        mask = batch.batch["response_mask"].bool()
        reward = torch.where(mask, batch.batch["rm_scores"].to(torch.float64), torch.zeros((), dtype=torch.float64))
        valid = valid_sample_mask(batch).to(reward.device)
        groups, count = group_index(batch.non_tensor_batch["uid"], reward.device)
        spread = segment_var(reward.sum(-1), groups, count, valid)[groups]
        return torch.where(valid, spread, torch.zeros_like(spread)).to(torch.float32)


@register_selector("hostkit_above")
class Above(Selector):
    """Keeps the valid rows scoring above ``bound`` (default 0): on a group's shared score, whole groups."""

    admits_groups = True

    def __init__(self, bound: float = 0.0, **kwargs):
        super().__init__(**kwargs)
        self.bound = float(bound)

    def act(self, scores, batch, **ctx):
        return valid_sample_mask(batch).to(scores.device) & (scores.double() > self.bound)


@register_scorer("hostkit_even_ids")
class EvenIds(Scorer):
    """pre_rollout: 1 for a prompt whose ``index`` is even, 0 for the others."""

    timing = "pre_rollout"
    requires = ["index"]

    def score(self, batch, step_id, **ctx):
        column = batch.non_tensor_batch.get("index")  # a dataset column, as the host carries it
        ids = batch.batch["index"].cpu().long() if column is None else torch.as_tensor([int(i) for i in column])
        return (ids % 2 == 0).to(torch.float32)


@register_sampler("hostkit_proportional")
class Proportional(Sampler):
    """Probabilities in proportion to the scores: a prompt scoring 0 is never drawn."""

    def act(self, scores, batch, **ctx):
        return scores.double() / scores.double().sum()

    def min_probability(self, num_candidates):
        return 0.0


@register_sampler("hostkit_uniform")
class Uniform(Sampler):
    """Every candidate equally likely, whatever its score: the control of ``hostkit_proportional``."""

    def act(self, scores, batch, **ctx):
        return torch.full((len(scores),), 1.0 / len(scores), dtype=torch.float64)

    def min_probability(self, num_candidates):
        return 1.0 / num_candidates


def favoured_counts(favoured: torch.Tensor, budget: int, n_min: int) -> torch.Tensor:
    """``hostkit_favour``'s counts: ``n_min`` each, the rest of ``budget`` split evenly over the ``favoured``
    prompts (every prompt when none is), one more for the first of them in order. What the suite expects."""
    counts = torch.full((len(favoured),), int(n_min), dtype=torch.int64)
    chosen = favoured.bool().nonzero().flatten() if favoured.any() else torch.arange(len(favoured))
    spare, share = divmod(int(budget) - int(counts.sum()), len(chosen))
    counts[chosen] += spare
    counts[chosen[:share]] += 1
    return counts


@register_allocator("hostkit_favour")
class Favour(Allocator):
    """Gives the prompts scoring above 0 (``hostkit_even_ids``: the even ones) every rollout past ``n_min``."""

    def act(self, scores, batch, *, budget, n_min, n_max=None, **ctx):
        counts = favoured_counts(scores > 0, budget, n_min)
        if n_max is not None and int(counts.max()) > int(n_max):
            raise ValueError(f"hostkit_favour gives {int(counts.max())} rollouts to a prompt, over n_max={n_max}")
        return counts


def _block(scorer: str, **more: Any) -> dict[str, Any]:
    return {"mechanism": "reweight", "scorer": {"name": scorer}, "actuator": {"name": "hostkit_linear"}, **more}


def _curriculum(sampler: str) -> dict[str, Any]:
    return {
        "mechanism": "curriculum",
        "prompt_key": "index",
        "scorer": {"name": "hostkit_even_ids"},
        "actuator": {"name": sampler},
    }


def _filter(bound: float = 0.0, **settings: Any) -> dict[str, Any]:
    return {
        "mechanism": "filter",
        "scorer": {"name": "hostkit_reward_spread"},
        "actuator": {"name": "hostkit_above", "params": {"bound": bound}},
        "filter": {"max_rounds": 8, **settings},
    }


def _select(selector: str) -> dict[str, Any]:
    return {"mechanism": "select", "scorer": {"name": "hostkit_advantage"}, "actuator": {"name": selector}}


#: The ``dataflex:`` blocks the suite runs, by what they test.
BLOCKS: dict[str, dict[str, Any]] = {
    "uniform": _block("hostkit_constant"),
    "weights": _block("hostkit_advantage"),
    "invalid": _block("hostkit_nan"),
    "invalid_uniform": _block("hostkit_nan", on_invalid="uniform"),
    "warmup": _block("hostkit_advantage", warmup_step=10**9),
    "stateful": _block("hostkit_counter"),
    "select_all": _select("hostkit_keep_all"),
    "select_some": _select("hostkit_above_median"),
    "select_recompute": _select("hostkit_two_per_group"),
    "draw_even": _curriculum("hostkit_proportional"),
    "counts": {
        "mechanism": "allocate",
        "prompt_key": "index",
        "scorer": {"name": "hostkit_even_ids"},
        "actuator": {"name": "hostkit_favour"},
    },
    "rounds": _filter(),
    "rounds_never": _filter(1.0e9, max_rounds=2),
    "rounds_backfill": _filter(1.0e9, max_rounds=2, on_short="backfill"),
    "draw_uniform": _curriculum("hostkit_uniform"),
}
#: The distribution a checkpoint of another plugin set records and this environment lacks.
ELSEWHERE = "dataflex-hostkit-elsewhere"
