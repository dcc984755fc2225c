"""Components the fit-loop tests use, imported in every verl process of a test run.

The trainer runs in verl's task runner, a Ray actor, so a component defined in
a test's own module would not exist there. The fixtures put this folder on
``PYTHONPATH`` and name this module in ``VERL_USE_EXTERNAL_MODULES``; its
decorators register the components in each process, as a user's own plugin
module would; ``fittest_constant`` and ``fittest_proportional`` (a sampler) are
the testing kit's toy components.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import torch

from dataflex_core import (
    Allocator,
    Scorer,
    Selector,
    even_split,
    register_allocator,
    register_scorer,
    register_selector,
    valid_sample_mask,
)
from dataflex_lab.testing import mean_abs_advantage, register_toy_components
from dataflex_lab.testing.components import DomainPreferenceScorer

#: Folder where the components write what they saw (set by the tests).
PROBE_ENV = "DATAFLEX_FIT_PROBE_DIR"


def _record(name: str, payload: dict) -> None:
    folder = os.environ.get(PROBE_ENV)
    if folder:
        path = Path(folder) / f"{name}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as out:
            out.write(json.dumps(payload) + "\n")


register_toy_components("fittest")


@register_scorer("fittest_counting")
class CountingScorer(Scorer):
    """Stateful: counts its calls in its ``state_dict`` and records the count each step.

    A resumed run that restores component state continues the count; one that does not starts over.
    Scores each response's mean ``|advantage|``; up to step ``uniform_until``, the same score for every
    sample (uniform weights), so one run holds an equality check and a non-uniform step.
    """

    requires = ["advantages"]

    def __init__(self, uniform_until: int = 0, **kwargs):
        super().__init__(**kwargs)
        self.uniform_until = int(uniform_until)
        self.calls = 0

    def score(self, batch, step_id, **ctx):
        self.calls += 1
        _record("counting", {"step": int(step_id), "calls": self.calls})
        if int(step_id) <= self.uniform_until:
            return torch.full((len(batch),), 0.5)
        return mean_abs_advantage(batch)

    def state_dict(self):
        return {"calls": self.calls}

    def load_state_dict(self, state):
        self.calls = int(state["calls"])


@register_selector("fittest_drop_half_groups")
class DropHalfGroups(Selector):
    """Keeps the groups whose sorted position is even, drops the others whole; asks for advantages on the kept set.

    Records how many rows and groups it dropped, so a test can match them with what the loss received.
    """

    needs_groups = True
    recompute_advantage = True

    def act(self, scores, batch, **ctx):
        uid = np.asarray(batch.non_tensor_batch["uid"], dtype=object)
        names = sorted(set(uid.tolist()))
        keep_groups = {name for i, name in enumerate(names) if i % 2 == 0}
        keep = torch.tensor([u in keep_groups for u in uid.tolist()], dtype=torch.bool) & valid_sample_mask(batch)
        _record(
            "drop_half_groups",
            {"rows": len(uid), "kept_rows": int(keep.sum()), "groups": len(names), "kept_groups": len(keep_groups)},
        )
        return keep


@register_scorer("fittest_vowels_only")
class VowelsOnly(DomainPreferenceScorer):
    """pre_rollout: 1 for candidates of the ``vowel`` domain, 0 for the others; records the history it sees.

    Stateful: counts the steps it observed, so a resumed run that restores component state continues the count.
    """

    requires = ["domain", "rollouts", "times_sampled"]
    domain_scores = {"vowel": 1.0}

    def score(self, batch, step_id, **ctx):
        _record(
            "vowels_only",
            {
                "step": int(step_id),
                "candidates": len(batch),
                "rollouts": int(batch.batch["rollouts"].sum()),
                "seen": int((batch.batch["times_sampled"] > 0).sum()),
                "observed": self.observed,
            },
        )
        return super().score(batch, step_id, **ctx)


@register_allocator("fittest_ranked")
class RankedAllocator(Allocator):
    """``n_min`` for the half of the prompts with the smaller ids, the rest of the budget split over the others.

    Records the counts it gave each prompt id, so a test can match them with what verl generated.
    """

    requires = ["prompt_id"]

    def act(self, scores, batch, *, budget, n_min, n_max, step_id=0, **ctx):
        ids = [int(i) for i in batch.non_tensor_batch["prompt_id"]]
        order = sorted(range(len(ids)), key=lambda i: ids[i])
        high = order[len(ids) // 2 :]  # the larger ids; the others keep n_min
        counts = torch.full((len(ids),), n_min, dtype=torch.int64)
        counts[high] = even_split(len(high), budget - n_min * len(ids)) + n_min
        _record("ranked", {"step": int(step_id), "counts": {str(ids[i]): int(counts[i]) for i in range(len(ids))}})
        return counts


@register_scorer("fittest_vowel_variance")
class VowelVariance(Scorer):
    """post_reward: a group's reward variance for prompts of the ``vowel`` domain, 0 for the others; up to step
    ``uniform_until``, 1 for every group (a band above 0 then admits them all).

    Records every call (one per generation round): the prompt id, reward and score of each row, in verl's order.
    """

    requires = ["rm_scores", "response_mask", "uid", "domain", "index"]
    timing = "post_reward"
    needs_groups = True

    def __init__(self, uniform_until: int = 0, **kwargs):
        super().__init__(**kwargs)
        self.uniform_until = int(uniform_until)

    def score(self, batch, step_id, **ctx):
        mask = batch.batch["response_mask"].bool()
        rewards = torch.where(mask, batch.batch["rm_scores"].double(), torch.zeros((), dtype=torch.float64)).sum(-1)
        uid = np.asarray(batch.non_tensor_batch["uid"], dtype=object)
        scores = torch.zeros(len(uid), dtype=torch.float32)
        for group in set(uid.tolist()):
            rows = torch.as_tensor(uid == group)
            scores[rows] = float(rewards[rows].var(unbiased=False))
        vowel = torch.as_tensor(np.asarray(batch.non_tensor_batch["domain"], dtype=object) == "vowel")
        scores = torch.where(vowel, scores, torch.zeros(()))
        if int(step_id) <= self.uniform_until:
            scores = torch.ones(len(uid))
        _record(
            "vowel_variance",
            {
                "step": int(step_id),
                "index": [int(i) for i in batch.non_tensor_batch["index"]],
                "rewards": rewards.tolist(),
                "scores": scores.tolist(),
            },
        )
        return scores


@register_scorer("fittest_recorded_solve_rate")
class RecordedSolveRate(Scorer):
    """post_reward: each group's mean reward (``group_solve_rate``'s value for rewards in [0, 1]); records every
    call (one per generation call of ``mechanism: pilot``): each row's prompt id, uid and reward, in verl's order."""

    requires = ["rm_scores", "response_mask", "uid", "index"]
    timing = "post_reward"
    granularity = "prompt"
    needs_groups = True

    def score(self, batch, step_id, **ctx):
        mask = batch.batch["response_mask"].bool()
        rewards = torch.where(mask, batch.batch["rm_scores"].double(), torch.zeros((), dtype=torch.float64)).sum(-1)
        valid = valid_sample_mask(batch).cpu()
        uid = [int(u) for u in batch.non_tensor_batch["uid"]]
        scores = torch.zeros(len(uid), dtype=torch.float32)
        for group in set(uid):
            rows = torch.as_tensor([u == group for u in uid]) & valid
            scores[torch.as_tensor([u == group for u in uid])] = (
                float(rewards[rows].clamp(0, 1).mean()) if rows.any() else 0.0
            )
        _record(
            "recorded_solve_rate",
            {"step": int(step_id), "index": [int(i) for i in batch.non_tensor_batch["index"]], "uid": uid,
             "rewards": rewards.tolist(), "valid": valid.tolist()},
        )  # fmt: skip
        return scores
