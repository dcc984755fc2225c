"""``mechanism: select`` in verl: group advantages recomputed on the kept rows by verl's own estimator.

Core's step turns a selector's kept set into 0/1 per-sample weights,
renormalised like any other weights (mean one in the ``loss_agg_mode`` unit),
so dropping half the batch does not halve the step; the selector-output rule
and the selection metrics are core's (:mod:`dataflex_core.step.selection`).

A selector with ``recompute_advantage`` set (GFPO, PODS) asks for group
advantages computed as if only the kept rows had been sampled: the host reads
the estimator's fields in the step's single read, reruns verl's own estimator
on the kept rows alone, and writes those advantages (0 on dropped rows) and
``returns`` in the same write as the weights. No queue I/O happens here
(:mod:`dataflex_verl.queue_io`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from dataflex_core import Batch

from .adapter import kept_row_advantages

#: Fields verl's ``_compute_advantage`` reads; the recomputation reads those the queue holds.
ESTIMATOR_FIELDS = ("uid", "response_mask", "rm_scores", "rollout_log_probs", "old_log_probs", "ref_log_prob", "values")


def estimator_fields(config: Any, held: Iterable[str]) -> list[str]:
    """The fields the recomputation reads: verl's estimator inputs among ``held`` (the queue's fields).

    ``token_level_rewards`` (KL in reward) replaces ``rm_scores`` as the reward when verl wrote it.
    """
    held = set(held)
    fields = [name for name in ESTIMATOR_FIELDS if name in held]
    if config.algorithm.use_kl_in_reward and "token_level_rewards" in held:
        fields.append("token_level_rewards")
    return fields


def recompute_advantages(config: Any, batch: Batch, keys: list[str], kept: torch.Tensor) -> dict[str, torch.Tensor]:
    """Rerun verl's advantage estimator on the kept rows alone; padded ``advantages`` and ``returns``.

    ``batch`` is the step's read for the trajectory ``keys`` (row order) and holds the
    :func:`estimator_fields`; ``kept`` is a bool ``(bs,)`` over its rows. Returns float32
    ``(bs, L)`` tensors, 0 on dropped rows, for the host's single write.
    """
    from tensordict import TensorDict
    from verl import DataProto
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    rows = kept.cpu().nonzero().flatten()
    names = estimator_fields(config, [*batch.batch, *batch.non_tensor_batch])
    tensors = {name: batch.batch[name][rows] for name in names if name in batch.batch}
    uid = batch.non_tensor_batch["uid"][rows.numpy()]
    sub = DataProto(batch=TensorDict(tensors, batch_size=[len(rows)]), non_tensor_batch={"uid": uid})
    if "token_level_rewards" not in sub.batch.keys():
        sub.batch["token_level_rewards"] = sub.batch["rm_scores"]
    sub.batch["token_level_scores"] = sub.batch["rm_scores"]
    sub = compute_advantage_for_multi_trajectories(
        sub,
        batch_keys=[keys[i] for i in rows.tolist()],
        adv_estimator=config.algorithm.adv_estimator,
        gamma=config.algorithm.gamma,
        lam=config.algorithm.lam,
        num_repeat=config.actor_rollout_ref.rollout.n,
        norm_adv_by_std_in_grpo=config.algorithm.get("norm_adv_by_std_in_grpo", True),
        config=config.algorithm,
    )
    return kept_row_advantages(sub.batch, rows, batch.batch["response_mask"].shape)
