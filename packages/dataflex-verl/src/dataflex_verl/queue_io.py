"""All TransferQueue I/O of the host: one read of the needed fields, one write per step hook.

Kept in one small module because verl may move to another data plane (verl
RFC #6988); a second backend would sit beside these functions. Reading
only the fields the step needs (the pipeline's declared fields, plus verl's
estimator inputs when a selector asks for recomputed advantages) is the main
avoidable cost at bs=1024, L=4096; the weights, and any recomputed
advantages, go out in one write.

TransferQueue silently drops requested fields that are missing (or present on
only some keys), so every requested field is checked and the missing ones
are named.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import transfer_queue as tq
from tensordict import TensorDict
from transfer_queue import KVBatchMeta

from dataflex_core import Batch, DataFlexError


class MissingFieldError(DataFlexError, KeyError):
    """A field the pipeline needs is not in the queue for this batch."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


@dataclass
class QueueBatch:
    """Fields read from the queue: padded tensors and object arrays, plus the response layout."""

    batch: Batch
    #: ``(bs + 1,)`` offsets of the jagged ``response_mask``: row ``i`` has ``offsets[i+1] - offsets[i]`` tokens.
    response_offsets: torch.Tensor
    #: ``response_mask`` as one flat bool tensor of all rows' response tokens (the jagged values).
    response_mask_values: torch.Tensor


def _objects(values) -> np.ndarray:
    # A NonTensorStack iterates as NonTensorData wrappers; tolist() gives the plain values (uid strings).
    items = values.tolist() if hasattr(values, "tolist") else list(values)
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out


def read_fields(meta: KVBatchMeta, fields: list[str], *, producers: dict[str, str] | None = None) -> QueueBatch:
    """Read exactly ``fields`` (which must include ``response_mask``) for the keys of ``meta``.

    :param producers: optional field -> "who should have written it" hints for the error message.
    :raises MissingFieldError: naming every requested field that did not come back.
    """
    data = tq.kv_batch_get(keys=meta.keys, partition_id=meta.partition_id, select_fields=list(fields))
    missing = [name for name in fields if name not in data.keys()]
    if missing:
        hints = "".join(f"\n  {name}: {producers[name]}" for name in missing if producers and name in producers)
        raise MissingFieldError(
            f"TransferQueue returned no {missing} for this batch of {len(meta)} samples (partition "
            f"{meta.partition_id!r}); a field must be present on every sample. Fields the queue holds for these "
            f"samples: {sorted(meta.fields or [])}.{hints}"
        )
    response_mask = data.get("response_mask")
    tensors: dict[str, torch.Tensor] = {}
    objects: dict[str, np.ndarray] = {}
    for name in fields:
        value = data.get(name)
        if isinstance(value, torch.Tensor):
            tensors[name] = value.to_padded_tensor(0) if value.is_nested else value
        else:
            objects[name] = _objects(value)
    if response_mask.is_nested:
        offsets, mask_values = response_mask.offsets(), response_mask.values().bool()
    else:
        lengths = torch.full((response_mask.shape[0],), response_mask.shape[1], dtype=torch.int64)
        offsets = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
        mask_values = response_mask.reshape(-1).bool()
    return QueueBatch(Batch(tensors, objects), offsets, mask_values)


def jagged(values: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """Flat per-token ``values`` -> jagged nested tensor with the row lengths given by ``offsets``."""
    offsets = offsets.to(values.device)
    lengths = offsets.diff()
    return torch.nested.nested_tensor_from_jagged(
        values.contiguous(),
        offsets=offsets,
        min_seqlen=int(lengths.min()) if lengths.numel() else 0,
        max_seqlen=int(lengths.max()) if lengths.numel() else 0,
    )


def padded_to_jagged(padded: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """``(bs, L)`` -> jagged nested tensor with the row lengths given by ``offsets`` (vectorised)."""
    lengths = offsets.to(padded.device).diff()
    keep = torch.arange(padded.shape[1], device=padded.device) < lengths.unsqueeze(-1)
    return jagged(padded[keep], offsets)


def rows_to_jagged(row_values: torch.Tensor, offsets: torch.Tensor, mask_values: torch.Tensor) -> torch.Tensor:
    """``(bs,)`` one value per row -> jagged per-token tensor, 0 where ``mask_values`` is false."""
    lengths = offsets.to(row_values.device).diff()
    values = row_values.repeat_interleave(lengths, output_size=int(mask_values.numel()))
    return jagged(torch.where(mask_values.to(values.device), values, torch.zeros((), dtype=values.dtype)), offsets)


def write_response_fields(meta: KVBatchMeta, values: dict[str, torch.Tensor], read: QueueBatch) -> KVBatchMeta:
    """Write per-response-token fields in one ``kv_batch_put`` and return the meta of that write.

    :param values: field name -> ``(bs, L)`` padded per-token values, or ``(bs,)`` one value
        for each response token of a row (0 where ``response_mask`` is 0).
    :param read: the :class:`QueueBatch` read for the same keys (gives the response layout).

    Only fields listed in the returned meta reach verl's actor, so callers must
    return this meta from ``_compute_advantage``.
    """
    fields = {}
    for name, value in values.items():
        if value.dim() == 1:
            fields[name] = rows_to_jagged(value, read.response_offsets, read.response_mask_values)
        else:
            fields[name] = padded_to_jagged(value, read.response_offsets)
    written = tq.kv_batch_put(
        keys=meta.keys, partition_id=meta.partition_id, fields=TensorDict(fields, batch_size=len(meta))
    )
    if meta.extra_info:
        written.extra_info = {**meta.extra_info, **(written.extra_info or {})}
    return written


def write_response_field(meta: KVBatchMeta, name: str, weights: torch.Tensor, read: QueueBatch) -> KVBatchMeta:
    """Write one per-response-token field (see :func:`write_response_fields`); the meta of that write."""
    return write_response_fields(meta, {name: weights}, read)
