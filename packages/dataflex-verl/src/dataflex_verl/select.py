"""``mechanism: select``: a selector's kept set -> 0/1 per-sample weights, and advantages on the kept subset.

The kept set becomes a 0/1 weight per sample that the host renormalises like
any other weight (mean one in the ``loss_agg_mode`` unit), so dropping half
the batch does not halve the step. Selectors may return a bool or float 0/1
mask of shape ``(bs,)`` or a LongTensor of kept row indices; integer tensors
are always read as indices. Padding and empty rows are never kept.

A selector with a truthy ``recompute_advantage`` attribute (GFPO, PODS)
asks for group advantages computed as if only the kept rows had been sampled:
the host reads the estimator's fields in the step's single read, reruns verl's
own estimator on the kept rows alone, and writes those advantages (0 on
dropped rows) and ``returns`` in the same write as the weights. No queue I/O
happens here (:mod:`dataflex_verl.queue_io`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from dataflex_core import Batch, InvalidOutputError, group_index, segment_count, valid_sample_mask

from .outputs import checked_scores, component_label, step_context


def kept_mask(output: Any, batch: Batch, owner: str, step: int) -> torch.Tensor:
    """A selector's output as a bool mask ``(bs,)``; raises naming ``owner`` and ``step`` on a bad value."""
    bs = len(batch)

    def fail(problem: str) -> InvalidOutputError:
        return InvalidOutputError(f"{owner} returned an invalid selection at step {step}: {problem}")

    if not isinstance(output, torch.Tensor):
        raise fail(f"expected a bool/0-1 mask of shape ({bs},) or a LongTensor of indices, got {type(output).__name__}")
    if output.dtype == torch.bool or output.is_floating_point():
        if tuple(output.shape) != (bs,):
            raise fail(f"a mask must have shape ({bs},), got {tuple(output.shape)}")
        values = output.detach().to(torch.float64).cpu()
        if not torch.all((values == 0) | (values == 1)):
            bad = values[(values != 0) & (values != 1)]
            raise fail(f"a mask must hold only 0 and 1, got e.g. {bad[:3].tolist()}")
        keep = values == 1
    elif output.dtype in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        indices = output.detach().cpu().long().flatten()
        if output.dim() != 1:
            raise fail(f"indices must be 1-D, got shape {tuple(output.shape)}")
        if indices.numel() and (indices.min() < 0 or indices.max() >= bs):
            raise fail(f"indices must lie in 0..{bs - 1}, got min {int(indices.min())} max {int(indices.max())}")
        if indices.unique().numel() != indices.numel():
            raise fail("indices must be unique")
        keep = torch.zeros(bs, dtype=torch.bool)
        keep[indices] = True
    else:
        raise fail(f"dtype {output.dtype} is neither a mask (bool/float) nor indices (integer)")
    return keep & valid_sample_mask(batch).cpu()


def run_select(mounted: Any, batch: Batch, step: int) -> torch.Tensor:
    """``scorer.score`` then ``selector.act``; float32 0/1 weights ``(bs,)`` (renormalised by the host)."""
    pipeline = mounted.pipeline
    scores = checked_scores(mounted, batch, step)
    with torch.no_grad():
        output = pipeline.actuator.act(scores, batch, **step_context(mounted, step))
    selector = component_label(pipeline, "actuator")
    keep = kept_mask(output, batch, selector, step)
    if not keep.any() and valid_sample_mask(batch).any():
        raise InvalidOutputError(
            f"{selector} kept no sample at step {step}; a step needs at least one kept sample "
            "(widen the selector's band/fraction, or set dataflex.on_invalid=uniform to train on all samples then)"
        )
    return keep.to(torch.float32)


def wants_recompute(selector: Any) -> bool:
    """True when the selector asks for group advantages on its kept subset."""
    return bool(getattr(selector, "recompute_advantage", False))


def selection_metrics(kept: torch.Tensor, batch: Batch) -> dict[str, float]:
    """``dataflex/kept_fraction`` over valid rows and, with ``uid``, the groups fully dropped."""
    valid = valid_sample_mask(batch).cpu()
    kept = kept.cpu().bool() & valid
    out = {"dataflex/kept_fraction": float(kept.sum()) / max(int(valid.sum()), 1)}
    uid = batch.non_tensor_batch.get("uid")
    if uid is not None and valid.any():
        index, num_groups = group_index(np.asarray(uid, dtype=object)[valid.numpy()])
        kept_per_group = segment_count(index, num_groups, kept[valid])
        dropped = int((kept_per_group == 0).sum())
        out["dataflex/groups_total"] = float(num_groups)
        out["dataflex/groups_fully_dropped"] = float(dropped)
        out["dataflex/groups_fully_dropped_fraction"] = dropped / num_groups
    return out


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
    shape = batch.batch["response_mask"].shape
    out = {}
    for name in ("advantages", "returns"):
        full = torch.zeros(shape, dtype=torch.float32)
        full[rows] = sub.batch[name].to(torch.float32)
        out[name] = full
    return out
