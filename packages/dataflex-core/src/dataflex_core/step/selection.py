"""The selector-output rule, written once: what a selector may return and how it reads as a kept mask.

Hosts and the conformance suite both call :func:`selection_mask`, so a
selector certified by one is accepted by the other. A selector returns either

- a 0/1 **mask** of shape ``(bs,)``, as ``torch.bool`` or a float dtype, or
- kept row **indices**, a 1-D ``int64`` (LongTensor) or ``int32`` tensor,
  each row at most once, every index in ``0..bs-1``.

Other integer dtypes are refused: ``uint8`` is what old PyTorch code used for
masks, so a ``uint8`` tensor of 0/1 values read as indices would keep rows 0
and 1 silently.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..errors import InvalidOutputError
from ..groups import group_index, segment_count
from ..normalize import valid_sample_mask

#: Integer dtypes read as kept row indices.
INDEX_DTYPES = (torch.int64, torch.int32)


def selection_mask(output: Any, bs: int) -> torch.Tensor:
    """A selector's output as a bool ``(bs,)`` mask on the output's device.

    :param output: what ``Selector.act`` returned.
    :param bs: rows in the batch the selector was given.
    :raises InvalidOutputError: ``"<what was seen>, expected <the contract>"``; callers add the selector
        and the step (hosts) or the case (conformance).
    """
    accepted = f"a bool or float 0/1 mask of shape ({bs},), or a 1-D int64/int32 tensor of kept row indices"
    if not isinstance(output, torch.Tensor):
        raise InvalidOutputError(f"got {type(output).__name__}, expected {accepted}")
    if output.dtype == torch.bool or output.is_floating_point():
        if tuple(output.shape) != (bs,):
            raise InvalidOutputError(f"mask shape {tuple(output.shape)}, expected ({bs},)")
        if output.dtype == torch.bool:
            return output.detach()
        values = output.detach()
        if not bool(((values == 0) | (values == 1)).all()):
            bad = values[(values != 0) & (values != 1)]
            raise InvalidOutputError(f"mask holds {bad[:3].tolist()}, expected only 0 and 1")
        return values == 1
    if output.dtype not in INDEX_DTYPES:
        hint = " (for a mask, return torch.bool)" if output.dtype == torch.uint8 else ""
        raise InvalidOutputError(f"dtype {output.dtype}, expected {accepted}{hint}")
    if output.dim() != 1:
        raise InvalidOutputError(f"indices shape {tuple(output.shape)}, expected a 1-D tensor")
    indices = output.detach().long()
    if indices.numel() and (int(indices.min()) < 0 or int(indices.max()) >= bs):
        raise InvalidOutputError(
            f"indices span [{int(indices.min())}, {int(indices.max())}], expected them to lie in 0..{bs - 1}"
        )
    if torch.unique(indices).numel() != indices.numel():
        hint = " (a 0/1 mask must be bool or float, not integer)" if indices.numel() == bs else ""
        raise InvalidOutputError(f"indices repeat a row{hint}, expected unique indices, each kept row once")
    keep = torch.zeros(bs, dtype=torch.bool, device=output.device)
    keep[indices] = True
    return keep


def kept_rows(output: Any, batch: Any, *, owner: str, step: int) -> torch.Tensor:
    """:func:`selection_mask` restricted to valid rows (padding and empty rows are never kept), on the CPU.

    :raises InvalidOutputError: ``"<owner> returned an invalid selection at step <step>: <problem>"``.
    """
    try:
        keep = selection_mask(output, len(batch))
    except InvalidOutputError as exc:
        raise InvalidOutputError(f"{owner} returned an invalid selection at step {step}: {exc}") from None
    return keep.cpu() & valid_sample_mask(batch).cpu()


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
