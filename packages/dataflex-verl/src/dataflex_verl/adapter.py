"""What both verl trainer lines do with the step's fields, whatever carries them (TransferQueue or ``DataProto``).

The V1 trainers (:mod:`dataflex_verl.mixin`) and the legacy ``RayPPOTrainer``
line (:mod:`dataflex_verl.legacy`) differ only in how they read the step's
fields and write the result back; which fields the components see, when
verl's own ``rollout_is_weights`` are composed with DataFlex's, and how the
session's result becomes the fields to write are the same, and live here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from dataflex_core import Batch, DataFlexError
from dataflex_core.session import DataFlexSession, LossWeights

#: The field verl's policy losses multiply into ``pg_losses``.
WEIGHTS_FIELD = "rollout_is_weights"

#: ``kept rows (bs,) -> {"advantages": (bs, L), "returns": (bs, L)}``: verl's estimator on the kept rows alone.
Recompute = Callable[[torch.Tensor], dict[str, torch.Tensor]]


class MissingFieldError(DataFlexError, KeyError):
    """A field the pipeline needs is not in verl's batch for this step."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


def only_fields(batch: Batch, names: list[str]) -> Batch:
    """``batch`` limited to the fields ``names`` (and ``response_mask``): what the components may see."""
    keep = {"response_mask", *names}
    return Batch(
        {k: v for k, v in batch.batch.items() if k in keep},
        {k: v for k, v in batch.non_tensor_batch.items() if k in keep},
        batch.meta_info,
    )


def step_fields(session: DataFlexSession, *, verl_weights: bool) -> tuple[list[str], bool]:
    """``(fields the components see, compose)``.

    :param verl_weights: whether verl wrote its own ``rollout_is_weights`` this step (rollout correction):
        DataFlex's weights are then multiplied into them (composed), never written over them.
    """
    fields = list(session.fields)
    compose = verl_weights and session.seam(LossWeights) is not None
    if compose and WEIGHTS_FIELD not in fields:
        fields.append(WEIGHTS_FIELD)
    return fields, compose


def step_outputs(
    session: DataFlexSession,
    read: Batch,
    fields: list[str],
    *,
    compose: bool,
    is_padding: torch.Tensor,
    step: int,
    start: float,
    recompute: Recompute,
    metrics: dict[str, Any],
    generation: Any = None,
) -> dict[str, torch.Tensor] | None:
    """The session's step on ``read``; the fields to write (``rollout_is_weights``, maybe advantages), or None.

    :param read: the step's fields as padded tensors and object arrays (may hold more than ``fields``:
        the estimator's inputs for a recomputation).
    :param is_padding: ``(bs,)`` bool, the rows verl added as padding.
    :param generation: the generation rounds that built the batch (``session.seam(GenerationRounds)``), if any.
    """
    batch = only_fields(read, fields)  # components see what they declared, as without recomputation
    batch.batch["is_padding"] = is_padding
    verl_weights = batch.batch.get(WEIGHTS_FIELD) if compose else None
    # verl's advantages: the compute counters count trained rows whose advantage is zero as wasted
    verl_advantages = read.batch.get("advantages")
    result = session.run(
        batch, step, importance_weights=verl_weights, start=start, advantages=verl_advantages, generation=generation
    )
    advantages: dict[str, torch.Tensor] = {}
    if result.recompute_advantage:  # the selector's kept rows, through verl's own estimator
        advantages = recompute(result.kept)
        result.timed(start)
    metrics.update(result.metrics)
    if result.applied is None:  # a uniform fallback, or a mechanism that acts on the sampler: verl's loss
        return None
    return {**advantages, WEIGHTS_FIELD: result.applied}


def kept_row_advantages(sub: Any, rows: torch.Tensor, shape: torch.Size) -> dict[str, torch.Tensor]:
    """``advantages`` and ``returns`` that verl's estimator computed on the kept ``rows`` alone, as float32
    ``shape`` tensors over the whole batch, 0 on dropped rows.

    :param sub: the estimator's output batch for those rows (``sub["advantages"]``: ``(len(rows), L)``).
    """
    out = {}
    for name in ("advantages", "returns"):
        full = torch.zeros(shape, dtype=torch.float32)
        full[rows] = sub[name].to(torch.float32)
        out[name] = full
    return out
