"""What a field of a checkpoint's state may hold, checked when the state is loaded back.

``torch.load(weights_only=True)`` keeps code out of a state file, not wrong values (a position of ``-5``), so
each ``load_state_dict`` reads its fields through these checks; :class:`StateFieldError` names the field and
the value, and the resume adds the file and the component.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from .errors import DataFlexError

#: The largest count a checkpoint or a ledger may hold (int64's largest).
INT64_MAX = 2**63 - 1
#: What a generator's state is: ``torch.Generator().get_state()`` (a fixed number of bytes on the CPU).
GENERATOR_STATE_BYTES = torch.Generator().get_state().numel()


class StateFieldError(DataFlexError, ValueError):
    """A field of a saved state that no run writes: ``field`` holds ``value``, which breaks ``rule``."""

    def __init__(self, field: str, value: Any, rule: str) -> None:
        self.field, self.value, self.rule = field, value, rule
        super().__init__(f"state[{field!r}] is {shown(value)}: {rule}")


def shown(value: Any) -> str:
    """A value as a message shows it: short, a tensor by its dtype and shape."""
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


def field(state: Mapping[str, Any], name: str) -> Any:
    """``state[name]``, or :class:`StateFieldError` when the state lacks it."""
    if name not in state:
        raise StateFieldError(name, "missing", "the state a run saves has this field")
    return state[name]


def count(state: Mapping[str, Any], name: str, *, low: int = 0, high: int = INT64_MAX) -> int:
    """``state[name]`` as a whole number in ``[low, high]`` (an ``int``, never a bool, a float or a string)."""
    value = field(state, name)
    if isinstance(value, torch.Tensor) and value.dim() == 0 and not value.is_floating_point():
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, int):
        raise StateFieldError(name, value, "it is a whole number")
    if not low <= value <= high:
        raise StateFieldError(name, value, f"it lies between {low} and {high}")
    return value


def rows(
    state: Mapping[str, Any], name: str, population: int, *, every: bool = False, distinct: bool = True
) -> torch.Tensor:
    """``state[name]`` as int64 dataset rows (a 1-D integer tensor or list): each in ``[0, population)``, none
    twice (unless not ``distinct``: a drawn block may repeat a prompt), and with ``every`` each row once (a
    permutation of the dataset's rows)."""
    value = field(state, name)
    if isinstance(value, (list, tuple)) and not value:
        return torch.zeros(0, dtype=torch.long)
    try:
        tensor = torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError, OverflowError):
        raise StateFieldError(name, value, "it is a list of dataset rows") from None
    if tensor.dim() != 1 or tensor.is_floating_point() or tensor.is_complex() or tensor.dtype == torch.bool:
        raise StateFieldError(name, value, "it is a 1-D integer tensor of dataset rows")
    tensor = tensor.to(torch.long)
    size = population if every else None
    if size is not None and len(tensor) != size:
        raise StateFieldError(
            name, value, f"it holds each of the dataset's {population} rows once, but has {len(tensor)} entries"
        )
    if distinct and len(tensor) > population:
        raise StateFieldError(name, value, f"it has {len(tensor)} entries for a dataset of {population} rows")
    if len(tensor):
        least, most = (int(v) for v in torch.aminmax(tensor))
        if least < 0 or most >= population:
            bad = int(least if least < 0 else most)
            raise StateFieldError(name, value, f"it holds row {bad}, outside the dataset's rows 0..{population - 1}")
        if distinct and len(torch.unique(tensor)) != len(tensor):
            raise StateFieldError(name, value, "it lists a row twice")
    return tensor.clone()


def generator_state(state: Mapping[str, Any], name: str) -> torch.Tensor:
    """``state[name]`` as a CPU generator's state: a uint8 tensor of :data:`GENERATOR_STATE_BYTES` bytes."""
    value = field(state, name)
    if not isinstance(value, torch.Tensor) or value.dtype != torch.uint8 or value.shape != (GENERATOR_STATE_BYTES,):
        raise StateFieldError(name, value, f"a generator's state is a uint8 tensor of {GENERATOR_STATE_BYTES} bytes")
    return value.clone()
