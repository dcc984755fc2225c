"""All ``DataProto`` I/O of the legacy trainer line: read the step's fields, write weights and advantages.

verl's ``RayPPOTrainer`` (and its one-step-off and fully-async subclasses)
holds a step's rollouts in one ``DataProto`` on the driver: padded tensors in
``.batch`` (``responses``, ``response_mask``, ``advantages``, ... all
``(bs, T_response)``), object arrays in ``.non_tensor_batch`` (``uid``,
``data_source``, dataset columns). ``_update_actor`` sends the whole batch to
the actor, so a ``rollout_is_weights`` written into ``.batch`` after
``compute_advantage`` reaches ``ppo_loss`` with no key list to extend.

Kept in one module so another ``DataProto`` (verl's ``neo`` line makes
NeoProto the ``DataProto`` of ``RayPPOTrainer``) is a change here only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from dataflex_core import Batch

from .adapter import MissingFieldError, kept_row_advantages


def held_fields(data: Any) -> list[str]:
    """Every field ``data`` carries, tensors and object arrays."""
    return [*data.batch.keys(), *data.non_tensor_batch.keys()]


def read_batch(data: Any, fields: list[str], *, producers: dict[str, str] | None = None) -> Batch:
    """``fields`` (and ``response_mask``) of ``data`` as a core :class:`~dataflex_core.Batch` (no copy).

    :param producers: optional field -> "what in the verl config writes it" hints for the error message.
    :raises MissingFieldError: naming every field of ``fields`` that ``data`` lacks.
    """
    wanted = list(dict.fromkeys(["response_mask", *fields]))
    tensors, objects = data.batch.keys(), data.non_tensor_batch
    missing = [name for name in wanted if name not in tensors and name not in objects]
    if missing:
        hints = "".join(f"\n  {name}: {producers[name]}" for name in missing if producers and name in producers)
        raise MissingFieldError(
            f"verl's batch at compute_advantage has no {missing} for these {len(data)} samples; fields it holds: "
            f"{sorted(held_fields(data))}.{hints}"
        )
    return Batch(
        {name: data.batch[name] for name in wanted if name in tensors},
        {name: np.asarray(objects[name], dtype=object) for name in wanted if name not in tensors},
    )


def keep_columns(batch: Any, gen_batch: Any, names: list[str]) -> None:
    """Copy the object columns ``names`` that verl moved into ``gen_batch`` back onto ``batch`` (a copy each)."""
    for name in names:
        if name not in batch.non_tensor_batch and name in gen_batch.non_tensor_batch:
            batch.non_tensor_batch[name] = np.array(gen_batch.non_tensor_batch[name], dtype=object, copy=True)


def padding_rows(data: Any) -> torch.Tensor:
    """``(bs,)`` bool: rows verl added as padding (the legacy line adds none: ``_balance_batch`` only reorders)."""
    column = data.non_tensor_batch.get("is_padding")
    if column is None:
        return torch.zeros(len(data), dtype=torch.bool)
    return torch.as_tensor(np.asarray(column, dtype=bool))


def sync_tags(data: Any) -> list[int | None]:
    """Per row, verl's ``global_steps`` tag of the weight sync its rollout used (``None`` where untagged)."""
    column = data.non_tensor_batch.get("max_global_steps")
    if column is None:
        return [None] * len(data)
    return [None if tag is None else int(tag) for tag in column]


def per_token(values: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """``(bs,)`` one value per row, or ``(bs, T)`` -> ``(bs, T)`` float32, 0 where ``response_mask`` is 0."""
    mask = response_mask.bool()
    values = values.to(torch.float32)
    if values.dim() == 1:
        values = values.unsqueeze(-1).expand(mask.shape)
    return torch.where(mask, values, torch.zeros((), dtype=torch.float32))


def write_fields(data: Any, values: dict[str, torch.Tensor]) -> None:
    """Write per-response-token ``values`` (see :func:`per_token`) into ``data.batch``, replacing those fields.

    A ``rollout_is_weights`` verl wrote before is replaced by the product the step computed from it
    (core composes: the value written already contains verl's weights).
    """
    mask = data.batch["response_mask"]
    for name, value in values.items():
        data.batch[name] = per_token(value, mask)


def scale_advantages(data: Any, weights: torch.Tensor) -> None:
    """Multiply the per-token ``weights`` into ``data.batch["advantages"]`` (for a loss that ignores the weights)."""
    advantages = data.batch["advantages"]
    data.batch["advantages"] = advantages * per_token(weights, data.batch["response_mask"]).to(advantages.dtype)


def recompute_advantages(data: Any, kept: torch.Tensor, estimate: Callable[[Any], Any]) -> dict[str, torch.Tensor]:
    """verl's estimator ``estimate`` on the kept rows of ``data`` alone; ``(bs, T)`` advantages and returns.

    Dropped rows get 0; ``data`` itself is not changed (``select_idxs`` copies the rows).
    """
    rows = kept.cpu().nonzero().flatten()
    sub = estimate(data.select_idxs(rows.numpy()))
    return kept_row_advantages(sub.batch, rows, data.batch["response_mask"].shape)
