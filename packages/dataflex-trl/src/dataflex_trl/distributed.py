"""The step's batch across processes: gathered rows in, the main process's result out.

Under accelerate each process holds a slice of the generation batch, in
process order, as TRL lays it out (``_generate_and_score_completions`` slices
its gathered advantages the same way). Group statistics and the mean-one
normalisation must see the whole step's batch, so the per-row fields are
gathered (response length padded to the longest process's), the step runs once
on the main process, and its result is broadcast and sliced back. Running the
components on one process keeps stateful and random components consistent; an
error raised there is re-raised on every process instead of leaving the others
waiting.
"""

from __future__ import annotations

from typing import Any

import torch
from accelerate.utils import broadcast_object_list, gather, gather_object


def gather_rows(accelerator: Any, value: torch.Tensor) -> torch.Tensor:
    """``(b, ...)`` on each process -> ``(B, ...)`` rows of every process in process order; ``(b, L)`` fields are
    right-padded with 0 to the longest ``L`` first."""
    if accelerator.num_processes == 1:
        return value
    if value.dim() >= 2:
        value = accelerator.pad_across_processes(value, dim=1, pad_index=0, pad_first=False)
    return gather(value.contiguous())


def gather_values(accelerator: Any, values: list[Any]) -> list[Any]:
    """A per-row list on each process -> the rows of every process in process order."""
    if accelerator.num_processes == 1:
        return list(values)
    return list(gather_object(list(values)))


def local_rows(accelerator: Any, rows_per_process: int) -> slice:
    """This process's rows of the gathered batch."""
    start = accelerator.process_index * rows_per_process
    return slice(start, start + rows_per_process)


def from_main(accelerator: Any, compute: Any) -> Any:
    """``compute()`` on the main process, its value on every process; its exception raised on every process."""
    if accelerator.num_processes == 1:
        return compute()
    payload: list[Any] = [None]
    if accelerator.is_main_process:
        try:
            payload[0] = ("ok", compute())
        except Exception as exc:  # noqa: BLE001 - re-raised on every process below
            payload[0] = ("error", exc)
    broadcast_object_list(payload, from_process=0)
    status, value = payload[0]
    if status == "error":
        raise value
    return value
