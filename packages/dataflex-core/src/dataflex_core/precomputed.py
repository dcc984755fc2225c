"""Values every part of a step would otherwise recompute, computed once per step.

A step hands one batch to a scorer, an actuator and the host's own checks, and
each of them needs the same derived values: which tokens and rows are valid,
how many valid tokens each row has, and the dense group index of the ``uid``
strings (a sort of tens of thousands of strings). Recomputed by every caller,
they cost more than the components' own work.

The host calls :func:`prepare_batch` once per step on the batch it hands to
components. That attaches a :class:`StepInputs` to the batch
(``batch.meta_info[STEP_INPUTS_KEY]``); core's helpers
(:func:`~dataflex_core.valid_token_mask`, :func:`~dataflex_core.valid_sample_mask`,
:func:`~dataflex_core.valid_token_counts`, :func:`~dataflex_core.response_token_mask`,
:func:`~dataflex_core.group_index`, :func:`~dataflex_core.masked_seq_sum` and its
siblings, :func:`~dataflex_core.actuator_scores`, :func:`~dataflex_core.mean_one`)
read a value from it when present and compute it as before otherwise, so a
plugin written against the helpers gets the saving without a change. Each
value is computed the first time a helper asks for it, then reused.

A value is used only while the batch still holds what it was derived from:
the same ``response_mask`` tensor, unmodified (torch's version counter), an
``is_padding`` with the same content (or none, when no row was padding), and
the same ``uid`` array. Otherwise the helpers compute afresh, so a stale value
is never read. Returned tensors are shared between callers: treat them as
read-only (an in-place change is detected and the value recomputed).
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np
import torch

from .blockwise import bool_and_row_counts, masked_row_any_nonzero, row_counts

#: Where :func:`prepare_batch` puts the :class:`StepInputs` of a batch.
STEP_INPUTS_KEY = "dataflex_step_inputs"

#: ``id(uid array)`` / ``id(response_mask)`` -> the live StepInputs derived from it, so helpers
#: that receive the raw array or mask (``group_index(uid)``, ``masked_seq_sum(x, mask)``) find it.
_BY_UID: weakref.WeakValueDictionary[int, StepInputs] = weakref.WeakValueDictionary()
_BY_MASK: weakref.WeakValueDictionary[int, StepInputs] = weakref.WeakValueDictionary()
#: ``id(valid tokens)`` -> the live StepInputs that handed them out, so the step's weight and metric passes
#: (:func:`valid_row_counts`) find the counts already made rather than recount the mask.
_BY_VALID: weakref.WeakValueDictionary[int, StepInputs] = weakref.WeakValueDictionary()


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


class _Cached:
    """One derived tensor and the version it had when stored (a caller's in-place change invalidates it)."""

    __slots__ = ("value", "version")

    def __init__(self, value: Any) -> None:
        self.value = value
        self.version = _versions(value)

    def fresh(self) -> bool:
        return _versions(self.value) == self.version


def _versions(value: Any) -> tuple[int, ...]:
    """Version counters of the tensors in ``value`` (a tensor, or a tuple holding some)."""
    items = value if isinstance(value, tuple) else (value,)
    return tuple(item._version for item in items if isinstance(item, torch.Tensor))


class StepInputs:
    """The derived values of one step's batch, computed on first use.

    Built by :func:`prepare_batch`; read through core's helpers rather than directly.
    """

    def __init__(self, response_mask: torch.Tensor, padding: torch.Tensor | None, uid: Any) -> None:
        self.response_mask = response_mask
        self._mask_version = response_mask._version
        self.padding = padding
        self._padding_version = padding._version if padding is not None else None
        self.uid = uid
        self._uid_version = _versions(uid)
        self._values: dict[Any, _Cached] = {}
        _BY_MASK[id(response_mask)] = self
        if uid is not None:
            _BY_UID[id(uid)] = self

    # -- is it still the batch's? -------------------------------------------------------
    def mask_unchanged(self, response_mask: Any) -> bool:
        return response_mask is self.response_mask and response_mask._version == self._mask_version

    def uid_unchanged(self, uid: Any) -> bool:
        return uid is self.uid and _versions(uid) == self._uid_version

    def matches(self, batch: Any) -> bool:
        """True while ``batch`` holds the masks these values were derived from (groups are matched by ``uid``)."""
        tensors = batch.batch
        if not self.mask_unchanged(tensors.get("response_mask", None)):
            return False
        padding = tensors.get("is_padding", None)
        if padding is self.padding and (padding is None or padding._version == self._padding_version):
            return True
        # A batch rebuilt without the padding field (or with an equal one) has the same valid units.
        if padding is None:
            return not self._has_padding()
        if self.padding is None:
            return not bool(padding.any())
        return padding.shape == self.padding.shape and torch.equal(
            padding.bool(), self.padding.bool().to(padding.device)
        )

    # -- the values ---------------------------------------------------------------------
    def _get(self, key: Any, compute) -> Any:
        cached = self._values.get(key)
        if cached is None or not cached.fresh():
            cached = self._values[key] = _Cached(compute())
        return cached.value

    def _has_padding(self) -> bool:
        return self._get("has_padding", lambda: self.padding is not None and bool(self.padding.any()))

    def response_tokens(self) -> torch.Tensor:
        """``(bs, L)`` bool ``response_mask`` (padding rows included); on the CPU its row counts
        (:meth:`response_counts`) come from the same pass over the mask."""
        cached = self._values.get("response_tokens")
        if cached is not None and cached.fresh():
            return cached.value
        made = bool_and_row_counts(self.response_mask)
        if made is None:
            return self._get("response_tokens", lambda: self.response_mask.bool())
        tokens, counts = made
        self._values["response_tokens"], self._values["response_counts"] = _Cached(tokens), _Cached(counts)
        return tokens

    def response_counts(self) -> torch.Tensor:
        """``(bs,)`` int64 response tokens per row."""
        tokens = self.response_tokens()  # a fresh mask brings its counts (the same pass)
        return self._get("response_counts", lambda: row_counts(tokens))

    def padding_is_empty(self) -> bool:
        """True when no padding row has a response token (verl's padding rows: an empty ``response_mask``), so the
        response tokens are the valid tokens; read on the padding rows alone."""
        if not self._has_padding():
            return True
        return self._get("padding_is_empty", lambda: not bool(self.response_tokens()[self._padding_rows()].any()))

    def _padding_rows(self) -> torch.Tensor:
        return self.padding.to(self.response_mask.device).bool().nonzero(as_tuple=True)[0]

    def valid_tokens(self) -> torch.Tensor:
        """``(bs, L)`` bool: response tokens of non-padding rows (the response tokens themselves, no copy, when
        the padding rows are empty)."""
        if self.padding_is_empty():
            tokens = self.response_tokens()
        else:
            tokens = self._get("valid_tokens", lambda: compute_valid_tokens(self.response_tokens(), self.padding))
        _BY_VALID[id(tokens)] = self
        return tokens

    def token_counts(self) -> torch.Tensor:
        """``(bs,)`` int64 valid tokens per row (0 on padding and empty rows)."""
        if self.padding_is_empty():
            return self.response_counts()
        return self._get("token_counts", lambda: row_counts(self.valid_tokens()))

    def valid_rows(self) -> torch.Tensor:
        """``(bs,)`` bool: rows that are not padding and have at least one response token."""
        return self._get("valid_rows", lambda: self.token_counts() > 0)

    def moving_rows(self, advantages: torch.Tensor) -> torch.Tensor:
        """``(bs,)`` bool: rows with a nonzero advantage on a response token, one pass per ``advantages`` tensor
        (a mechanism's wasted share and the compute counters read the same pass; an in-place change recomputes)."""

        def compute() -> tuple[torch.Tensor, torch.Tensor]:
            if advantages.dim() != 2:
                return advantages, advantages.reshape(-1) != 0
            tokens = self.response_tokens()
            return advantages, masked_row_any_nonzero(advantages, tokens)

        return self._get(("moving_rows", id(advantages)), compute)[1]

    def groups(self, device: torch.device | str | None = None) -> tuple[torch.Tensor, int]:
        """Dense group index of ``uid`` on ``device`` (default: the CPU, or the tensor's device) and ``G``."""
        if self.uid is None:
            raise KeyError("this batch has no non_tensor_batch['uid'] to group by")
        index, count = self._get("groups", lambda: dense_group_index(self.uid))
        if device is None or torch.device(device) == index.device:
            return index, count
        key = ("groups", str(torch.device(device)))
        return self._get(key, lambda: index.to(device)), count

    def select_rows(self, rows: torch.Tensor, response_mask: torch.Tensor, padding: Any, uid: Any) -> StepInputs:
        """These values restricted to ``rows`` (an index tensor), for the batch ``Batch.select_rows`` built."""
        sub = StepInputs(response_mask, padding, uid)
        for key in ("response_tokens", "response_counts", "valid_tokens", "token_counts", "valid_rows"):
            cached = self._values.get(key)
            if cached is not None and cached.fresh():
                value = cached.value
                sub._values[key] = _Cached(value[rows.to(value.device)])
        cached = self._values.get("groups")
        if cached is not None and cached.fresh() and uid is not None:
            index, _ = cached.value
            # Renumber densely: the rows' group ids keep their sorted order, as grouping their uid would.
            kept, inverse = torch.unique(index[rows.to(index.device)], return_inverse=True)
            sub._values["groups"] = _Cached((inverse, int(kept.numel())))
        return sub


def prepare_batch(batch: Any) -> Any:
    """Attach a :class:`StepInputs` to ``batch`` so the step's helpers compute shared values once; returns ``batch``.

    The host's contract: call it once per step, on the batch it hands to the
    components, after the batch holds every field they will see (``response_mask``,
    ``is_padding`` when the framework pads, ``uid`` when groups are used) and
    before the first component or helper call. Nothing is computed here: each
    value is computed when a helper first needs it. Calling it again starts
    afresh (the previous values are dropped).

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
    if not isinstance(meta, dict):
        return None
    inputs = meta.get(STEP_INPUTS_KEY)
    if isinstance(inputs, StepInputs) and inputs.matches(batch):
        return inputs
    return None


def inputs_for_uid(uid: Any) -> StepInputs | None:
    """The live :class:`StepInputs` prepared from this very ``uid`` array (or tensor), if any."""
    inputs = _BY_UID.get(id(uid))
    if inputs is None or not inputs.uid_unchanged(uid):
        return None
    return inputs


def valid_row_counts(valid_tokens: torch.Tensor) -> torch.Tensor:
    """``(bs,)`` int64 set tokens per row of ``valid_tokens``: the prepared counts when these are a prepared
    batch's valid tokens (:meth:`StepInputs.valid_tokens`, unmodified), a count otherwise."""
    inputs = _BY_VALID.get(id(valid_tokens))
    if inputs is not None and inputs.mask_unchanged(inputs.response_mask):
        held = inputs.valid_tokens()
        if held is valid_tokens:
            return inputs.token_counts()
    return row_counts(valid_tokens)


def inputs_for_mask(mask: Any) -> StepInputs | None:
    """The live :class:`StepInputs` whose ``response_mask`` is this very, unmodified tensor, if any."""
    inputs = _BY_MASK.get(id(mask))
    if inputs is None or not inputs.mask_unchanged(mask):
        return None
    return inputs
