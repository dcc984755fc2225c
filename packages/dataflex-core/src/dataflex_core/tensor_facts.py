"""What a pass over one of the step's tensors established, kept for the step's next reader of that tensor.

The step reads some ``(bs, L)`` tensors several times for what one pass already learned: the contract
checks the scorer's scores finite and the actuator's :func:`~dataflex_core.actuator_scores` checks them
again; the normalisation scales the factor, then the step checks it finite and the weight metrics read it
again. At ``(bs, L)`` each of those reads is a pass over memory. The pass that learns a fact records it
here against the tensor it read (and the validity mask it read it under); the next reader asks first and
reads the tensor only when the fact is not known.

A fact holds while the tensor and the mask are the very objects it was recorded for and neither changed
(torch's version counter, which the step's component calls compare after every call, :mod:`.step.calls`);
it is forgotten with the tensor. As for the step's prepared values (:mod:`.precomputed`), a write through
a numpy view or ``.data`` moves no counter: tensors the step hands out are read-only.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch.utils.weak import WeakIdKeyDictionary

#: The scores or weights are finite on every valid unit of the mask (value: ``True``).
FINITE = "finite"
#: The weight metrics' statistics of a factor over its valid tokens (:mod:`.step.factor_pass`).
ROW_STATS = "row_stats"

#: tensor -> {what: (tensor version, weak mask, mask version, value)}; entries leave with their tensor.
_FACTS: WeakIdKeyDictionary = WeakIdKeyDictionary()


def remember(tensor: torch.Tensor, what: str, value: Any, *, valid: torch.Tensor | None = None) -> None:
    """Record ``value`` as ``what`` is true of ``tensor`` (read under the mask ``valid``, when one was used)."""
    mask = None if valid is None else weakref.ref(valid)
    facts = _FACTS.get(tensor)
    if facts is None:
        facts = _FACTS[tensor] = {}
    facts[what] = (tensor._version, mask, None if valid is None else valid._version, value)


def recall(tensor: torch.Tensor, what: str, *, valid: torch.Tensor | None = None) -> Any:
    """The value recorded as ``what`` for this very ``tensor`` under this very ``valid``, both unchanged since;
    ``None`` when there is none."""
    facts = _FACTS.get(tensor)
    fact = None if facts is None else facts.get(what)
    if fact is None:
        return None
    version, mask, mask_version, value = fact
    if tensor._version != version:
        return None
    if mask is None or valid is None:
        return value if mask is None and valid is None else None
    if mask() is not valid or valid._version != mask_version:
        return None
    return value
