"""``mechanism: curriculum``: a ``pre_rollout`` scorer and a sampler choose the prompts worth rolling out.

Reweighting and selection act after the rollouts exist; a curriculum spends
the rollouts themselves better. Before each batch of prompts is drawn, the
host's train sampler (:class:`~dataflex_core.step.prompt_sampler.CurriculumSampler`)
builds a batch of *candidate prompts* (every row of the train dataset, or
``candidates`` of them), with the dataset columns the components read and the
per-prompt history the host keeps (:data:`~dataflex_core.step.fields.PROMPT_FIELDS`);
the ``pre_rollout`` scorer scores them, the sampler (:class:`~dataflex_core.Sampler`)
turns the scores into probabilities, and the batch is drawn by them. After the
step's rewards exist, :func:`curriculum_step` feeds the history and the
scorer's :meth:`~dataflex_core.Scorer.observe` from them, keyed by the prompt
id the dataset carries (``prompt_key``). No loss weights are written: the loss
is the framework's own.

Config (``dataflex:`` block): ``prompt_key`` (dataset column identifying each
prompt, default ``index``: verl copies ``extra_info.index`` into it),
``candidates`` (prompts scored per draw; ``0``, the default, scores every
prompt of the dataset), ``success_threshold`` (a response succeeds when its
reward reaches it; unset: a reward in ``[0, 1]`` is that fraction of a
success), ``warmup_step`` (draws are uniform before it).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..batch import Batch
from ..config import DataFlexPipeline, to_plain
from ..errors import ConfigError, IncompatibleComponentError
from ..normalize import valid_sample_mask
from .fields import is_canonical, is_prompt_field
from .history import PromptHistory

logger = logging.getLogger("dataflex_core.step")

#: Keys of the ``dataflex:`` block that only ``mechanism: curriculum`` reads, with their defaults.
CURRICULUM_KEYS = {"prompt_key": "index", "candidates": 0, "success_threshold": None}
#: The field of the step's rows that carries the outcome reward (on the last response token).
REWARD_FIELD = "rm_scores"
METRIC_PREFIX = "dataflex/curriculum/"


@dataclass(frozen=True)
class CurriculumSettings:
    prompt_key: str
    candidates: int
    success_threshold: float | None


def curriculum_settings(block: Any) -> CurriculumSettings:
    """The curriculum keys of the ``dataflex:`` block, checked; raises :class:`ConfigError` with the fix."""
    plain = to_plain(block) or {}
    key = plain.get("prompt_key", CURRICULUM_KEYS["prompt_key"])
    if not isinstance(key, str) or not key:
        raise ConfigError(
            f"dataflex.prompt_key must name the dataset column that identifies each prompt, got {key!r}; "
            "e.g. prompt_key: index (verl copies extra_info.index into it)"
        )
    candidates = plain.get("candidates", CURRICULUM_KEYS["candidates"])
    if isinstance(candidates, bool) or not isinstance(candidates, int) or candidates < 0:
        raise ConfigError(
            f"dataflex.candidates must be an integer >= 0 (0 scores every prompt of the dataset), got {candidates!r}"
        )
    threshold = plain.get("success_threshold", CURRICULUM_KEYS["success_threshold"])
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))):
        raise ConfigError(
            f"dataflex.success_threshold must be a number (a response succeeds when its reward reaches it) or "
            f"unset (a reward in [0, 1] counts as that fraction of a success), got {threshold!r}"
        )
    return CurriculumSettings(key, candidates, None if threshold is None else float(threshold))


def candidate_fields(pipeline: DataFlexPipeline) -> list[str]:
    """The history fields (:data:`PROMPT_FIELDS`) the scorer and the sampler read from the candidates."""
    names = [*pipeline.scorer.requires, *pipeline.actuator.requires]
    return list(dict.fromkeys(name for name in names if is_prompt_field(name)))


def candidate_columns(pipeline: DataFlexPipeline) -> list[str]:
    """The dataset columns the scorer and the sampler read from the candidates (every other name they require)."""
    names = [*pipeline.scorer.requires, *pipeline.actuator.requires]
    return list(dict.fromkeys(name for name in names if not is_prompt_field(name) and name != "response_mask"))


def check_components(pipeline: DataFlexPipeline, host_name: str) -> None:
    """A curriculum scorer and sampler read only what exists before rollout: history fields and dataset columns."""
    owners = [(pipeline.scorer_spec, pipeline.scorer), (pipeline.actuator_spec, pipeline.actuator)]
    for spec, component in owners:
        early = [name for name in component.requires if is_canonical(name) and name != "response_mask"]
        if early:
            raise IncompatibleComponentError(
                f"{spec.kind} {spec.label} requires {early}, but in mechanism curriculum it runs on candidate "
                f"prompts before any rollout, when {host_name} has no responses yet; a pre_rollout component reads "
                "the prompt history fields (prompt_index, times_sampled, rollouts, successes, ...) and dataset columns"
            )
        if component.needs_groups:
            raise IncompatibleComponentError(
                f"{spec.kind} {spec.label} needs GRPO groups (needs_groups=True), but candidate prompts have no "
                "rollouts and no uid yet; mechanism curriculum takes components without needs_groups"
            )


def candidate_batch(
    history: PromptHistory,
    rows: torch.Tensor,
    fields: Sequence[str],
    columns: Mapping[str, np.ndarray],
) -> Batch:
    """The candidates ``rows`` as a batch: ``prompt_index`` (always, as ``response_mask`` is in a step's batch)
    and the history ``fields`` in ``.batch``/``.non_tensor_batch``, the dataset ``columns`` (each a numpy
    array over every dataset row) in ``.non_tensor_batch``."""
    values = history.fields(rows, list(dict.fromkeys(["prompt_index", *fields])))
    tensors = {k: v for k, v in values.items() if isinstance(v, torch.Tensor)}
    objects: dict[str, np.ndarray] = {k: v for k, v in values.items() if not isinstance(v, torch.Tensor)}
    index = rows.numpy()
    for name, column in columns.items():
        objects[name] = np.asarray(column[index], dtype=object)
    return Batch(tensors, objects)


def outcomes_batch(history: PromptHistory, outcomes: Any) -> Batch:
    """The :data:`~dataflex_core.step.fields.OUTCOME_FIELDS` batch ``Scorer.observe`` receives."""
    rows = outcomes.rows
    return Batch(
        {
            "prompt_index": rows.clone(),
            "rollouts": outcomes.rollouts.clone(),
            "successes": outcomes.successes.clone(),
            "reward_mean": outcomes.reward_mean.clone(),
            "uniform_reward": outcomes.uniform_reward.clone(),
        },
        {"prompt_id": np.asarray(history.ids.values[rows.numpy()], dtype=object)},
    )


def row_rewards(batch: Any) -> torch.Tensor:
    """Each row's outcome reward: ``rm_scores`` summed over its valid response tokens (float64 ``(bs,)``)."""
    scores = batch.batch.get(REWARD_FIELD)
    if scores is None:
        raise ConfigError(
            f"mechanism curriculum feeds its history from the step's rewards, but the batch has no {REWARD_FIELD!r}"
        )
    mask = batch.batch["response_mask"].to(torch.bool)
    return torch.where(mask, scores.to(torch.float64), torch.zeros((), dtype=torch.float64)).sum(-1)


def curriculum_step(
    pipeline: DataFlexPipeline,
    settings: CurriculumSettings,
    batch: Any,
    step: int,
    ctx: dict[str, Any],
    history: PromptHistory,
) -> dict[str, float]:
    """Feed the step's rewards to the prompt history and to the scorer's ``observe``; the step's metrics.

    ``batch`` holds the step's real rows (framework padding removed) with ``response_mask``, ``rm_scores``
    and the ``prompt_key`` column. Rows with an empty response stay out of the history.
    """
    valid = valid_sample_mask(batch)
    ids = batch.non_tensor_batch.get(settings.prompt_key)
    if ids is None:
        raise ConfigError(
            f"mechanism curriculum keys its history by the dataset column dataflex.prompt_key="
            f"{settings.prompt_key!r}, but the step's rows do not carry it; carry it into the rollouts or set "
            "dataflex.prompt_key to a column that is carried"
        )
    keep = valid.cpu().numpy()
    rows = history.ids.rows(np.asarray(ids, dtype=object)[keep], f"the rows of step {step}")
    rewards = row_rewards(batch)[valid]
    outcomes = history.record(rows, rewards.cpu(), step)
    if outcomes.outside_unit and settings.success_threshold is None:
        logger.warning(
            "dataflex: %d rewards of step %d lie outside [0, 1] and were clipped into it to count successes; set "
            "dataflex.success_threshold for rewards on another scale",
            outcomes.outside_unit,
            step,
        )
    with torch.no_grad():
        pipeline.scorer.observe(outcomes_batch(history, outcomes), step, **ctx)
    rollouts = outcomes.rollouts.to(torch.float64)
    prompts = len(outcomes.rows)
    return {
        f"{METRIC_PREFIX}prompts": float(prompts),
        f"{METRIC_PREFIX}success_rate": float(outcomes.successes.sum() / rollouts.sum()) if prompts else 0.0,
        f"{METRIC_PREFIX}uniform_reward_fraction": float(outcomes.uniform_reward.to(torch.float64).mean())
        if prompts
        else 0.0,
        f"{METRIC_PREFIX}seen_fraction": history.seen_fraction,
        f"{METRIC_PREFIX}rewards_outside_unit": float(outcomes.outside_unit),
    }
