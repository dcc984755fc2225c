"""The step's prepared values, and the masked row reductions that derive them.

A scorer, an actuator and the step's own passes all need the same derived values (valid tokens and rows, valid
tokens per row, the dense group index of ``uid``). :func:`prepare_batch` puts one lazily computed
:class:`StepInputs` on the batch once per step; the helpers that take the batch read it while the batch still
holds the masks it was derived from, and compute afresh otherwise. What they hand out is shared: read-only.

On the CPU the row reductions build no ``(bs, L)`` temporary (it would cost as much as the reduction and raise
the step's peak memory): they go block by block through one cache-sized buffer. Elsewhere, and under autograd,
the plain expression is used.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import cached_property
from typing import Any

import numpy as np
import torch

#: Elements per block of rows with one torch thread: 4 MiB of float32, held by the last-level cache.
BLOCK_ELEMENTS = 1 << 20
#: With several torch threads, blocks stay under torch's parallel grain (``at::internal::GRAIN_SIZE``,
#: 32768 elements), so each op on a block runs on the calling thread: an op on more elements is an
#: OpenMP parallel region, and on oversubscribed cores every region waits until all of torch's threads
#: get a core (with 2 threads at load 4, each op on a 4 MiB block took 10-28 ms instead of under 1).
SERIAL_ELEMENTS = (1 << 15) - 1


def block_rows(length: int) -> int:
    """Rows per block for rows of ``length`` elements (fewer with several torch threads, see above)."""
    elements = BLOCK_ELEMENTS if torch.get_num_threads() == 1 else min(BLOCK_ELEMENTS, SERIAL_ELEMENTS)
    return max(1, elements // max(1, length))


def _row_blocks(x: torch.Tensor) -> Iterator[slice] | None:
    """Consecutive row ranges of a CPU 2-D tensor larger than a block that autograd does not track, one block
    each; ``None`` for any other tensor (reduced in one go)."""
    if x.device.type != "cpu" or x.dim() != 2 or (x.requires_grad and torch.is_grad_enabled()):
        return None
    rows, step = x.shape[0], block_rows(x.shape[1])
    if rows <= step:
        return None
    return (slice(start, min(start + step, rows)) for start in range(0, rows, step))


def count_set(mask: torch.Tensor) -> int:
    """Set positions of a mask (any dtype, nonzero = set), as an int (torch counts a whole tensor in place)."""
    return int(torch.count_nonzero(mask))


def row_counts(mask: torch.Tensor) -> torch.Tensor:
    """``(bs,)`` int64: set positions per row of a ``(bs, L)`` mask (any dtype, nonzero = set), block by block on
    the CPU (counting along a dim makes a ``(bs, L)`` compare first)."""
    blocks = _row_blocks(mask)
    if blocks is None:
        return torch.count_nonzero(mask, dim=-1)
    out = torch.empty(mask.shape[0], dtype=torch.int64)
    for rows in blocks:
        out[rows] = torch.count_nonzero(mask[rows], dim=-1)
    return out


def masked_row_reduce(
    x: torch.Tensor,
    mask: torch.Tensor,
    fill: float,
    reduce: Callable[[torch.Tensor], torch.Tensor],
    magnitude: bool = False,
) -> torch.Tensor:
    """``reduce`` (over the last dim) of ``where(mask, x, fill)``, or of ``|x|`` there with ``magnitude``.

    :param mask: bool, shaped like ``x``.
    """
    fill_value = torch.full((), fill, dtype=x.dtype, device=x.device)
    blocks = _row_blocks(x) if mask.shape == x.shape else None
    if blocks is None:
        return reduce(torch.where(mask, x.abs() if magnitude else x, fill_value))
    buffer = torch.empty((block_rows(x.shape[1]), x.shape[1]), dtype=x.dtype)
    out: torch.Tensor | None = None
    for rows in blocks:
        block = buffer[: rows.stop - rows.start]
        torch.where(mask[rows], x[rows], fill_value, out=block)
        if magnitude:
            block.abs_()
        reduced = reduce(block)
        if out is None:
            out = torch.empty(x.shape[0], dtype=reduced.dtype)
        out[rows] = reduced
    assert out is not None
    return out


def moving_rows(advantages: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """``(bs,)`` bool: rows with a nonzero advantage on a response token (block by block on the CPU)."""
    if advantages.dim() != 2:
        return advantages.reshape(-1) != 0
    return masked_row_reduce(advantages, response_mask.bool(), 0.0, lambda block: (block != 0).any(-1))


#: Where :func:`prepare_batch` puts the :class:`StepInputs` of a batch.
STEP_INPUTS_KEY = "dataflex_step_inputs"


def dense_group_index(uid: Any, device: torch.device | str | None = None) -> tuple[torch.Tensor, int]:
    """Group ids (any hashable per sample) -> dense ``0..G-1`` indices in sorted id order, and ``G``."""
    if isinstance(uid, torch.Tensor):
        _, inverse = torch.unique(uid, return_inverse=True)
        return inverse.to(device or uid.device), int(inverse.max().item()) + 1 if inverse.numel() else 0
    arr = np.asarray(uid)
    if arr.dtype == object:
        arr = arr.astype(str)
    _, inverse = np.unique(arr, return_inverse=True)
    index = torch.from_numpy(inverse.reshape(-1).astype(np.int64))
    return index.to(device or "cpu"), int(inverse.max()) + 1 if inverse.size else 0


class StepInputs:
    """The derived values of one step's batch, each computed on first read.

    :param response_mask: ``(bs, L)`` the batch's ``response_mask`` (any dtype; nonzero is a token).
    :param padding: ``(bs,)`` bool ``is_padding``, or ``None``.
    :param uid: the ``uid`` array (or tensor) of the rows, or ``None``.
    """

    def __init__(self, response_mask: torch.Tensor, padding: torch.Tensor | None, uid: Any) -> None:
        self.response_mask = response_mask
        self.mask_version = response_mask._version
        self.padding = padding
        self.uid = uid

    def matches(self, batch: Any) -> bool:
        """True while ``batch`` holds the masks these values were derived from."""
        mask = batch.batch.get("response_mask", None)
        if mask is not self.response_mask or mask._version != self.mask_version:
            return False
        padding = batch.batch.get("is_padding", None)
        if padding is self.padding:
            return True
        # A batch rebuilt without the padding field (or with an equal one) has the same valid units.
        if padding is None or self.padding is None:
            return not self.has_padding and (padding is None or not bool(padding.any()))
        held = self.padding.to(padding.device).bool()
        return padding.shape == held.shape and torch.equal(padding.bool(), held)

    @cached_property
    def has_padding(self) -> bool:
        return self.padding is not None and bool(self.padding.any())

    @cached_property
    def response_tokens(self) -> torch.Tensor:
        """``(bs, L)`` bool ``response_mask`` (padding rows included)."""
        return self.response_mask.bool()

    @cached_property
    def response_counts(self) -> torch.Tensor:
        """``(bs,)`` int64 response tokens per row."""
        return row_counts(self.response_tokens)

    @cached_property
    def padding_is_empty(self) -> bool:
        """True when no padding row has a response token (verl's padding rows: an empty ``response_mask``), so
        the response tokens are the valid tokens."""
        if not self.has_padding:
            return True
        return not bool(self.response_counts[self.padding.to(self.response_counts.device).bool()].any())

    @cached_property
    def valid_tokens(self) -> torch.Tensor:
        """``(bs, L)`` bool: response tokens of non-padding rows (the response tokens themselves when the
        padding rows are empty)."""
        if self.padding_is_empty:
            return self.response_tokens
        return self.response_tokens & ~self.padding.to(self.response_mask.device).bool().reshape(-1, 1)

    @cached_property
    def token_counts(self) -> torch.Tensor:
        """``(bs,)`` int64 valid tokens per row (0 on padding and empty rows)."""
        if self.padding_is_empty:
            return self.response_counts
        return row_counts(self.valid_tokens)

    @cached_property
    def valid_rows(self) -> torch.Tensor:
        """``(bs,)`` bool: rows that are not padding and have at least one response token."""
        return self.token_counts > 0

    @cached_property
    def groups(self) -> tuple[torch.Tensor, int]:
        """Dense group index of ``uid`` and the number of groups ``G``."""
        if self.uid is None:
            raise KeyError("this batch has no non_tensor_batch['uid'] to group by")
        return dense_group_index(self.uid)

    def select_rows(self, rows: torch.Tensor, response_mask: torch.Tensor, padding: Any, uid: Any) -> StepInputs:
        """These values restricted to ``rows`` (an index tensor), for the batch ``Batch.select_rows`` built."""
        sub = StepInputs(response_mask, padding, uid)
        for name in ("response_tokens", "response_counts", "valid_tokens", "token_counts", "valid_rows"):
            if name in self.__dict__:  # computed already: restrict it rather than recompute it
                value = self.__dict__[name]
                sub.__dict__[name] = value[rows.to(value.device)]
        if "groups" in self.__dict__ and uid is not None:
            index, _ = self.groups
            # Renumber densely: the rows' group ids keep their sorted order, as grouping their uid would.
            kept, inverse = torch.unique(index[rows.to(index.device)], return_inverse=True)
            sub.__dict__["groups"] = (inverse, int(kept.numel()))
        return sub

    @cached_property
    def for_components(self) -> StepInputs:
        """These values as a loss mechanism's components see the batch: the framework's padding rows as the empty
        rows they are. Itself when the padding rows have no response token (verl's); else the values of
        ``response_mask`` with those rows emptied, this step's counts shared (nothing is counted again)."""
        if self.padding_is_empty:
            return self
        mask, real = self.response_mask, ~self.padding.to(self.response_mask.device).bool()
        view = StepInputs(mask * real.unsqueeze(-1).to(mask.dtype), self.padding, self.uid)
        view.__dict__.update(response_tokens=self.valid_tokens, response_counts=self.token_counts)
        if "groups" in self.__dict__:
            view.__dict__["groups"] = self.groups
        return view


def prepare_batch(batch: Any) -> Any:
    """Put a fresh :class:`StepInputs` in ``batch.meta_info[STEP_INPUTS_KEY]``; returns ``batch``.

    The host's contract: call it once per step, on the batch it hands to the components, after the batch holds every
    field they will see (``response_mask``, ``is_padding`` when the framework pads, ``uid`` when groups are used) and
    before the first component or helper call. Nothing is computed here.

    :param batch: a :class:`~dataflex_core.Batch` (or any DataProto-shaped object with ``batch``, ``non_tensor_batch``
        and a ``meta_info`` dict) holding ``response_mask``.
    :raises TypeError: ``batch`` has no ``meta_info`` dict or no ``response_mask`` tensor.
    """
    meta = getattr(batch, "meta_info", None)
    tensors = getattr(batch, "batch", None)
    mask = tensors.get("response_mask") if tensors is not None else None
    if not isinstance(meta, dict) or not isinstance(mask, torch.Tensor):
        raise TypeError(
            f"prepare_batch needs a DataProto-shaped batch with a meta_info dict and a response_mask tensor, "
            f"got {type(batch).__name__}; pass the dataflex_core.Batch the components will see"
        )
    non_tensor = getattr(batch, "non_tensor_batch", None) or {}
    meta[STEP_INPUTS_KEY] = StepInputs(mask, tensors.get("is_padding", None), non_tensor.get("uid"))
    return batch


def step_inputs(batch: Any) -> StepInputs | None:
    """The batch's :class:`StepInputs` when it was prepared and still matches the batch, else ``None``."""
    meta = getattr(batch, "meta_info", None)
    inputs = meta.get(STEP_INPUTS_KEY) if isinstance(meta, dict) else None
    if isinstance(inputs, StepInputs) and inputs.matches(batch):
        return inputs
    return None


def inputs_of(batch: Any) -> StepInputs:
    """The batch's :class:`StepInputs`, or its masks' alone made now (not stored) when it was not prepared: a
    component that does not declare ``needs_groups`` never has its ``uid`` read."""
    inputs = step_inputs(batch)
    if inputs is None:
        inputs = StepInputs(batch.batch["response_mask"], batch.batch.get("is_padding", None), None)
    return inputs
