"""All TransferQueue I/O of the host: verl's own get and put, widened; a separate pair as fallback.

Kept in one small module because verl may move to another data plane (verl
RFC #6988); a second backend would sit beside these functions.

At bs=1024, L=4096 the queue round trips, not the scoring, are the host's
cost, and verl's ``_compute_advantage`` already does one ``kv_batch_get`` and
one ``kv_batch_put`` on the step's keys. So the host rides on those:
:func:`advantage_capture` makes verl's ``trainer_base.tq`` a :class:`VerlQueue`
that, only in the thread running a DataFlex step and only for those keys,
adds the pipeline's extra fields to verl's get (verl still sees exactly what
it asked for) and hands verl's put fields to a callback that adds the weights
(and any recomputed advantages) to that same put. Everywhere else it passes
every call straight through. When no put is seen, the mixin falls back to
:func:`read_fields` and :func:`write_response_fields`, one get and one put of
its own.

TransferQueue silently drops requested fields that are missing (or present on
only some keys), so every needed field is checked and the missing ones are
named (:func:`queue_batch`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import transfer_queue as tq
from tensordict import TensorDict
from transfer_queue import KVBatchMeta

from dataflex_core import Batch

from .adapter import MissingFieldError


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


def column_values(batch: TensorDict, name: str) -> list[Any]:
    """Every row's value of ``name`` in a prompt batch verl is about to dispatch (a tensor or non-tensor column)."""
    if name not in batch.keys():
        raise MissingFieldError(
            f"verl's prompt batch has no column {name!r} (it has {sorted(batch.keys())}); DataFlex reads each prompt's "
            "id from it before rollout: set dataflex.prompt_key to a column of the train dataset"
        )
    value = batch.get(name)
    if isinstance(value, torch.Tensor):
        return value.tolist()
    return _objects(value).tolist()


def read_fields(meta: KVBatchMeta, fields: list[str], *, producers: dict[str, str] | None = None) -> QueueBatch:
    """Read exactly ``fields`` (which must include ``response_mask``) for the keys of ``meta``.

    :param producers: optional field -> "who should have written it" hints for the error message.
    :raises MissingFieldError: naming every requested field that did not come back.
    """
    data = tq.kv_batch_get(keys=meta.keys, partition_id=meta.partition_id, select_fields=list(fields))
    return queue_batch(data, fields, meta, held=meta.fields or [], producers=producers)


def queue_batch(
    data: Mapping[str, Any] | TensorDict,
    fields: list[str],
    meta: KVBatchMeta,
    *,
    held: list[str],
    producers: dict[str, str] | None = None,
) -> QueueBatch:
    """``fields`` of queue ``data`` (jagged or padded, as TransferQueue returns them) as a padded :class:`QueueBatch`.

    :param held: the fields known to exist for these samples (for the error message).
    :raises MissingFieldError: naming every field of ``fields`` missing from ``data``.
    """
    missing = [name for name in fields if name not in data.keys()]
    if missing:
        hints = "".join(f"\n  {name}: {producers[name]}" for name in missing if producers and name in producers)
        raise MissingFieldError(
            f"TransferQueue returned no {missing} for this batch of {len(meta)} samples (partition "
            f"{meta.partition_id!r}); a field must be present on every sample. Fields the queue holds for these "
            f"samples: {sorted(held)}.{hints}"
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
    # in place: the repeat is this function's own buffer, so no second (tokens,) tensor for the zeros
    return jagged(values.masked_fill_(~mask_values.to(values.device), 0), offsets)


def response_fields(values: dict[str, torch.Tensor], read: QueueBatch) -> dict[str, torch.Tensor]:
    """Per-response-token ``values`` as the jagged tensors the queue stores.

    :param values: field name -> ``(bs, L)`` padded per-token values, or ``(bs,)`` one value
        for each response token of a row (0 where ``response_mask`` is 0).
    :param read: the :class:`QueueBatch` read for the same keys (gives the response layout).
    """
    out = {}
    for name, value in values.items():
        if value.dim() == 1:
            out[name] = rows_to_jagged(value, read.response_offsets, read.response_mask_values)
        else:
            out[name] = padded_to_jagged(value, read.response_offsets)
    return out


def write_response_fields(meta: KVBatchMeta, values: dict[str, torch.Tensor], read: QueueBatch) -> KVBatchMeta:
    """Write per-response-token fields (see :func:`response_fields`) in one ``kv_batch_put``; that write's meta.

    Only fields listed in the returned meta reach verl's actor, so callers must
    return this meta from ``_compute_advantage``.
    """
    fields = TensorDict(response_fields(values, read), batch_size=len(meta))
    written = tq.kv_batch_put(keys=meta.keys, partition_id=meta.partition_id, fields=fields)
    if meta.extra_info:
        written.extra_info = {**meta.extra_info, **(written.extra_info or {})}
    return written


# -- riding on verl's own get and put ---------------------------------------------

#: The module whose global ``tq`` verl's ``_compute_advantage`` calls.
VERL_TRAINER_MODULE = "verl.trainer.ppo.v1.trainer_base"

#: ``(verl's get data, with the extra fields; verl's put fields) -> the fields to put instead``.
PutHook = Callable[[TensorDict, TensorDict], TensorDict]


@dataclass
class AdvantageCapture:
    """One DataFlex ``_compute_advantage`` call: which keys, what to add to verl's get, what to do at its put."""

    keys: list[str]
    extra_fields: list[str]
    on_put: PutHook
    #: verl's get result, including ``extra_fields`` (set at verl's get).
    got: TensorDict | None = None
    #: True once verl's put went out with the hook's fields.
    merged: bool = False


_current = threading.local()


class VerlQueue:
    """Stands in for ``transfer_queue`` as verl's ``trainer_base.tq``; a pass-through outside a capture.

    Every attribute is looked up on the wrapped module at call time, so
    ``kv_batch_get``/``kv_batch_put`` stay the queue's own functions.
    """

    def __init__(self, wrapped: Any) -> None:
        self.wrapped = wrapped

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)

    def kv_batch_get(self, keys: Any, partition_id: str, select_fields: Any = None) -> TensorDict:
        capture: AdvantageCapture | None = getattr(_current, "capture", None)
        if capture is None or capture.got is not None or not isinstance(select_fields, list) or keys != capture.keys:
            return self.wrapped.kv_batch_get(keys=keys, partition_id=partition_id, select_fields=select_fields)
        added = [name for name in capture.extra_fields if name not in select_fields]
        data = self.wrapped.kv_batch_get(keys=keys, partition_id=partition_id, select_fields=select_fields + added)
        capture.got = data
        added = [name for name in added if name in data.keys()]
        return data.exclude(*added) if added else data  # verl sees exactly the fields it asked for

    def kv_batch_put(self, keys: list[str], partition_id: str, fields: TensorDict | None = None, **kwargs: Any):
        capture: AdvantageCapture | None = getattr(_current, "capture", None)
        if capture is not None and capture.got is not None and not capture.merged and fields is not None:
            if keys == capture.keys:
                fields = capture.on_put(capture.got, fields)
                written = self.wrapped.kv_batch_put(keys=keys, partition_id=partition_id, fields=fields, **kwargs)
                capture.merged = True
                return written
        return self.wrapped.kv_batch_put(keys=keys, partition_id=partition_id, fields=fields, **kwargs)


def install_verl_queue() -> None:
    """Make verl's ``trainer_base.tq`` a :class:`VerlQueue` (once; it wraps whatever was there)."""
    import importlib

    module = importlib.import_module(VERL_TRAINER_MODULE)
    if not isinstance(module.tq, VerlQueue):
        module.tq = VerlQueue(module.tq)


@contextmanager
def advantage_capture(keys: list[str], extra_fields: list[str], on_put: PutHook) -> Iterator[AdvantageCapture]:
    """While inside, this thread's verl get/put on ``keys`` carry ``extra_fields`` and ``on_put``'s fields.

    Check ``merged`` afterwards: False means verl's code path put nothing for
    these keys, and the caller must do its own I/O.
    """
    install_verl_queue()
    capture = AdvantageCapture(list(keys), list(extra_fields), on_put)
    previous = getattr(_current, "capture", None)
    _current.capture = capture
    try:
        yield capture
    finally:
        _current.capture = previous
