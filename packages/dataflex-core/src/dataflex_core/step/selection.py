"""Select's metrics: the kept share of the valid rows and the ``uid`` groups a selection dropped whole.

What a selector may return is the contract's (:func:`dataflex_core.contracts.selection_mask`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..groups import group_index, segment_count
from ..normalize import valid_sample_mask


def selection_metrics(kept: torch.Tensor, batch: Any) -> dict[str, float]:
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
