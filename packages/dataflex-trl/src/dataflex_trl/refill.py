"""``mechanism: filter`` in TRL: generation rounds until the generation batch has its groups, then one batch.

TRL generates one generation batch per ``_generate_and_score_completions``;
its maintainers keep dynamic sampling out of ``GRPOTrainer`` (trl#3708,
#3973, #4764), so the host adds the rounds itself. After TRL's own round the
session admits whole groups (core's :mod:`dataflex_core.mechanisms.filter`);
while too few are admitted, the host draws a further prompt batch from the
session's refill sampler (each prompt ``num_generations`` times, as TRL's
``RepeatSampler`` lays them out) and calls TRL's own
``_generate_and_score_completions`` on it again, so rewards, advantages
(per group) and TRL's log-probs are TRL's. The trained batch is the chosen
groups of every round, merged here (:func:`merge_outputs`: prompts
left-padded, completions right-padded, as TRL pads them) with
``num_items_in_batch`` recounted over its loss mask.

On several processes each round's rows are split evenly over them (TRL
generates and scores its slice on each, gathering the rewards for the group
advantages), the admission is decided once on the gathered rows, and the
trained batch is merged from the gathered outputs; each process keeps its
slice (:mod:`dataflex_trl.distributed`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from dataflex_core import DataFlexError

#: Output keys of one row per completion, padded on the left (TRL left-pads prompts).
LEFT_PADDED = ("prompt_ids", "prompt_mask")
#: Output keys of one row per completion, padded on the right (completions and per-token values).
RIGHT_PADDED = (
    "completion_ids",
    "completion_mask",
    "old_per_token_logps",
    "ref_per_token_logps",
    "sampling_per_token_logps",
    "importance_sampling_ratio",
    "tool_mask",
)
#: One value per completion.
PER_ROW = ("advantages",)


def is_per_row(key: str) -> bool:
    """Whether output ``key`` holds one entry per completion (``num_items_in_batch`` is the batch's count)."""
    return key in LEFT_PADDED or key in RIGHT_PADDED or key in PER_ROW


def _pad(value: torch.Tensor, width: int, fill: float, left: bool) -> torch.Tensor:
    missing = width - value.shape[1]
    if missing <= 0:
        return value
    pad = torch.full((value.shape[0], missing), fill, dtype=value.dtype, device=value.device)
    return torch.cat([pad, value] if left else [value, pad], dim=1)


def merge_outputs(
    outputs: Sequence[dict[str, Any]], rows: Sequence[torch.Tensor], *, pad_token_id: int
) -> dict[str, Any]:
    """The rows ``rows[i]`` of each round's TRL output ``outputs[i]``, as one TRL output.

    :raises DataFlexError: an output key this merge does not know (multimodal inputs), named.
    """
    keys = list(outputs[0])
    known = {*LEFT_PADDED, *RIGHT_PADDED, *PER_ROW, "num_items_in_batch"}
    unknown = sorted({key for output in outputs for key in output} - known)
    if unknown:
        raise DataFlexError(
            f"mechanism filter merges text generation batches, but TRL's output carries {unknown} (multimodal "
            "inputs); use mechanism select with them"
        )
    merged: dict[str, Any] = {}
    for key in keys:
        if key == "num_items_in_batch":
            continue
        parts = [output[key][picked.to(output[key].device)] for output, picked in zip(outputs, rows)]
        if key in PER_ROW:
            merged[key] = torch.cat(parts)
            continue
        width = max(part.shape[1] for part in parts)
        fill = pad_token_id if key in ("prompt_ids", "completion_ids") else 0
        if key == "importance_sampling_ratio" and width == 1:
            merged[key] = torch.cat(parts)
            continue
        merged[key] = torch.cat([_pad(part, width, fill, key in LEFT_PADDED) for part in parts])
    mask = merged["completion_mask"]
    if "tool_mask" in merged:
        mask = mask * merged["tool_mask"]
    merged["num_items_in_batch"] = torch.as_tensor(
        int(mask.sum()), dtype=outputs[0]["num_items_in_batch"].dtype, device=mask.device
    )
    return merged
