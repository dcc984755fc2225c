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

#: The scores or weights are finite on every valid unit of the mask (value: ``True``).
FINITE = "finite"
#: The weight metrics' statistics of a factor over its valid tokens (:mod:`.step.factor_pass`).
ROW_STATS = "row_stats"
#: ``(least, largest)`` of a 1-D column, NaN when it holds one: the state file's check of a resumed ledger
#: (:mod:`.step.state_checks`) takes them, the ledger's own check of the same columns reads them
#: (:func:`.ledger_file.check_columns`).
EXTREMES = "extremes"

#: ``id(tensor)`` -> (a weak reference to it, {what: (tensor version, weak mask, mask version, value)}); an entry
#: leaves when its tensor is freed (before its id can be reused).
_FACTS: dict[int, tuple[weakref.ref, dict[str, tuple[int, Any, int | None, Any]]]] = {}


def _forget(key: int) -> Any:
    return lambda _: _FACTS.pop(key, None)


def remember(tensor: torch.Tensor, what: str, value: Any, *, valid: torch.Tensor | None = None) -> None:
    """Record ``value`` as ``what`` is true of ``tensor`` (read under the mask ``valid``, when one was used)."""
    key = id(tensor)
    held = _FACTS.get(key)
    if held is None or held[0]() is not tensor:
        held = _FACTS[key] = (weakref.ref(tensor, _forget(key)), {})
    mask = None if valid is None else weakref.ref(valid)
    held[1][what] = (tensor._version, mask, None if valid is None else valid._version, value)


def recall(tensor: torch.Tensor, what: str, *, valid: torch.Tensor | None = None) -> Any:
    """The value recorded as ``what`` for this very ``tensor`` under this very ``valid``, both unchanged since;
    ``None`` when there is none."""
    held = _FACTS.get(id(tensor))
    if held is None or held[0]() is not tensor:
        return None
    fact = held[1].get(what)
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
