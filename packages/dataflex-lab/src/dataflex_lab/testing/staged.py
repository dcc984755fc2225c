"""A host of the staged-generation seam, simulated: how the tests of ``mechanism: pilot`` drive a session's steps.

A framework's host asks the seam for each stage's requests, generates exactly them, hands the rows to
``observe``, and trains the rows ``stages.trained()`` keeps. Here a stage's rows are made by hand: one per
requested rollout, 2 response tokens each, the reward a function of the prompt and of the rollout's number
within its request, the prompt's dataset row in ``index`` (what a ledger keyed by ``prompt_key: index`` reads).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from dataflex_core import Batch
from dataflex_core.session import StagedGeneration

from .batches import rows_batch

#: ``reward_of(prompt, k)``: the reward of rollout ``k`` (0, 1, ... within its request) of dataset row ``prompt``.
RewardOf = Callable[[int, int], float]


def stage_rows(asked: Any, reward_of: RewardOf, *, padding: int = 0) -> Batch:
    """The rows a host generates for one stage's requests ``asked``, then ``padding`` framework padding rows (uid
    -1, no token, reward 0, ``is_padding``; without padding rows the batch has no ``is_padding``)."""
    prompts = asked.prompts.repeat_interleave(asked.counts).tolist()
    rank = torch.cat([torch.arange(int(c)) for c in asked.counts]).tolist() if len(asked.counts) else []
    rewards = [float(reward_of(p, k)) for p, k in zip(prompts, rank)]
    uid = asked.uids.repeat_interleave(asked.counts).tolist()
    return rows_batch(
        [2] * len(uid) + [0] * padding, width=3, rewards=rewards + [0.0] * padding, uid=uid + [-1] * padding,
        padding=[False] * len(uid) + [True] * padding if padding else None,
        columns={"index": prompts + [0] * padding},
    )  # fmt: skip


def run_staged_step(
    flex: Any, step: int, reward_of: RewardOf, *, groups: int = 2, rollout_n: int = 4, padding: int = 0
) -> tuple[Any, dict[str, float]]:
    """One step of ``groups`` groups of ``rollout_n`` through the session's staged-generation seam, its trained
    batch (every stage's kept rows, stage after stage) run: ``(the step's stages, the step's metrics)``."""
    seam = flex.seam(StagedGeneration)
    stages = seam.stages(groups, rollout_n=rollout_n)
    parts = []
    while (asked := stages.next()) is not None:
        part = stage_rows(asked, reward_of, padding=padding)
        seam.observe(stages, part, step)
        parts.append(part)
    kept = [(part, keep) for part, keep in zip(parts, stages.trained()) if len(keep)]

    def pick(name: str) -> np.ndarray:
        return np.concatenate([part.non_tensor_batch[name][keep.numpy()] for part, keep in kept])

    trained = rows_batch(
        [2] * sum(len(keep) for _, keep in kept), width=3, uid=pick("uid").astype(np.int64).tolist(),
        rewards=torch.cat([part.batch["rm_scores"][keep].sum(-1) for part, keep in kept]).tolist(),
        columns={"index": pick("index").tolist()},
    )  # fmt: skip
    return stages, flex.run(trained, step, generation=stages).metrics


__all__ = ["RewardOf", "run_staged_step", "stage_rows"]
