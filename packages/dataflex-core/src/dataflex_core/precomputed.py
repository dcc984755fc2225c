"""The step's prepared values: one object per step, handed down with the batch.

A step hands one batch to a scorer, an actuator and its own weight and metric
passes, and each needs the same derived values: which tokens and rows are
valid, how many valid tokens each row has, and the dense group index of the
``uid`` strings (a sort of tens of thousands of strings). The host calls
:func:`prepare_batch` once per step; it puts a :class:`StepInputs` in
``batch.meta_info[STEP_INPUTS_KEY]``, and the helpers that take the batch
(:func:`~dataflex_core.valid_token_mask`, :func:`~dataflex_core.valid_sample_mask`,
:func:`~dataflex_core.valid_token_counts`, :func:`~dataflex_core.response_token_mask`,
:func:`~dataflex_core.actuator_scores`, :func:`~dataflex_core.mean_one`) read it from there. Each value is
computed the first time it is read. Helpers given a raw ``uid`` array or mask (``group_index(uid)``,
``masked_seq_sum(x, mask)``) compute from what they are given.

The values are used while the batch still holds the ``response_mask`` they were derived from (the same
tensor, not written since) and an equal ``is_padding``; otherwise the helpers compute afresh. The tensors
they hand out are shared by every caller of the step: treat them as read-only.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import numpy as np
import torch

from .blockwise import row_counts

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


def compute_valid_tokens(response_mask: torch.Tensor, padding: torch.Tensor | None) -> torch.Tensor:
    """``(bs, L)`` bool: response tokens of rows that are not padding."""
    mask = response_mask.bool()
    if padding is not None:
        mask = mask & ~padding.to(mask.device).bool().reshape(-1, 1)
    return mask


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
        return compute_valid_tokens(self.response_tokens, self.padding)

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


def prepare_batch(batch: Any) -> Any:
    """Put a fresh :class:`StepInputs` in ``batch.meta_info[STEP_INPUTS_KEY]``; returns ``batch``.

    The host's contract: call it once per step, on the batch it hands to the
    components, after the batch holds every field they will see (``response_mask``,
    ``is_padding`` when the framework pads, ``uid`` when groups are used) and
    before the first component or helper call. Nothing is computed here.

    :param batch: a :class:`~dataflex_core.Batch` (or any DataProto-shaped object with
        ``batch``, ``non_tensor_batch`` and a ``meta_info`` dict) holding ``response_mask``.
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
