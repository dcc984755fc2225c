"""A DataProto-shaped batch, so plugin code written for verl runs anywhere.

verl hands components a ``DataProto`` with ``.batch`` (padded tensors) and ``.non_tensor_batch`` (numpy object arrays
such as ``uid``). This class has the same attribute names and nothing else a plugin would need to learn.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from .precomputed import STEP_INPUTS_KEY, step_inputs


class Batch:
    """Padded tensors in ``.batch``, per-sample objects in ``.non_tensor_batch``.

    ``batch["response_mask"]`` is ``(bs, L)``, ``non_tensor_batch["uid"]`` an object array ``(bs,)``; rows flagged by an
    optional bool ``batch["is_padding"]`` ``(bs,)`` are padding (weight 0, out of every statistic). ``meta_info`` may
    carry the step's :func:`~dataflex_core.prepare_batch`.
    """

    def __init__(
        self,
        batch: Mapping[str, torch.Tensor],
        non_tensor_batch: Mapping[str, Any] | None = None,
        meta_info: Mapping[str, Any] | None = None,
    ) -> None:
        self.batch = dict(batch)
        self.non_tensor_batch = {
            k: v if isinstance(v, np.ndarray) else np.asarray(v, dtype=object)
            for k, v in (non_tensor_batch or {}).items()
        }
        self.meta_info = dict(meta_info or {})

    def __len__(self) -> int:
        for value in self.batch.values():
            return int(value.shape[0])
        for value in self.non_tensor_batch.values():
            return len(value)
        return 0

    def __contains__(self, key: str) -> bool:
        return key in self.batch or key in self.non_tensor_batch

    def select_rows(self, rows: torch.Tensor) -> Batch:
        """The batch restricted to ``rows`` (a bool mask or an index tensor).

        A prepared batch's step values come along, restricted to the rows, so the sub-batch does not recompute them.
        """
        if rows.dtype == torch.bool:
            rows = rows.nonzero(as_tuple=True)[0]
        idx = rows.cpu().numpy()
        sub = Batch(
            {k: v[rows.to(v.device)] for k, v in self.batch.items()},
            {k: v[idx] for k, v in self.non_tensor_batch.items()},
            self.meta_info,
        )
        sub.meta_info.pop(STEP_INPUTS_KEY, None)
        inputs = step_inputs(self)
        if inputs is not None and "response_mask" in sub.batch:
            sub.meta_info[STEP_INPUTS_KEY] = inputs.select_rows(
                rows,
                sub.batch["response_mask"],
                sub.batch.get("is_padding"),
                sub.non_tensor_batch.get("uid") if inputs.uid is self.non_tensor_batch.get("uid") else None,
            )
        return sub

    def __repr__(self) -> str:
        tensors = ", ".join(f"{k}: {tuple(v.shape)} {v.dtype}" for k, v in self.batch.items())
        objects = ", ".join(self.non_tensor_batch)
        return f"Batch(len={len(self)}, batch={{{tensors}}}, non_tensor_batch=[{objects}])"
